//! AVX2 twins of the scalar Q8_0 / Q8_1 activation quantizers (bit-identical output), so the
//! AVX2 family does not quantize every matmul input one value at a time.

use std::arch::x86_64::*;

use crate::kernels::DType;

/// Quantizes one 32-value block to Q8 exactly as the scalar reference (and llama.cpp's x86
/// build) does: `d = amax / 127`, `x * (127 / amax)` rounded half to even; writes the 32
/// quants at `qs` and returns (d, sum of quants).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_block_q8(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    assert!(x.len() >= 32 && qs.len() >= 32, "one whole block");
    // SAFETY: 32 values at `x` (asserted).
    let v: [__m256; 4] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
    let abs = |a: __m256| _mm256_andnot_ps(_mm256_set1_ps(-0.0), a);
    let m = _mm256_max_ps(
        _mm256_max_ps(abs(v[0]), abs(v[1])),
        _mm256_max_ps(abs(v[2]), abs(v[3])),
    );
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let q: [__m256i; 4] = std::array::from_fn(|i| {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(v[i], idv),
        );
        _mm256_cvtps_epi32(r)
    });
    let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2)));
    // i32 -> i16 -> i8 packs interleave 128-bit lanes; the permute restores value order.
    let w01 = _mm256_packs_epi32(q[0], q[1]);
    let w23 = _mm256_packs_epi32(q[2], q[3]);
    let b = _mm256_packs_epi16(w01, w23);
    let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: 32 writable bytes at `qs` (asserted).
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, b) };
    (d, sum)
}

/// AVX2 twin of the scalar `quantize_q8_0` (bit-identical output).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_0(x: &[f32], y: &mut [u8]) {
    crate::kernels::shape::check_convert(DType::Q8_0, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(34)) {
        let (d, _) = quantize_block_q8(xb, &mut yb[2..34]);
        yb[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
    }
}

/// AVX2 twin of the scalar `quantize_q8_1` (bit-identical output).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_1(x: &[f32], y: &mut [u8]) {
    crate::kernels::shape::check_convert(DType::Q8_1, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(36)) {
        let (d, sum) = quantize_block_q8(xb, &mut yb[4..36]);
        yb[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        yb[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_le_bytes());
    }
}
