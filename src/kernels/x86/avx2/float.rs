//! AVX2 + FMA + F16C kernels for float weights (F32, F16, BF16) against F32 activations.
//!
//! Four 8-lane accumulators per dot product; `gemm` is the loop of `vec_dot` (float
//! weights are not on kiln's hot path: quantized models keep only norms in F32).

use std::arch::x86_64::*;

use crate::kernels::scalar::gemm_by_vec_dot;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::DType;

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

const fn wdt(t: u8) -> DType {
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
    let (wp, ap) = (w.as_ptr(), a.as_ptr() as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: values i..i+32 exist in both rows (n checked).
            unsafe {
                *acc = _mm256_fmadd_ps(
                    load8::<T>(wp, i + 8 * j),
                    _mm256_loadu_ps(ap.add(i + 8 * j)),
                    *acc,
                );
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: values i..i+8 exist.
        unsafe { acc[0] = _mm256_fmadd_ps(load8::<T>(wp, i), _mm256_loadu_ps(ap.add(i)), acc[0]) };
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
    let bw = wdt(T).block_bytes();
    for j in i..n {
        let av = f32::from_le_bytes([a[4 * j], a[4 * j + 1], a[4 * j + 2], a[4 * j + 3]]);
        let wv = match T {
            F32 => f32::from_le_bytes([w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]]),
            F16 => half::f16::from_le_bytes([w[bw * j], w[bw * j + 1]]).to_f32(),
            _ => half::bf16::from_le_bytes([w[bw * j], w[bw * j + 1]]).to_f32(),
        };
        sum += wv * av;
    }
    sum
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

        /// `gemm` as a loop of the AVX2 `vec_dot`.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: `$gm`'s caller guarantees AVX2/FMA/F16C.
                unsafe { $vd(n, w, a) }
            }
            gemm_by_vec_dot(vd, wdt($t), DType::F32, k, w, n_rows, a, n_tok, out, out_stride)
        }
    )*};
}

entry_points! {
    F32: vec_dot_f32, gemm_f32;
    F16: vec_dot_f16, gemm_f16;
    BF16: vec_dot_bf16, gemm_bf16;
}
