//! GEGLU: `h = gelu(gate) * up` with the tanh-approximated GELU, computed as llama.cpp's CPU
//! backend does (`ggml_vec_geglu_f32` with `GGML_GELU_FP16`): the gate is rounded to f16 and
//! looked up in a 65536-entry table of f16 GELU values, except below -10 (0) and from 10 on
//! (the gate itself). The table is ggml's, value for value: each entry is
//! `f16(0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))))` with the inner `1 + a x x` fused
//! (GCC contracts it into one multiply-add) and `tanhf` from the C library; NaN entries are the
//! x86 default NaN with the input's sign.

use half::f16;
use std::sync::LazyLock;

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// ggml's `ggml_gelu_f32` for one value.
fn gelu_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())
}

/// `TABLE[bits]` = the f16 GELU of the f16 value with those bits.
static TABLE: LazyLock<Box<[u16; 1 << 16]>> = LazyLock::new(|| {
    let mut t = Box::new([0u16; 1 << 16]);
    for (i, e) in t.iter_mut().enumerate() {
        let x = f16::from_bits(i as u16).to_f32();
        let y = gelu_f32(x);
        // A NaN (from a NaN or -inf input) is the x86 default NaN with the input's sign.
        *e = if y.is_nan() {
            (i as u16 & 0x8000) | 0x7e00
        } else {
            f16::from_f32(y).to_bits()
        };
    }
    t
});

/// Writes `gelu(gate[i]) * up[i]` into `out[i]`. All three have the same length.
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "geglu lengths"
    );
    let table = &**TABLE;
    for ((o, &x), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * u
        } else {
            f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32() * u
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is llama.cpp's `ggml_table_gelu_f16` byte for byte (its sha256, dumped from
    /// the reference build's libggml-cpu after `ggml_cpu_init`, little-endian u16s; see
    /// scripts/reference/README.md).
    #[test]
    fn table_is_ggmls() {
        use sha2::{Digest, Sha256};
        use std::fmt::Write;
        let bytes: Vec<u8> = TABLE.iter().flat_map(|v| v.to_le_bytes()).collect();
        let digest = Sha256::digest(&bytes);
        let mut hex = String::new();
        for b in digest {
            let _ = write!(hex, "{b:02x}");
        }
        assert_eq!(
            hex,
            "5eceda6f287dec9dc0bcfa24516d6744a031a5c52d1984688b4558aeb1daf909"
        );
    }

    #[test]
    fn edges_follow_ggml() {
        let mut out = [0.0; 4];
        geglu(&[-10.0, -11.0, 10.0, 0.0], &[2.0; 4], &mut out);
        assert_eq!(out, [0.0, 0.0, 20.0, 0.0]);
        let mut o = [0.0];
        geglu(&[1.0], &[1.0], &mut o);
        assert!((o[0] - 0.8412).abs() < 1e-3, "{}", o[0]);
    }
}
