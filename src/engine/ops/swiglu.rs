//! SwiGLU: `h = silu(gate) * up`, `silu(x) = x / (1 + e^-x)`.
//!
//! `e^x` is a branch-free polynomial ([`exp_poly`], Cephes' expf, within 2 ulp of libm) so the
//! loop vectorizes; the AVX2 twin compiles the very same code with wider vectors. No FMA
//! contraction happens in Rust, so every ISA gives bit-identical results.

/// Writes `silu(gate[i]) * up[i]` into `out[i]`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "swiglu lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 was detected at run time.
        unsafe { swiglu_avx2(gate, up, out) };
        return;
    }
    swiglu_scalar(gate, up, out);
}

/// The portable version (SSE2 vectors on x86_64 by auto-vectorization).
pub fn swiglu_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
}

/// [`swiglu_scalar`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub unsafe fn swiglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// `x / (1 + e^-x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp_poly(-x))
}

/// `e^x` for f32 without branches or libm: `2^n * p(r)` with `x = n ln2 + r`, Cephes'
/// degree-6 polynomial. Inputs are clamped to [-87.3, 88.3] (the result then saturates near
/// 0 or 1.7e38 instead of reaching 0 or infinity); NaN stays NaN.
#[inline(always)]
pub fn exp_poly(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = (x - n * C1) - n * C2;
    let z = r * r;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * z + r + 1.0;
    // (bits(t) + 127) << 23 keeps the low 9 bits of n + 127: the biased exponent of 2^n.
    let pow2n = f32::from_bits(t.to_bits().wrapping_add(127) << 23);
    y * pow2n
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(worst < 3e-7, "relative error {worst}");
        assert!(exp_poly(f32::NAN).is_nan());
        assert!(exp_poly(-1000.0) < 1e-37 && exp_poly(1000.0) > 1e38);
    }

    #[test]
    fn known_values_and_twins_agree() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!(silu(-200.0).abs() < 1e-30 && (silu(200.0) - 200.0).abs() < 1e-3);
        let g: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let u: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).sin()).collect();
        let (mut a, mut b) = (vec![0.0; 1000], vec![0.0; 1000]);
        swiglu_scalar(&g, &u, &mut a);
        swiglu(&g, &u, &mut b);
        assert_eq!(a, b);
        for i in 0..1000 {
            let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
            assert!((a[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "{i}");
        }
    }
}
