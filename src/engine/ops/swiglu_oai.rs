//! gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`, `LLM_FFN_SWIGLU_OAI_MOE`):
//!
//! ```text
//! x = min(gate, limit)            y = clamp(up, -limit, limit)
//! h = x / (1 + e^(alpha * -x)) * (y + 1)        alpha = 1.702, limit = 7
//! ```
//!
//! ggml's CPU op is a plain scalar loop over the C library's `expf` (no vectorized exp), so this
//! is one scalar function with the same operations in the same order (`f32::exp` is that
//! `expf`): bit-identical to the reference on every instruction set, and there is no SIMD
//! twin to keep in step.

/// gpt-oss's `alpha` (the sigmoid's slope).
pub const ALPHA: f32 = 1.702;
/// gpt-oss's clamp on the gate (above) and on up (both sides).
pub const LIMIT: f32 = 7.0;

/// Writes `swiglu_oai(gate[i], up[i])` into `out[i]` (see the module docs). Panics when the
/// slices' lengths differ.
pub fn swiglu_oai(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "swiglu_oai lengths"
    );
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let x = g.min(LIMIT);
        let y = u.clamp(-LIMIT, LIMIT);
        let glu = x / (1.0 + (ALPHA * -x).exp());
        *o = glu * (y + 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_gate_above_and_up_both_sides() {
        let mut out = [0f32; 4];
        swiglu_oai(
            &[100.0, 0.0, -3.0, 2.0],
            &[0.0, 5.0, 100.0, -100.0],
            &mut out,
        );
        // Gate clamped at 7: 7 * sigmoid(1.702 * 7) * (0 + 1).
        let s7 = 7.0 / (1.0 + (-1.702f32 * 7.0).exp());
        assert_eq!(out[0], s7);
        // A zero gate gives zero whatever up is.
        assert_eq!(out[1], 0.0);
        // Up clamped at 7: (7 + 1) times the gate's value; a negative gate is not clamped.
        let sm3 = -3.0 / (1.0 + (1.702f32 * 3.0).exp());
        assert_eq!(out[2], sm3 * 8.0);
        // Up clamped at -7.
        let s2 = 2.0 / (1.0 + (-1.702f32 * 2.0).exp());
        assert_eq!(out[3], s2 * -6.0);
    }

    #[test]
    fn matches_the_formula_inside_the_limits() {
        let (g, u) = (0.75f32, -0.5f32);
        let mut out = [0f32];
        swiglu_oai(&[g], &[u], &mut out);
        let want = f64::from(g) / (1.0 + (-1.702 * f64::from(g)).exp()) * f64::from(u + 1.0);
        assert!((f64::from(out[0]) - want).abs() < 1e-6);
    }
}
