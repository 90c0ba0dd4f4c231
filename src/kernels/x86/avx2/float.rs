//! AVX2 + FMA + F16C kernels for float weights (F32, F16, BF16) against F32 activations.
//!
//! Four 8-lane accumulators per dot product; `gemm` runs up to three tokens' dot products
//! over each weight row at once, each in `vec_dot`'s exact order (bit-identical to it).

use std::arch::x86_64::*;

use crate::kernels::shape::{check_gemm, check_vec_dot};
use crate::kernels::DType;

pub(crate) const F32: u8 = 0;
pub(crate) const F16: u8 = 1;
pub(crate) const BF16: u8 = 2;

pub(crate) const fn wdt(t: u8) -> DType {
    match t {
        F32 => DType::F32,
        F16 => DType::F16,
        _ => DType::BF16,
    }
}

/// 8 weights starting at value `i` as f32.
///
/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const T: u8>(w: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller guarantees values i..i+8 exist.
    unsafe {
        match T {
            F32 => _mm256_loadu_ps((w as *const f32).add(i)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(w.add(2 * i) as *const __m128i)),
            _ => {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w.add(2 * i) as *const __m128i));
                _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot<const T: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(T), w.len(), DType::F32, a.len());
    // SAFETY: same target features as the caller; lengths checked just above.
    unsafe { dot_n::<T, 1>(n, w, [a])[0] }
}

/// The dot products of one weight row `w` with `N` activation rows, each bit-identical to
/// `vec_dot::<T>(n, w, a[t])` (it is the same accumulators updated in the same order; only
/// the weights are loaded and converted once for all `N`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. `w` must hold `n` values of type `T` and every
/// `a[t]` `n` f32 (asserted).
// The accumulators are indexed [token][lane group], as vec_dot's order reads.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_n<const T: u8, const N: usize>(
    n: usize,
    w: &[u8],
    a: [&[u8]; N],
) -> [f32; N] {
    let bw = wdt(T).block_bytes();
    assert!(w.len() >= n * bw && a.iter().all(|x| x.len() >= 4 * n));
    let wp = w.as_ptr();
    let ap: [*const f32; N] = std::array::from_fn(|t| a[t].as_ptr() as *const f32);
    let mut acc = [[_mm256_setzero_ps(); 4]; N];
    let mut i = 0;
    while i + 32 <= n {
        for j in 0..4 {
            // SAFETY: values i..i+32 exist in `w` and in every `a[t]` (asserted).
            unsafe {
                let wv = load8::<T>(wp, i + 8 * j);
                for t in 0..N {
                    acc[t][j] =
                        _mm256_fmadd_ps(wv, _mm256_loadu_ps(ap[t].add(i + 8 * j)), acc[t][j]);
                }
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: values i..i+8 exist (asserted).
        unsafe {
            let wv = load8::<T>(wp, i);
            for t in 0..N {
                acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(ap[t].add(i)), acc[t][0]);
            }
        }
        i += 8;
    }
    let mut sums = [0f32; N];
    for (t, (sum, acc)) in sums.iter_mut().zip(&acc).enumerate() {
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        *sum = _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
        let a = a[t];
        for j in i..n {
            let av = f32::from_le_bytes([a[4 * j], a[4 * j + 1], a[4 * j + 2], a[4 * j + 3]]);
            let wv = match T {
                F32 => f32::from_le_bytes([w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]]),
                F16 => half::f16::from_le_bytes([w[bw * j], w[bw * j + 1]]).to_f32(),
                _ => half::bf16::from_le_bytes([w[bw * j], w[bw * j + 1]]).to_f32(),
            };
            *sum += wv * av;
        }
    }
    sums
}

/// `gemm` of float weights: row by row, each row's weights converted once for up to three
/// tokens at a time ([`dot_n`]), so a few-token step (a speculative verify) costs about one
/// token's conversions and one read of the weights. Every cell is bit-identical to `vec_dot`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm<const T: u8>(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let (wr, ar) = check_gemm(
        k,
        wdt(T),
        w.len(),
        n_rows,
        DType::F32,
        a.len(),
        n_tok,
        out.len(),
        out_stride,
    );
    let act = |t: usize| &a[t * ar..(t + 1) * ar];
    for r in 0..n_rows {
        let wrow = &w[r * wr..(r + 1) * wr];
        let mut t = 0;
        while t < n_tok {
            // SAFETY: same target features as the caller; rows of `k` values (checked).
            let (d, m) = unsafe {
                match n_tok - t {
                    1 => {
                        let [x] = dot_n::<T, 1>(k, wrow, [act(t)]);
                        ([x, 0.0, 0.0], 1)
                    }
                    2 => {
                        let [x, y] = dot_n::<T, 2>(k, wrow, [act(t), act(t + 1)]);
                        ([x, y, 0.0], 2)
                    }
                    _ => (dot_n::<T, 3>(k, wrow, [act(t), act(t + 1), act(t + 2)]), 3),
                }
            };
            for (u, v) in d[..m].iter().enumerate() {
                out[(t + u) * out_stride + r] = *v;
            }
            t += m;
        }
    }
}

macro_rules! entry_points {
    ($($t:ident: $vd:ident, $gm:ident;)*) => {$(
        /// AVX2 twin of the scalar `vec_dot` of the same name.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: same target features as the caller.
            unsafe { vec_dot::<$t>(n, w, a) }
        }

        /// The AVX2 `gemm` ([`gemm`]): every cell bit-identical to the AVX2 `vec_dot`.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            // SAFETY: same target features as the caller.
            unsafe { gemm::<$t>(k, w, n_rows, a, n_tok, out, out_stride) }
        }
    )*};
}

entry_points! {
    F32: vec_dot_f32, gemm_f32;
    F16: vec_dot_f16, gemm_f16;
    BF16: vec_dot_bf16, gemm_bf16;
}
