//! AVX-512 attention kernel (16 f32 lanes). Scalar twin: `attend_group_scalar` in the parent.
//!
//! Per chunk of 16 positions of a block: the scores of every query head of the GQA group come
//! out as one vector each (K tile is `[head_dim][pos]`: one f16 load + convert per dimension,
//! three FMAs with q broadcast), the online softmax runs on those vectors, and each V row is
//! converted once and added to the group's register-resident accumulators.

use super::{HeadView, PREFETCH_AHEAD};
use half::f16;
use std::arch::x86_64::*;

/// Lanes per vector.
const W: usize = 16;

/// Attends the `q.len() / head_dim` query heads of one GQA group, writing `out` (same shape as
/// `q`). Returns false, touching nothing, when the shape is not covered (group size above 8,
/// head_dim other than 64 or 128, block size not a multiple of 16): use the scalar twin then.
///
/// # Safety
/// The CPU must support AVX-512F.
pub(super) unsafe fn attend_group(view: &HeadView, q: &[f32], out: &mut [f32], scale: f32) -> bool {
    let g = q.len() / view.head_dim;
    if !covers(g, view.head_dim, view.block_size) || q.len() != out.len() {
        return false;
    }
    macro_rules! dispatch {
        ($($g:literal)*) => {
            match (g, view.head_dim) {
                // SAFETY: the caller guarantees AVX-512F.
                $(($g, 64) => unsafe { kernel::<$g, 4>(view, q, out, scale) },
                  ($g, 128) => unsafe { kernel::<$g, 8>(view, q, out, scale) },)*
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

/// 16 f16 values at `p`, as f32.
///
/// # Safety
/// `p..p + 16` must be readable.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_f16_at(p: *const f16) -> __m512 {
    // SAFETY: the caller guarantees 16 readable f16 (32 bytes); the load is unaligned.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// exp(x) for x <= 0 (larger x are not needed here), within ~2 ulp; exp(-inf) and anything
/// below -104 give 0. Cephes-style: x = n ln2 + r, degree-6 Taylor polynomial on r, times 2^n.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp(x: __m512) -> __m512 {
    let x = _mm512_max_ps(_mm512_set1_ps(-104.0), x);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// The kernel for group size `G` and head_dim `C * 16`; block size a multiple of 16.
#[target_feature(enable = "avx512f")]
fn kernel<const G: usize, const C: usize>(view: &HeadView, q: &[f32], out: &mut [f32], scale: f32) {
    let d = C * W;
    let bs = view.block_size;
    // The unchecked loads below rely on whole W-lane chunks per block.
    assert!(bs.is_multiple_of(W));
    let q = &q[..G * d];
    let out = &mut out[..G * d];
    let mut acc = [[_mm512_setzero_ps(); C]; G];
    // Running sums per lane (summed once at the end) and running max per head.
    let mut l = [_mm512_setzero_ps(); G];
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
            let mask: __mmask16 = (((1u32 << valid) - 1) & 0xffff) as u16;
            // Scores: four partial sums per head break the FMA dependency chains.
            let mut s = [[_mm512_setzero_ps(); 4]; G];
            for i in (0..d).step_by(4) {
                for u in 0..4 {
                    // SAFETY: (i + u) * bs + t + W <= (d - 1) * bs + bs = k.len() (see above).
                    let kk = unsafe { load_f16_at(kp.add((i + u) * bs + t)) };
                    for j in 0..G {
                        let qj = _mm512_set1_ps(q[j * d + i + u]);
                        s[j][u] = _mm512_fmadd_ps(qj, kk, s[j][u]);
                    }
                }
            }
            for j in 0..G {
                let sum = _mm512_add_ps(
                    _mm512_add_ps(s[j][0], s[j][1]),
                    _mm512_add_ps(s[j][2], s[j][3]),
                );
                let sj = _mm512_mask_mov_ps(
                    _mm512_set1_ps(f32::NEG_INFINITY),
                    mask,
                    _mm512_mul_ps(sum, _mm512_set1_ps(scale)),
                );
                let m_new = m[j].max(_mm512_reduce_max_ps(sj));
                // exp(-inf) = 0 on the first chunk, exactly 1 when the max did not move.
                let alpha = _mm512_set1_ps((m[j] - m_new).exp());
                m[j] = m_new;
                let w = _mm512_maskz_mov_ps(mask, exp(_mm512_sub_ps(sj, _mm512_set1_ps(m_new))));
                l[j] = _mm512_fmadd_ps(l[j], alpha, w);
                for a in acc[j].iter_mut() {
                    *a = _mm512_mul_ps(*a, alpha);
                }
                // SAFETY: `weights[j]` is 16 f32 = 64 writable bytes; the store is unaligned.
                unsafe { _mm512_storeu_ps(weights[j].as_mut_ptr(), w) };
            }
            // `p` indexes a column of `weights` and a V row: no single iterator fits.
            #[allow(clippy::needless_range_loop)]
            for p in 0..valid {
                let row = (t + p) * d;
                let mut vv = [_mm512_setzero_ps(); C];
                for (c, x) in vv.iter_mut().enumerate() {
                    // SAFETY: row + c * W + W <= (t + p + 1) * d <= n * d <= v.len().
                    *x = unsafe { load_f16_at(vp.add(row + c * W)) };
                }
                for j in 0..G {
                    let wj = _mm512_set1_ps(weights[j][p]);
                    for c in 0..C {
                        acc[j][c] = _mm512_fmadd_ps(wj, vv[c], acc[j][c]);
                    }
                }
            }
        }
    }
    for j in 0..G {
        let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(l[j]));
        for c in 0..C {
            let o = &mut out[j * d + c * W..][..W];
            // SAFETY: `o` is 16 f32 = 64 writable bytes; the store is unaligned.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(acc[j][c], inv)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let xs: Vec<f32> = (0..=2000).map(|i| -(i as f32) * 0.05).collect();
        for chunk in xs.chunks(W) {
            let mut buf = [0.0f32; W];
            buf[..chunk.len()].copy_from_slice(chunk);
            let mut got = [0.0f32; W];
            // SAFETY: AVX-512F was detected above; both buffers hold 16 f32.
            unsafe {
                let e = exp(_mm512_loadu_ps(buf.as_ptr()));
                _mm512_storeu_ps(got.as_mut_ptr(), e);
            }
            for (&x, &y) in buf.iter().zip(&got) {
                let want = (x as f64).exp();
                assert!(
                    (y as f64 - want).abs() <= want * 3e-7 + 1e-44,
                    "exp({x}) = {y}, want {want}"
                );
            }
        }
        let mut got = [0.0f32; W];
        // SAFETY: AVX-512F was detected above; `got` holds 16 f32.
        unsafe { _mm512_storeu_ps(got.as_mut_ptr(), exp(_mm512_set1_ps(f32::NEG_INFINITY))) };
        assert!(got.iter().all(|&y| y == 0.0));
    }
}
