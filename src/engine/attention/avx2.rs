//! AVX2 + FMA + F16C attention kernel (8 f32 lanes): the AVX-512 kernel's algorithm on half-width
//! vectors, for CPUs without AVX-512. Scalar twin: `attend_group_scalar` in the parent.

use super::{HeadView, PREFETCH_AHEAD};
use half::f16;
use std::arch::x86_64::*;

/// Lanes per vector.
const W: usize = 8;

/// Attends the `q.len() / head_dim` query heads of one GQA group, writing `out` (same shape as
/// `q`). Returns false, touching nothing, when the shape is not covered (group size above 8,
/// head_dim other than 64 or 128, block size not a multiple of 8): use the scalar twin then.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
pub(super) unsafe fn attend_group(view: &HeadView, q: &[f32], out: &mut [f32], scale: f32) -> bool {
    let g = q.len() / view.head_dim;
    if !covers(g, view.head_dim, view.block_size) || q.len() != out.len() {
        return false;
    }
    macro_rules! dispatch {
        ($($g:literal)*) => {
            match (g, view.head_dim) {
                // SAFETY: the caller guarantees AVX2, FMA and F16C.
                $(($g, 64) => unsafe { kernel::<$g, 8>(view, q, out, scale) },
                  ($g, 128) => unsafe { kernel::<$g, 16>(view, q, out, scale) },)*
                _ => return false,
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8);
    true
}

/// True when the kernel handles group size `g`, head dimension `d` and block size `bs`.
pub(super) fn covers(g: usize, d: usize, bs: usize) -> bool {
    (1..=8).contains(&g) && (d == 64 || d == 128) && bs.is_multiple_of(W)
}

/// 8 f16 values at `p`, as f32.
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16_at(p: *const f16) -> __m256 {
    // SAFETY: the caller guarantees 8 readable f16 (16 bytes); the load is unaligned.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// Sum of the 8 lanes, in a fixed order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Max of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(x: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
}

/// exp(x) for x <= 0, within ~2 ulp for x >= -87 (below that: exp(-87), tiny, and the callers
/// only need it relative to weights near 1). Cephes-style: x = n ln2 + r, degree-6 Taylor
/// polynomial on r, times 2^n built in the exponent bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp(x: __m256) -> __m256 {
    let x = _mm256_min_ps(_mm256_set1_ps(0.0), _mm256_max_ps(_mm256_set1_ps(-87.0), x));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // n is in [-126, 0]: 2^n is a normal float with biased exponent n + 127.
    let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e)))
}

/// The kernel for group size `G` and head_dim `C * 8`; block size a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
fn kernel<const G: usize, const C: usize>(view: &HeadView, q: &[f32], out: &mut [f32], scale: f32) {
    let d = C * W;
    let bs = view.block_size;
    // The unchecked loads below rely on whole W-lane chunks per block.
    assert!(bs.is_multiple_of(W));
    let q = &q[..G * d];
    let out = &mut out[..G * d];
    let lane = _mm256_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0);
    let mut acc = [[_mm256_setzero_ps(); C]; G];
    let mut l = [_mm256_setzero_ps(); G];
    let mut m = [f32::NEG_INFINITY; G];
    let mut weights = [[0.0f32; W]; G];
    for bi in 0..view.n_blocks() {
        view.prefetch(bi + PREFETCH_AHEAD);
        let (k, v, n) = view.block(bi);
        // Tiles are exactly `bs * d` long, `bs` a multiple of W and `t + W <= bs` below, so every
        // load below stays inside them (the invariant the unchecked loads rely on).
        assert!(k.len() == bs * d && v.len() == bs * d && n <= bs);
        let (kp, vp) = (k.as_ptr(), v.as_ptr());
        for t in (0..n).step_by(W) {
            let valid = (n - t).min(W);
            let mask = _mm256_cmp_ps::<_CMP_LT_OQ>(lane, _mm256_set1_ps(valid as f32));
            let mut s = [[_mm256_setzero_ps(); 4]; G];
            for i in (0..d).step_by(4) {
                for u in 0..4 {
                    // SAFETY: (i + u) * bs + t + W <= (d - 1) * bs + bs = k.len() (see above).
                    let kk = unsafe { load_f16_at(kp.add((i + u) * bs + t)) };
                    for j in 0..G {
                        let qj = _mm256_set1_ps(q[j * d + i + u]);
                        s[j][u] = _mm256_fmadd_ps(qj, kk, s[j][u]);
                    }
                }
            }
            for j in 0..G {
                let sum = _mm256_add_ps(
                    _mm256_add_ps(s[j][0], s[j][1]),
                    _mm256_add_ps(s[j][2], s[j][3]),
                );
                let sj = _mm256_blendv_ps(
                    _mm256_set1_ps(f32::NEG_INFINITY),
                    _mm256_mul_ps(sum, _mm256_set1_ps(scale)),
                    mask,
                );
                let m_new = m[j].max(hmax(sj));
                let alpha = _mm256_set1_ps((m[j] - m_new).exp());
                m[j] = m_new;
                let w = _mm256_and_ps(mask, exp(_mm256_sub_ps(sj, _mm256_set1_ps(m_new))));
                l[j] = _mm256_fmadd_ps(l[j], alpha, w);
                for a in acc[j].iter_mut() {
                    *a = _mm256_mul_ps(*a, alpha);
                }
                // SAFETY: `weights[j]` is 8 f32 = 32 writable bytes; the store is unaligned.
                unsafe { _mm256_storeu_ps(weights[j].as_mut_ptr(), w) };
            }
            // `p` indexes a column of `weights` and a V row: no single iterator fits.
            #[allow(clippy::needless_range_loop)]
            for p in 0..valid {
                let row = (t + p) * d;
                let mut vv = [_mm256_setzero_ps(); C];
                for (c, x) in vv.iter_mut().enumerate() {
                    // SAFETY: row + c * W + W <= (t + p + 1) * d <= n * d <= v.len().
                    *x = unsafe { load_f16_at(vp.add(row + c * W)) };
                }
                for j in 0..G {
                    let wj = _mm256_set1_ps(weights[j][p]);
                    for c in 0..C {
                        acc[j][c] = _mm256_fmadd_ps(wj, vv[c], acc[j][c]);
                    }
                }
            }
        }
    }
    for j in 0..G {
        let inv = _mm256_set1_ps(1.0 / hsum(l[j]));
        for c in 0..C {
            let o = &mut out[j * d + c * W..][..W];
            // SAFETY: `o` is 8 f32 = 32 writable bytes; the store is unaligned.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(acc[j][c], inv)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        if !(is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"))
        {
            return;
        }
        for i in 0..=1740 {
            let x = -(i as f32) * 0.05;
            let mut got = [0.0f32; W];
            // SAFETY: the features were detected above; `got` holds 8 f32.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), exp(_mm256_set1_ps(x))) };
            let want = (x as f64).exp();
            assert!(
                (got[0] as f64 - want).abs() <= want * 3e-7,
                "exp({x}) = {}, want {want}",
                got[0]
            );
        }
    }
}
