//! NEON twins of the recurrent kernels (`kernels::recurrent`): the scan's 16 lanes are four
//! 4-lane registers (lanes 0-3, 4-7, 8-11, 12-15); four rows run together (their loads of B
//! and C shared, their sums independent).

use std::arch::aarch64::*;

use crate::kernels::recurrent_scan::{check_scan, RecurrentKernels, SCAN_LANES};
use crate::kernels::scalar::recurrent::scan_tail;

/// Installs the NEON scan.
///
/// # Safety
/// The CPU must support NEON.
pub(crate) unsafe fn install(r: &mut RecurrentKernels) {
    fn scan(s: &mut [f32], x: &[f32], dt_sp: f32, da: f32, b: &[f32], c: &[f32], y: &mut [f32]) {
        // SAFETY: only installed by `install`, whose caller verified NEON.
        unsafe { ssm_scan(s, x, dt_sp, da, b, c, y) }
    }
    r.ssm_scan = scan;
}

/// The scan, bit-identical to `scalar::recurrent::ssm_scan`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn ssm_scan(
    state: &mut [f32],
    x: &[f32],
    dt_sp: f32,
    da: f32,
    b: &[f32],
    c: &[f32],
    y: &mut [f32],
) {
    let (rows, ds) = check_scan(state, x, b, c, y);
    if ds == 0 {
        y.fill(0.0);
        return;
    }
    let mut i = 0;
    while i + 4 <= rows {
        // SAFETY: rows i..i+4 lie in `state` (checked lengths); same target features.
        let s = unsafe {
            rows_n::<4>(
                &mut state[i * ds..(i + 4) * ds],
                &x[i..i + 4],
                dt_sp,
                da,
                b,
                c,
            )
        };
        y[i..i + 4].copy_from_slice(&s);
        i += 4;
    }
    while i < rows {
        // SAFETY: as above, one row.
        let s = unsafe {
            rows_n::<1>(
                &mut state[i * ds..(i + 1) * ds],
                &x[i..i + 1],
                dt_sp,
                da,
                b,
                c,
            )
        };
        y[i] = s[0];
        i += 1;
    }
}

/// `R` rows of the scan (`state` holds exactly them), each in the scalar twin's order.
///
/// # Safety
/// The CPU must support NEON; `state` is `R * b.len()`, `c` as long as `b`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn rows_n<const R: usize>(
    state: &mut [f32],
    x: &[f32],
    dt_sp: f32,
    da: f32,
    b: &[f32],
    c: &[f32],
) -> [f32; R] {
    let ds = b.len();
    let main = ds - ds % SCAN_LANES;
    let vda = vdupq_n_f32(da);
    let x_dt: [f32; R] = std::array::from_fn(|r| x[r] * dt_sp);
    let vx: [float32x4_t; R] = std::array::from_fn(|r| vdupq_n_f32(x_dt[r]));
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    let sp = state.as_mut_ptr();
    let mut k = 0;
    while k < main {
        for (q, acc_q) in (0..4).map(|q| (q, 4 * q)) {
            // SAFETY: k + acc_q + 4 <= main <= ds = b.len() = c.len(), and row r's too.
            unsafe {
                let bv = vld1q_f32(b.as_ptr().add(k + acc_q));
                let cv = vld1q_f32(c.as_ptr().add(k + acc_q));
                for r in 0..R {
                    let p = sp.add(r * ds + k + acc_q);
                    // Separate multiplies and adds (no vfmaq): the scalar twin's roundings.
                    let v = vaddq_f32(vmulq_f32(vld1q_f32(p), vda), vmulq_f32(bv, vx[r]));
                    vst1q_f32(p, v);
                    acc[r][q] = vaddq_f32(acc[r][q], vmulq_f32(v, cv));
                }
            }
        }
        k += SCAN_LANES;
    }
    std::array::from_fn(|r| {
        let a = acc[r];
        // Lane j + j + 8, then j + 4 (registers), then j + 2 (halves), then j + 1.
        let u = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
        let h = vadd_f32(vget_low_f32(u), vget_high_f32(u));
        let sum = vget_lane_f32::<0>(h) + vget_lane_f32::<1>(h);
        scan_tail(
            &mut state[r * ds..(r + 1) * ds],
            main,
            (da, x_dt[r]),
            b,
            c,
            sum,
        )
    })
}
