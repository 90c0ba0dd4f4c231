//! AVX-512 twins of the recurrent kernels (`kernels::recurrent`): the scan's and the delta
//! rule's 16 lanes are one register; four rows run together (their loads of B and C, or of k
//! and q, shared; their sums independent).

use std::arch::x86_64::*;

use crate::kernels::recurrent_scan::{check_delta, check_scan, RecurrentKernels, SCAN_LANES};
use crate::kernels::scalar::recurrent::{decay_tail, scan_tail, update_tail};
use crate::kernels::x86::avx2::recurrent::reduce8;

/// Installs the AVX-512 scan and delta rule.
///
/// # Safety
/// The CPU must support AVX-512 F (and the AVX2 set `supported(Avx512)` implies).
pub(crate) unsafe fn install(r: &mut RecurrentKernels) {
    fn scan(s: &mut [f32], x: &[f32], dt_sp: f32, da: f32, b: &[f32], c: &[f32], y: &mut [f32]) {
        // SAFETY: only installed by `install`, whose caller verified AVX-512 F.
        unsafe { ssm_scan(s, x, dt_sp, da, b, c, y) }
    }
    fn delta(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], c: (f32, f32, f32), o: &mut [f32]) {
        // SAFETY: only installed by `install`, whose caller verified AVX-512 F.
        unsafe { delta_rule(s, q, k, v, c, o) }
    }
    r.ssm_scan = scan;
    r.delta_rule = delta;
}

/// The scan, bit-identical to `scalar::recurrent::ssm_scan`.
///
/// # Safety
/// The CPU must support AVX-512 F and AVX2.
#[target_feature(enable = "avx512f,avx2")]
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
/// The CPU must support AVX-512 F and AVX2; `state` is `R * b.len()`, `c` as long as `b`.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
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
    let vda = _mm512_set1_ps(da);
    let x_dt: [f32; R] = std::array::from_fn(|r| x[r] * dt_sp);
    let vx: [__m512; R] = std::array::from_fn(|r| _mm512_set1_ps(x_dt[r]));
    let mut acc = [_mm512_setzero_ps(); R];
    let sp = state.as_mut_ptr();
    let mut k = 0;
    while k < main {
        // SAFETY: k + 16 <= main <= ds = b.len() = c.len(), and row r's k + 16 <= ds.
        unsafe {
            let bv = _mm512_loadu_ps(b.as_ptr().add(k));
            let cv = _mm512_loadu_ps(c.as_ptr().add(k));
            for r in 0..R {
                let p = sp.add(r * ds + k);
                let v = _mm512_add_ps(
                    _mm512_mul_ps(_mm512_loadu_ps(p), vda),
                    _mm512_mul_ps(bv, vx[r]),
                );
                _mm512_storeu_ps(p, v);
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(v, cv));
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

/// The 16 lanes combined as `scalar::recurrent::reduce_lanes` does: lane `j` + `j + 8` (the two
/// 256-bit halves), then [`reduce8`].
///
/// # Safety
/// The CPU must support AVX-512 F and AVX2.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn reduce16(a: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(a);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
    // SAFETY: same target features.
    unsafe { reduce8(_mm256_add_ps(lo, hi)) }
}

/// The delta rule, bit-identical to `scalar::recurrent::delta_rule`.
///
/// # Safety
/// The CPU must support AVX-512 F and AVX2.
#[target_feature(enable = "avx512f,avx2")]
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
/// scalar twin's order.
///
/// # Safety
/// The CPU must support AVX-512 F and AVX2; `state` is `R * k.len()`, `q` as long as `k`.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn delta_rows<const R: usize>(
    state: &mut [f32],
    (q, k): (&[f32], &[f32]),
    v: &[f32],
    (decay, beta, scale): (f32, f32, f32),
) -> [f32; R] {
    let n = k.len();
    let main = n - n % SCAN_LANES;
    let sp = state.as_mut_ptr();
    let vdecay = _mm512_set1_ps(decay);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i < main {
        // SAFETY: i + 16 <= main <= n = k.len(), and row r's i + 16 <= n.
        unsafe {
            let kv = _mm512_loadu_ps(k.as_ptr().add(i));
            for (r, a) in acc.iter_mut().enumerate() {
                let p = sp.add(r * n + i);
                let x = _mm512_mul_ps(_mm512_loadu_ps(p), vdecay);
                _mm512_storeu_ps(p, x);
                *a = _mm512_add_ps(*a, _mm512_mul_ps(x, kv));
            }
        }
        i += SCAN_LANES;
    }
    let delta: [f32; R] = std::array::from_fn(|r| {
        // SAFETY: same target features as this function.
        let sum = unsafe { reduce16(acc[r]) };
        (v[r] - decay_tail(&mut state[r * n..(r + 1) * n], main, decay, k, sum)) * beta
    });
    let vdelta: [__m512; R] = std::array::from_fn(|r| _mm512_set1_ps(delta[r]));
    let mut acc = [_mm512_setzero_ps(); R];
    let sp = state.as_mut_ptr();
    let mut i = 0;
    while i < main {
        // SAFETY: i + 16 <= main <= n = k.len() = q.len(), and row r's i + 16 <= n.
        unsafe {
            let kv = _mm512_loadu_ps(k.as_ptr().add(i));
            let qv = _mm512_loadu_ps(q.as_ptr().add(i));
            for r in 0..R {
                let p = sp.add(r * n + i);
                let x = _mm512_add_ps(_mm512_loadu_ps(p), _mm512_mul_ps(kv, vdelta[r]));
                _mm512_storeu_ps(p, x);
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(x, qv));
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
