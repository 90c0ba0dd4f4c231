//! An f16 block export ([`super::KvCache::export_block`]) compressed to the Q8_0 KV format, for
//! the prefix cache's RAM tier (`cache.ram_compress = "q8_0"`): every 32 consecutive values
//! share one f16 scale, as the Q8_0 KV cache stores them (the same quantizer,
//! [`super::kv_type::quantize_row`]). Lossy: a value comes back within half a quantization
//! step (`max|x| / 254` of its group of 32) plus f16 rounding.
//!
//! # Format
//!
//! For an export of `n` f16 values: the `n` quantized values (i8), then the `n / 32` scales
//! (f16, little-endian): `n + n / 16` bytes, 53% of the f16 export. With a head dimension that
//! is a multiple of 32 (every model kiln serves with a Q8_0 KV cache), each group of 32 is
//! part of one head's vector at one position, exactly as in a Q8_0 KV cache.

use super::kv_type::{quantize_row, QK};
use half::f16;

/// The compressed size of an f16 export of `raw_len` bytes (None: not a whole number of
/// groups of 32 values).
pub fn q8_0_len(raw_len: usize) -> Option<usize> {
    (raw_len.is_multiple_of(2 * QK)).then_some(raw_len / 2 + raw_len / 2 / QK * 2)
}

/// Compresses `raw`, an f16 block export, to Q8_0 (see the module docs); None when its
/// length is not a whole number of groups of 32 values.
pub fn compress_q8_0(raw: &[u8]) -> Option<Vec<u8>> {
    let len = q8_0_len(raw.len())?;
    let n = raw.len() / 2;
    let mut out = vec![0u8; len];
    let (qs, ds) = out.split_at_mut(n);
    let mut x = [0f32; QK];
    let mut q = [0i8; QK];
    let mut d = [f16::ZERO; 1];
    for (g, (src, qg)) in raw
        .chunks_exact(2 * QK)
        .zip(qs.chunks_exact_mut(QK))
        .enumerate()
    {
        for (v, b) in x.iter_mut().zip(src.chunks_exact(2)) {
            *v = f16::from_le_bytes([b[0], b[1]]).to_f32();
        }
        quantize_row(&x, &mut q, &mut d);
        for (o, &v) in qg.iter_mut().zip(&q) {
            *o = v as u8;
        }
        ds[2 * g..2 * g + 2].copy_from_slice(&d[0].to_le_bytes());
    }
    Some(out)
}

/// The f16 export of `raw_len` bytes that `q8` (a [`compress_q8_0`] of such an export) stands
/// for, dequantized (`q * d`, rounded to f16); None when the lengths do not match.
pub fn decompress_q8_0(q8: &[u8], raw_len: usize) -> Option<Vec<u8>> {
    if q8_0_len(raw_len) != Some(q8.len()) {
        return None;
    }
    let n = raw_len / 2;
    let (qs, ds) = q8.split_at(n);
    let mut out = Vec::with_capacity(raw_len);
    for (qg, db) in qs.chunks_exact(QK).zip(ds.chunks_exact(2)) {
        let d = f16::from_le_bytes([db[0], db[1]]).to_f32();
        for &q in qg {
            out.extend_from_slice(&f16::from_f32(f32::from(q as i8) * d).to_le_bytes());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(xs: &[f32]) -> Vec<u8> {
        xs.iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect()
    }

    fn values(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect()
    }

    #[test]
    fn a_round_trip_stays_within_half_a_step_of_each_group() {
        // K/V-like values: a spread of magnitudes per group, outliers, zeros, an all-zero group.
        let mut s = 0x1234_5678u32;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let n = 64 * QK;
        let mut xs: Vec<f32> = (0..n)
            .map(|i| rnd() * [0.01, 1.0, 8.0, 300.0][i / QK % 4])
            .collect();
        xs[5] = 0.0;
        xs[QK..2 * QK].fill(0.0);
        xs[7 * QK + 3] = -1000.0;
        let raw = f16_bytes(&xs);
        let q8 = compress_q8_0(&raw).unwrap();
        assert_eq!(q8.len(), n + n / 16);
        assert!(q8.len() * 100 <= raw.len() * 54, "about half of f16");
        let back = decompress_q8_0(&q8, raw.len()).unwrap();
        let (orig, got) = (values(&raw), values(&back));
        for g in 0..n / QK {
            let group = &orig[g * QK..(g + 1) * QK];
            let amax = group.iter().fold(0f32, |m, v| m.max(v.abs()));
            // Half a step, the scale's own f16 rounding over 127 steps, and the output's.
            for (a, b) in group.iter().zip(&got[g * QK..(g + 1) * QK]) {
                let bound = amax / 254.0 + amax * 2f32.powi(-11) + a.abs() * 2f32.powi(-10);
                assert!(
                    (a - b).abs() <= bound,
                    "group {g}: {a} -> {b} (bound {bound})"
                );
            }
        }
        assert!(got[QK..2 * QK].iter().all(|&v| v == 0.0), "zeros stay zero");
        // Lengths that are not whole groups are refused, never misread.
        assert_eq!(compress_q8_0(&raw[..raw.len() - 2]), None);
        assert_eq!(decompress_q8_0(&q8[1..], raw.len()), None);
        assert_eq!(decompress_q8_0(&q8, raw.len() + 64), None);
    }
}
