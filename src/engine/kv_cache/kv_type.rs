//! How the cache stores K and V values: f16 (the default, llama.cpp's default) or Q8_0
//! (`engine.kv_type = "q8_0"`, llama.cpp's `-ctk q8_0 -ctv q8_0`): 32 values share one f16
//! scale, 34 bytes per 32 values instead of 64, so the same budget holds 1.88x the positions
//! and a long decode reads half the bytes.
//!
//! # Q8_0 storage
//!
//! The i8 values sit exactly where the f16 values would (same tile layouts, see the module
//! docs of [`super`]), and the scales in a parallel f16 array, one per [`QK`] values of a
//! position's head vector:
//! - a K tile `[head_dim][pos_in_block]` has scales `[head_dim / QK][pos_in_block]`;
//! - a V tile `[pos_in_block][head_dim]` has scales `[pos_in_block][head_dim / QK]`.
//!
//! Both start at the tile's value offset divided by [`QK`]. A row is quantized as ggml's
//! `quantize_row_q8_0_ref` does ([`quantize_row`]). Attention's long-context order reads the
//! values and scales as stored; its one-row order widens a tile back to f16
//! (`engine::attention`'s dequantizing view).

use half::f16;

/// Values sharing one scale in Q8_0.
pub const QK: usize = 32;

/// The storage type of the cache's K and V values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// IEEE half precision, rounded to nearest even.
    #[default]
    F16,
    /// ggml's Q8_0: per 32 values an f16 scale `d = max|x| / 127` and `round(x / d)` as i8.
    Q8_0,
}

impl KvType {
    /// Every type, in the order error messages list them.
    pub const ALL: [KvType; 2] = [KvType::F16, KvType::Q8_0];

    /// The name configuration files and logs use: "f16" or "q8_0".
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// The type named `s` ([`KvType::name`], case-insensitive), if any.
    pub fn parse(s: &str) -> Option<KvType> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// Bytes per stored value, as a fraction `(numerator, denominator)`: 2/1 for f16, 34/32
    /// for Q8_0 (a value and its share of the scale).
    pub(crate) fn bytes_per_value(self) -> (usize, usize) {
        match self {
            KvType::F16 => (2, 1),
            KvType::Q8_0 => (QK + 2, QK),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Quantizes `x` (a multiple of [`QK`] values) into `q` (as many values) and `d` (one scale
/// per [`QK`]), as ggml's `quantize_row_q8_0_ref`: `d = max|x| / 127`, `q = round(x * (1/d))`
/// (half away from zero), `d` stored as f16 (nearest even); an all-zero block has `d = 0` and
/// zero values. Non-finite inputs never panic (`NaN` becomes 0, infinities saturate).
pub(crate) fn quantize_row(x: &[f32], q: &mut [i8], d: &mut [f16]) {
    invariant!(x.len().is_multiple_of(QK) && q.len() == x.len() && d.len() == x.len() / QK);
    for ((xb, qb), db) in x
        .chunks_exact(QK)
        .zip(q.chunks_exact_mut(QK))
        .zip(d.iter_mut())
    {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = amax / 127.0;
        let id = if s != 0.0 { 1.0 / s } else { 0.0 };
        *db = f16::from_f32(s);
        for (o, &v) in qb.iter_mut().zip(xb) {
            // `as` saturates and maps NaN to 0.
            *o = (v * id).round() as i8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in KvType::ALL {
            assert_eq!(KvType::parse(t.name()), Some(t));
        }
        assert_eq!(KvType::parse("Q8_0"), Some(KvType::Q8_0));
        assert_eq!(KvType::parse("q4_0"), None);
    }

    #[test]
    fn quantize_row_matches_the_reference_rule() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let (mut q, mut d) = (vec![0i8; 64], vec![f16::ZERO; 2]);
        quantize_row(&x, &mut q, &mut d);
        for b in 0..2 {
            let xb = &x[b * QK..][..QK];
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(d[b], f16::from_f32(amax / 127.0));
            // The largest magnitude maps to +-127; every value is within half a step.
            assert!(q[b * QK..][..QK].iter().any(|v| v.abs() == 127));
            for (i, &v) in xb.iter().enumerate() {
                let back = f32::from(q[b * QK + i]) * d[b].to_f32();
                assert!(
                    (back - v).abs() <= d[b].to_f32() * 0.51 + 1e-3,
                    "{v} {back}"
                );
            }
        }
        // Zeros and non-finite values.
        let mut x = vec![0.0f32; 32];
        quantize_row(&x, &mut q[..32], &mut d[..1]);
        assert!(q[..32].iter().all(|&v| v == 0) && d[0] == f16::ZERO);
        x[3] = f32::NAN;
        x[4] = 1.0;
        quantize_row(&x, &mut q[..32], &mut d[..1]);
        assert_eq!((q[3], q[4]), (0, 127));
    }
}
