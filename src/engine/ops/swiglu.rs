//! SwiGLU: `h = silu(gate) * up`, `silu(x) = x / (1 + e^-x)`.
//!
//! `e^x` is [`exp_poly`]: llama.cpp's vectorized `ggml_v_expf` in its exact operation order
//! (fused multiply-adds via `mul_add`), so the output is bit-identical to the reference's x86
//! SwiGLU. The AVX-512 and AVX2 versions run the same steps 16 / 8 lanes at a time; without
//! hardware FMA `mul_add` is a (slower) libm call with the same result, so every ISA agrees
//! bit for bit.
//!
//! The version that runs follows the kernel instruction set ([`crate::kernels::isa()`], which
//! `KILN_ISA` steers): AVX-512, AVX2, else (scalar, NEON) the portable one.

use crate::kernels::isa::{self, Isa};

/// Writes `silu(gate[i]) * up[i]` into `out[i]`, with the version of the kernel instruction set.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_with(crate::kernels::isa(), gate, up, out);
}

/// [`swiglu`] with the version for `isa`: [`swiglu_avx512`] for AVX-512, [`swiglu_avx2`] for
/// AVX2 and AVX-VNNI, [`swiglu_scalar`] for scalar and NEON; all bit-identical. Panics when the slices'
/// lengths differ or this CPU lacks `isa`.
pub fn swiglu_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "swiglu lengths"
    );
    assert!(isa::supported(isa), "swiglu: this CPU lacks {isa}");
    match isa {
        // SAFETY: Isa::Avx512 is supported (checked above), which includes AVX-512F.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { swiglu_avx512(gate, up, out) },
        // SAFETY: Isa::Avx2 / AvxVnni is supported (checked above), which includes AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { swiglu_avx2(gate, up, out) },
        _ => swiglu_scalar(gate, up, out),
    }
}

/// The portable version (SSE2 vectors on x86_64 by auto-vectorization).
pub fn swiglu_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// 16 lanes of [`swiglu_scalar`] at a time, bit-identical to it: [`exp_poly`]'s steps as
/// AVX-512 instructions (its final `j * 2^n` is `vscalefps`, as in llama.cpp), then
/// `x / (1 + e)` and `* up`; the tail runs the scalar code.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn swiglu_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len().min(gate.len()).min(up.len());
    let full = n - n % 16;
    for i in (0..full).step_by(16) {
        // SAFETY: i + 16 <= full <= the length of all three slices.
        let (g, u) = unsafe {
            (
                _mm512_loadu_ps(gate.as_ptr().add(i)),
                _mm512_loadu_ps(up.as_ptr().add(i)),
            )
        };
        // SAFETY: same target features.
        let silu = unsafe { silu_avx512_lanes(g) };
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_mul_ps(silu, u)) };
    }
    for ((o, &g), &u) in out[full..n]
        .iter_mut()
        .zip(&gate[full..n])
        .zip(&up[full..n])
    {
        *o = silu(g) * u;
    }
}

/// 8 lanes of [`swiglu_scalar`] at a time, bit-identical to it: [`exp_poly`]'s steps as
/// AVX2 and FMA instructions. AVX2 has no `vscalefps`, so `j * 2^n` adds `n` to `j`'s exponent
/// field, which is that product exactly whenever it is a normal number; a group of 8 with any
/// lane outside that range (`|gate|` beyond ~87, or NaN) runs the scalar code instead, as
/// does the tail.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn swiglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len().min(gate.len()).min(up.len());
    let full = n - n % 8;
    let scalar = |out: &mut [f32], at: std::ops::Range<usize>| {
        for i in at {
            out[i] = silu(gate[i]) * up[i];
        }
    };
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= the length of all three slices.
        let (g, u) = unsafe {
            (
                _mm256_loadu_ps(gate.as_ptr().add(i)),
                _mm256_loadu_ps(up.as_ptr().add(i)),
            )
        };
        // SAFETY: same target features.
        let Some(silu) = (unsafe { silu_avx2_lanes(g) }) else {
            scalar(out, i..i + 8);
            continue;
        };
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(silu, u)) };
    }
    scalar(out, full..n);
}

/// [`silu`] on 16 lanes, bit-identical to it lane by lane: [`exp_poly`]'s steps as AVX-512
/// instructions (its final `j * 2^n` is `vscalefps`, as in llama.cpp), then `x / (1 + e)`.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn silu_avx512_lanes(g: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let x = _mm512_sub_ps(_mm512_setzero_ps(), g);
    let r = c(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let nn = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(nn, c(0x35bf_be8e), _mm512_fnmadd_ps(nn, c(0x3f31_7200), x));
    let uu = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            uu,
            _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        uu,
        _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
    );
    let mut e = _mm512_scalef_ps(j, nn);
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(nn), _mm512_set1_ps(192.0));
    if big != 0 {
        let le0 = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(nn, _mm512_setzero_ps());
        let alt = _mm512_mask_blend_ps(le0, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
        e = _mm512_mask_blend_ps(big, e, alt);
    }
    _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// [`silu`] on 8 lanes, bit-identical to it lane by lane, or `None` when a lane's `e^-x` is
/// not a normal number (`|x|` beyond ~87, or NaN): AVX2 has no `vscalefps`, so `j * 2^n` adds
/// `n` to `j`'s exponent field, which is that product exactly only when it is normal.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn silu_avx2_lanes(
    g: std::arch::x86_64::__m256,
) -> Option<std::arch::x86_64::__m256> {
    use std::arch::x86_64::*;
    let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let x = _mm256_xor_ps(g, _mm256_set1_ps(-0.0));
    let r = c(0x4b40_0000);
    let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let nn = _mm256_sub_ps(z, r);
    let b = _mm256_fnmadd_ps(nn, c(0x35bf_be8e), _mm256_fnmadd_ps(nn, c(0x3f31_7200), x));
    let uu = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            uu,
            _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        uu,
        _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
    );
    // The product's biased exponent must be 1..=254 (normal): NaN and huge `n` fail
    // the comparisons (cvtps gives i32::MIN for NaN and out-of-range values).
    let ni = _mm256_cvtps_epi32(nn);
    let ji = _mm256_castps_si256(j);
    let exp = _mm256_add_epi32(_mm256_srli_epi32::<23>(ji), ni);
    let bad = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(1), exp),
            _mm256_cmpgt_epi32(exp, _mm256_set1_epi32(254)),
        ),
        _mm256_or_si256(
            // j itself positive and normal (its sign bit clear, exponent 1..=254).
            _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << 23), ji),
            _mm256_cmpgt_epi32(ji, _mm256_set1_epi32(0x7f7f_ffff)),
        ),
    );
    // |n| <= 192 bounds the exponent sum away from wrapping.
    let wild = _mm256_cmp_ps::<_CMP_NLE_UQ>(
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), nn),
        _mm256_set1_ps(192.0),
    );
    if _mm256_testz_si256(bad, bad) == 0 || _mm256_movemask_ps(wild) != 0 {
        return None;
    }
    let e = _mm256_castsi256_ps(_mm256_add_epi32(ji, _mm256_slli_epi32::<23>(ni)));
    Some(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e)))
}

/// `x / (1 + e^-x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp_poly(-x))
}

/// `e^x` for f32 in the very operation order of llama.cpp's vectorized `ggml_v_expf` (the
/// one its x86 SwiGLU uses; max error ~1.5 ulp): `n = round(x log2 e)`, `b = x - n ln2` in two
/// fused steps, a degree-5 polynomial in `b` evaluated with fused multiply-adds, times `2^n`;
/// `|n| > 192` gives 0 or infinity. Matching its roundings bit for bit matters: SwiGLU's output
/// is quantized to 8 bits next, and a 1-ulp difference can flip a quant.
#[inline(always)]
pub fn exp_poly(x: f32) -> f32 {
    let (n, j) = exp_parts(x);
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    if n.is_nan() {
        return n;
    }
    // `j * 2^n` is exact, so rounding it once is the product itself, whenever it is normal:
    // then adding `n` to `j`'s exponent field is the whole multiplication.
    let ni = n as i32;
    let exp = (j.to_bits() >> 23) as i32 + ni;
    if j.is_normal() && j > 0.0 && (1..=254).contains(&exp) {
        return f32::from_bits((j.to_bits() as i32 + (ni << 23)) as u32);
    }
    scale_once(j, n)
}

/// `n = round(x log2 e)` and the polynomial `j ~ e^(x - n ln2)` of [`exp_poly`].
#[inline(always)]
fn exp_parts(x: f32) -> (f32, f32) {
    let c = f32::from_bits;
    // 1.5 * 2^23: adding it rounds to an integer.
    let r = c(0x4b40_0000);
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6).mul_add(b, 1.0));
    (n, j)
}

/// `j * 2^n` rounded once (AVX-512 `scalef`), for `|n| <= 192`: exact in f64, then one
/// rounding to f32 (subnormal and overflowing results included).
#[inline(never)]
fn scale_once(j: f32, n: f32) -> f32 {
    (f64::from(j) * 2f64.powi(n as i32)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|x| x.to_bits()).collect()
    }

    /// Asserts that every ISA this CPU runs gives `swiglu_scalar`'s bits (any NaN for a NaN)
    /// on `gate` and `up`, through the vector body and the scalar tail alike.
    fn assert_every_isa_matches_scalar(gate: &[f32], up: &[f32], what: &str) {
        let mut want = vec![0.0; gate.len()];
        swiglu_scalar(gate, up, &mut want);
        for isa in Isa::tested() {
            let mut got = vec![f32::NAN; gate.len()];
            swiglu_with(isa, gate, up, &mut got);
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert!(
                    w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                    "{isa} {what} [{i}] gate {}: {w} vs {g}",
                    gate[i]
                );
            }
        }
    }

    #[test]
    fn every_isa_is_bit_identical_to_scalar() {
        // Odd lengths: empty, shorter than one vector, one vector plus a tail, the default
        // model's 1536 plus 1 (the tail of every width runs).
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        for n in [0, 1, 7, 15, 17, 31, 33, 1537] {
            let g: Vec<f32> = (0..n).map(|_| next() * 12.0).collect();
            let u: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
            assert_every_isa_matches_scalar(&g, &u, &format!("length {n}"));
        }
        // Extreme but NaN-free inputs: large of both signs (e^-x overflows to infinity or
        // underflows to 0 and subnormals), near the |n| > 192 cut, tiny, zeros, and large `up`.
        let mut g = vec![
            0.0f32,
            -0.0,
            1e-38,
            -1e-38,
            f32::MIN_POSITIVE,
            3e38,
            -3e38,
            f32::MAX,
        ];
        g.extend([
            f32::MIN,
            1e30,
            -1e30,
            1e6,
            -1e6,
            133.0,
            -133.0,
            133.5,
            -133.5,
            88.7,
            -88.7,
        ]);
        g.extend((0..401).map(|i| (i as f32 - 200.0) * 0.7731));
        let u: Vec<f32> = (0..g.len())
            .map(|i| [1.0, -2.5, 1e20, -1e-20, 3e38][i % 5])
            .collect();
        assert_every_isa_matches_scalar(&g, &u, "extremes");
    }

    #[test]
    fn exp_poly_fast_path_is_the_single_rounding() {
        // Every n from -192 to 192 (subnormal, normal and overflowing products alike).
        let mut x = -134.0f32;
        while x < 134.0 {
            let (n, j) = exp_parts(x);
            assert_eq!(exp_poly(x).to_bits(), scale_once(j, n).to_bits(), "x {x}");
            x += 0.0031;
        }
    }

    #[test]
    fn exp_poly_is_close_to_libm() {
        let mut worst = 0f32;
        let mut x = -80.0f32;
        while x < 80.0 {
            let want = x.exp();
            let rel = ((exp_poly(x) - want) / want).abs();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert!(exp_poly(f32::NAN).is_nan());
        assert!(exp_poly(-1000.0) == 0.0 && exp_poly(1000.0) == f32::INFINITY);
    }

    #[test]
    fn known_values_and_twins_agree() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!(silu(-200.0).abs() < 1e-30 && (silu(200.0) - 200.0).abs() < 1e-3);
        let g: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let u: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).sin()).collect();
        let mut a = vec![0.0; 1000];
        swiglu_scalar(&g, &u, &mut a);
        let mut b = vec![0.0; 1000];
        swiglu(&g, &u, &mut b);
        assert_eq!(bits(&a), bits(&b), "the selected kernel ISA's version");
        for i in 0..1000 {
            let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
            assert!((a[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "{i}");
        }
    }
}
