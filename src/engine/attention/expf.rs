//! `expf` for 16 lanes (AVX-512) or 8 lanes (AVX2), bit-identical to the C library's `expf` that llama.cpp's flash
//! attention calls once per position (glibc's FMA variant, the one x86-64 machines with FMA
//! run; `f32::exp` calls the same function, so the scalar twin agrees).
//!
//! The algorithm (glibc's, from Arm's optimized-routines): in f64, `k = round(x * 32/ln 2)` by
//! adding 1.5 * 2^52, `r = x * 32/ln 2 - k` fused, `2^(k/32)` from a 32-entry table with the
//! exponent bits added, a degree-3 polynomial in `r` with fused multiply-adds, one final
//! rounding to f32. The operation order (which steps are fused) was read off the library's
//! machine code; `matches_libm` checks millions of inputs against `f32::exp`, for both widths.
//! The AVX2 version is the AVX-512 one instruction for instruction on 4 f64 lanes instead of 8
//! (the table lookup is `vpgatherqq` either way); only the blends differ, and they select.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// `bits(2^(i/32)) - (i << 47)`: adding `k << 47` to entry `k % 32` gives `2^(k/32)`.
#[cfg(target_arch = "x86_64")]
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// 8 lanes of the f64 core for inputs in the normal range (see the module docs).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn core8(xd: __m512d) -> __m512d {
    let c = |bits: u64| _mm512_set1_pd(f64::from_bits(bits));
    let inv_ln2_n = c(0x4047_1547_652b_82fe); // 32 / ln 2
    let shift = c(0x4338_0000_0000_0000); // 1.5 * 2^52
    let kds = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
    let ki = _mm512_castpd_si512(kds);
    let kd = _mm512_sub_pd(kds, shift);
    let r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
    let idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    // SAFETY: every index is in 0..32, inside TAB.
    let t = unsafe { _mm512_i64gather_epi64::<8>(idx, TAB.as_ptr().cast()) };
    let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
    let z = _mm512_fmadd_pd(c(0x3ebc_6af8_4b91_2394), r, c(0x3f2e_bfce_50fa_c4f3));
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(r, c(0x3f96_2e42_ff0c_52d6), _mm512_set1_pd(1.0));
    let y = _mm512_fmadd_pd(z, r2, y);
    _mm512_mul_pd(y, s)
}

/// `expf` of 16 lanes that are all `<= 0` or NaN (softmax arguments), bit-identical to the
/// C library's `expf` on them.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn expf16_nonpositive(x: __m512) -> __m512 {
    // SAFETY: same features as this function.
    let (lo, hi) = unsafe {
        (
            core8(_mm512_cvtps_pd(_mm512_castps512_ps256(x))),
            core8(_mm512_cvtps_pd(_mm256_castpd_ps(
                _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)),
            ))),
        )
    };
    let y = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
    let y = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castps_pd(y),
        _mm256_castps_pd(_mm512_cvtpd_ps(hi)),
    ));
    // Below log(2^-150) (-inf included) the library returns +0; NaN gives NaN (x + x).
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(f32::from_bits(0xc2cf_f1b4)));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    let y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
    _mm512_mask_blend_ps(nan, y, _mm512_add_ps(x, x))
}

/// 4 lanes of the f64 core: [`core8`] on AVX2 registers, the same operations in the same order.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn core4(xd: __m256d) -> __m256d {
    let c = |bits: u64| _mm256_set1_pd(f64::from_bits(bits));
    let inv_ln2_n = c(0x4047_1547_652b_82fe); // 32 / ln 2
    let shift = c(0x4338_0000_0000_0000); // 1.5 * 2^52
    let kds = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
    let ki = _mm256_castpd_si256(kds);
    let kd = _mm256_sub_pd(kds, shift);
    let r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    // SAFETY: every index is in 0..32, inside TAB.
    let t = unsafe { _mm256_i64gather_epi64::<8>(TAB.as_ptr().cast(), idx) };
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let z = _mm256_fmadd_pd(c(0x3ebc_6af8_4b91_2394), r, c(0x3f2e_bfce_50fa_c4f3));
    let r2 = _mm256_mul_pd(r, r);
    let y = _mm256_fmadd_pd(r, c(0x3f96_2e42_ff0c_52d6), _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(z, r2, y);
    _mm256_mul_pd(y, s)
}

/// `expf` of 8 lanes that are all `<= 0` or NaN (softmax arguments), bit-identical to the
/// C library's `expf` on them, and so to [`expf16_nonpositive`] lane for lane.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn expf8_nonpositive(x: __m256) -> __m256 {
    // SAFETY: same features as this function.
    let (lo, hi) = unsafe {
        (
            core4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))),
            core4(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x))),
        )
    };
    let y = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    // Below log(2^-150) (-inf included) the library returns +0; NaN gives NaN (x + x).
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(f32::from_bits(0xc2cf_f1b4)));
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX-512 (16 lanes) and, when present, AVX2 (8 lanes) `expf` of `xs` (a multiple of
    /// 16 long), each checked against `f32::exp` bit for bit.
    fn check(xs: &[f32]) {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        if !avx512 {
            crate::test_skip::skip("no AVX-512F on this CPU: the 16-lane expf is not tested");
        }
        if !avx2 {
            crate::test_skip::skip("no AVX2/FMA on this CPU: the 8-lane expf is not tested");
        }
        for chunk in xs.chunks_exact(16) {
            let mut got = vec![];
            if avx512 {
                // SAFETY: AVX-512F checked above.
                got.push(unsafe {
                    let v = expf16_nonpositive(_mm512_loadu_ps(chunk.as_ptr()));
                    let mut out = [0f32; 16];
                    _mm512_storeu_ps(out.as_mut_ptr(), v);
                    out
                });
            }
            if avx2 {
                // SAFETY: AVX2 and FMA checked above; each half of `chunk` holds 8 f32.
                got.push(unsafe {
                    let mut out = [0f32; 16];
                    for h in 0..2 {
                        let v = expf8_nonpositive(_mm256_loadu_ps(chunk.as_ptr().add(8 * h)));
                        _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), v);
                    }
                    out
                });
            }
            for out in got {
                for (x, g) in chunk.iter().zip(out) {
                    let want = x.exp();
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "expf({x:e}) = {want:e}, got {g:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn matches_libm() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            crate::test_skip::skip("no AVX2 on this CPU: neither vector expf can run here");
            return;
        }
        // Every 61st bit pattern from -0.0 down to past the underflow threshold (~1.1M
        // inputs), then the edges.
        let mut xs: Vec<f32> = (0x8000_0000u32..=0xc2e0_0000)
            .step_by(61)
            .map(f32::from_bits)
            .collect();
        xs.extend([
            0.0,
            -0.0,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xc2cf_f1b4),
            f32::from_bits(0xc2cf_f1b5),
            f32::from_bits(0xc2cf_f1b3),
            -88.0,
            -87.33655,
            -1e-30,
            -f32::MIN_POSITIVE,
            -1e30,
            f32::MIN,
        ]);
        while !xs.len().is_multiple_of(16) {
            xs.push(-1.0);
        }
        check(&xs);
    }
}
