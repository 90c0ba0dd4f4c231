//! NEON twins of the recurrent kernels (`kernels::recurrent`): the scan's and the delta rule's
//! 16 lanes are four 4-lane registers (lanes 0-3, 4-7, 8-11, 12-15); four rows run together
//! (their loads of B and C, or of k and q, shared; their sums independent).

use std::arch::aarch64::*;

use crate::kernels::recurrent_scan::{check_delta, check_scan, RecurrentKernels, SCAN_LANES};
use crate::kernels::scalar::recurrent::{decay_tail, scan_tail, update_tail};

/// Installs the NEON scan and delta rule.
///
/// # Safety
/// The CPU must support NEON.
pub(crate) unsafe fn install(r: &mut RecurrentKernels) {
    fn scan(s: &mut [f32], x: &[f32], dt_sp: f32, da: f32, b: &[f32], c: &[f32], y: &mut [f32]) {
        // SAFETY: only installed by `install`, whose caller verified NEON.
        unsafe { ssm_scan(s, x, dt_sp, da, b, c, y) }
    }
    fn delta(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], c: (f32, f32, f32), o: &mut [f32]) {
        // SAFETY: only installed by `install`, whose caller verified NEON.
        unsafe { delta_rule(s, q, k, v, c, o) }
    }
    r.ssm_scan = scan;
    r.delta_rule = delta;
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
        // SAFETY: same target features as this function.
        let sum = unsafe { reduce16(acc[r]) };
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

/// The 16 lanes (four registers) combined as `scalar::recurrent::reduce_lanes` does: lane j +
/// j + 8, then j + 4 (registers), then j + 2 (halves), then j + 1.
///
/// # Safety
/// The CPU must support NEON.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn reduce16(a: [float32x4_t; 4]) -> f32 {
    let u = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    let h = vadd_f32(vget_low_f32(u), vget_high_f32(u));
    vget_lane_f32::<0>(h) + vget_lane_f32::<1>(h)
}

/// The delta rule, bit-identical to `scalar::recurrent::delta_rule`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn delta_rule(
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    coef: (f32, f32, f32),
    out: &mut [f32],
) {
    let n = check_delta(state, q, k, v, out);
    if n == 0 {
        return;
    }
    let mut j = 0;
    while j + 4 <= n {
        // SAFETY: rows j..j+4 lie in `state` (checked lengths); same target features.
        let o =
            unsafe { delta_rows::<4>(&mut state[j * n..(j + 4) * n], (q, k), &v[j..j + 4], coef) };
        out[j..j + 4].copy_from_slice(&o);
        j += 4;
    }
    while j < n {
        // SAFETY: as above, one row.
        let o =
            unsafe { delta_rows::<1>(&mut state[j * n..(j + 1) * n], (q, k), &v[j..j + 1], coef) };
        out[j] = o[0];
        j += 1;
    }
}

/// `R` rows of the delta rule (`state` holds exactly them; `v` their `R` values), each in the
/// scalar twin's order (separate multiplies and adds, no vfmaq).
///
/// # Safety
/// The CPU must support NEON; `state` is `R * k.len()`, `q` as long as `k`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn delta_rows<const R: usize>(
    state: &mut [f32],
    (q, k): (&[f32], &[f32]),
    v: &[f32],
    (decay, beta, scale): (f32, f32, f32),
) -> [f32; R] {
    let n = k.len();
    let main = n - n % SCAN_LANES;
    let sp = state.as_mut_ptr();
    let vdecay = vdupq_n_f32(decay);
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    let mut i = 0;
    while i < main {
        for (h, off) in (0..4).map(|h| (h, 4 * h)) {
            // SAFETY: i + off + 4 <= main <= n = k.len(), and row r's too.
            unsafe {
                let kv = vld1q_f32(k.as_ptr().add(i + off));
                for (r, a) in acc.iter_mut().enumerate() {
                    let p = sp.add(r * n + i + off);
                    let x = vmulq_f32(vld1q_f32(p), vdecay);
                    vst1q_f32(p, x);
                    a[h] = vaddq_f32(a[h], vmulq_f32(x, kv));
                }
            }
        }
        i += SCAN_LANES;
    }
    let delta: [f32; R] = std::array::from_fn(|r| {
        // SAFETY: same target features as this function.
        let sum = unsafe { reduce16(acc[r]) };
        (v[r] - decay_tail(&mut state[r * n..(r + 1) * n], main, decay, k, sum)) * beta
    });
    let vdelta: [float32x4_t; R] = std::array::from_fn(|r| vdupq_n_f32(delta[r]));
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    let sp = state.as_mut_ptr();
    let mut i = 0;
    while i < main {
        for (h, off) in (0..4).map(|h| (h, 4 * h)) {
            // SAFETY: i + off + 4 <= main <= n = k.len() = q.len(), and row r's too.
            unsafe {
                let kv = vld1q_f32(k.as_ptr().add(i + off));
                let qv = vld1q_f32(q.as_ptr().add(i + off));
                for r in 0..R {
                    let p = sp.add(r * n + i + off);
                    let x = vaddq_f32(vld1q_f32(p), vmulq_f32(kv, vdelta[r]));
                    vst1q_f32(p, x);
                    acc[r][h] = vaddq_f32(acc[r][h], vmulq_f32(x, qv));
                }
            }
        }
        i += SCAN_LANES;
    }
    std::array::from_fn(|r| {
        // SAFETY: same target features as this function.
        let sum = unsafe { reduce16(acc[r]) };
        update_tail(&mut state[r * n..(r + 1) * n], main, (k, delta[r]), q, sum) * scale
    })
}
