//! kiln's scalar quantizers for IQ4_NL, IQ4_XS and MXFP4 (the `from_f32` of their rows).
//!
//! Same formats as ggml's (`ggml/src/ggml-quants.c`), kiln's own code and choices:
//!
//! - MXFP4 follows `quantize_row_mxfp4_ref`: per 32 values the E8M0 exponent
//!   `floor(log2(amax)) - 2 + 127` (clamped to 0..=254, so the byte is never E8M0's NaN), each
//!   value the nearest E2M1 code (first code on a tie).
//! - IQ4_NL searches a block scale: for inverse scales `t / max` (`t` each table value, and
//!   `e + k` for the table's ends e = -127, 113 and k in -7..=7), nearest codes, then the
//!   least-squares `d` of those codes; the candidate with the least squared error wins. It need not match llama.cpp's
//!   bytes (which weigh values by an importance heuristic).
//! - IQ4_XS searches each group's scale that way, then the super-block `d` among
//!   `max_scale / L` (L the 6-bit scale of the largest group, -32..=31) by the error of the
//!   group scales it rounds to; codes are then chosen for each group's final `d * ls`.
//!
//! Values already on a block's grid come back exactly (the search tries the grid's own
//! scale). Zeros give zero blocks; non-finite inputs are not supported.

use crate::kernels::blocks::nonlinear::{
    IQ4_NL_BYTES, IQ4_XS_BYTES, IQ4_XS_VALUES, KVALUES_IQ4NL, KVALUES_MXFP4, MXFP4_BYTES,
};
use crate::kernels::blocks::QK;
use crate::kernels::shape::check_convert;
use crate::kernels::DType;
use half::f16;

/// The index of the entry of `table` (scaled by `d`) nearest `x`; the first on a tie.
#[inline]
fn nearest(table: &[i8; 16], x: f32, d: f32) -> u8 {
    let mut best = 0;
    let mut best_err = (table[0] as f32 * d - x).abs();
    for (i, &t) in table.iter().enumerate().skip(1) {
        let err = (t as f32 * d - x).abs();
        if err < best_err {
            best = i;
            best_err = err;
        }
    }
    best as u8
}

/// Writes the 32 codes `q` as 16 bytes in Q4_0's nibble order.
fn pack(q: &[u8; QK], out: &mut [u8]) {
    for j in 0..QK / 2 {
        out[j] = q[j] | (q[j + QK / 2] << 4);
    }
}

/// The value of `xb` with the largest magnitude (signed; 0 for an all-zero block).
fn signed_max(xb: &[f32]) -> f32 {
    xb.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// The E8M0 byte for a block whose largest magnitude is `amax`: ggml's
/// `floor(log2(amax)) - 2 + 127`, clamped to 0..=254 (0 for an all-zero block).
fn mxfp4_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() + 125.0).clamp(0.0, 254.0) as u8
    } else {
        0
    }
}

/// Quantizes `x` to MXFP4 (17 bytes per 32 values).
pub fn quantize_mxfp4(x: &[f32], y: &mut [u8]) {
    check_convert(DType::MXFP4, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(MXFP4_BYTES)) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let e = mxfp4_exponent(amax);
        let d = crate::kernels::blocks::nonlinear::e8m0_to_f32_half(e);
        yb[0] = e;
        let q: [u8; QK] = std::array::from_fn(|j| nearest(&KVALUES_MXFP4, xb[j], d));
        pack(&q, &mut yb[1..]);
    }
}

/// The best scale of one 32-value group on the IQ4_NL table: (d, codes, squared error).
/// Tries the inverse scales `t / max` (t each table value, and `e + k` for the ends e = -127
/// and 113, k in -7..=7) and refits `d` by least squares on each candidate's codes.
fn iq4_group(xb: &[f32]) -> (f32, [u8; QK], f32) {
    let max = signed_max(xb);
    if max == 0.0 {
        return (0.0, [8; QK], 0.0); // code 8 is the table's value nearest zero (1)
    }
    let mut best = (0.0f32, [8u8; QK], f32::INFINITY);
    // Each table value as the image of `max` (which finds the scale of values already on a
    // grid), and a sweep of 15 around each end of the table.
    let ends = [KVALUES_IQ4NL[0], KVALUES_IQ4NL[15]];
    let targets = KVALUES_IQ4NL.iter().map(|&t| t as f32).chain(
        ends.iter()
            .flat_map(|&e| (-7..=7).map(move |k| (e as i32 + k) as f32)),
    );
    for target in targets {
        let id = target / max;
        let q: [u8; QK] = std::array::from_fn(|j| nearest(&KVALUES_IQ4NL, xb[j] * id, 1.0));
        let (mut sxq, mut sqq) = (0.0f32, 0.0f32);
        for (&v, &c) in xb.iter().zip(&q) {
            let t = KVALUES_IQ4NL[c as usize] as f32;
            sxq += v * t;
            sqq += t * t;
        }
        let d = if sqq > 0.0 { sxq / sqq } else { 0.0 };
        let err = group_error(xb, &q, d);
        if err < best.2 {
            best = (d, q, err);
        }
    }
    best
}

/// Squared error of the group `xb` stored as codes `q` with scale `d`.
fn group_error(xb: &[f32], q: &[u8; QK], d: f32) -> f32 {
    xb.iter()
        .zip(q)
        .map(|(&v, &c)| {
            let e = v - d * KVALUES_IQ4NL[c as usize] as f32;
            e * e
        })
        .sum()
}

/// Quantizes `x` to IQ4_NL (18 bytes per 32 values).
pub fn quantize_iq4_nl(x: &[f32], y: &mut [u8]) {
    check_convert(DType::IQ4_NL, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(IQ4_NL_BYTES)) {
        let (d, _, _) = iq4_group(xb);
        let d16 = f16::from_f32(d);
        let d = d16.to_f32();
        yb[..2].copy_from_slice(&d16.to_le_bytes());
        let q: [u8; QK] = std::array::from_fn(|j| nearest(&KVALUES_IQ4NL, xb[j], d));
        pack(&q, &mut yb[2..]);
    }
}

/// Quantizes `x` to IQ4_XS (136 bytes per 256 values).
pub fn quantize_iq4_xs(x: &[f32], y: &mut [u8]) {
    check_convert(DType::IQ4_XS, y.len(), x.len());
    for (xs, yb) in x
        .chunks_exact(IQ4_XS_VALUES)
        .zip(y.chunks_exact_mut(IQ4_XS_BYTES))
    {
        // Each group's own best scale, and the weight of an error in it (sum of its codes²).
        let groups: Vec<(f32, f32)> = xs
            .chunks_exact(QK)
            .map(|g| {
                let (d, q, _) = iq4_group(g);
                let w = q
                    .iter()
                    .map(|&c| (KVALUES_IQ4NL[c as usize] as f32).powi(2))
                    .sum();
                (d, w)
            })
            .collect();
        let max_scale = groups
            .iter()
            .fold(0.0f32, |m, &(s, _)| if s.abs() > m.abs() { s } else { m });
        let ls_for = |d: f32, s: f32| -> i32 {
            if d == 0.0 {
                0
            } else {
                ((s / d).round() as i32).clamp(-32, 31)
            }
        };
        let mut best = (0.0f32, f32::INFINITY);
        if max_scale != 0.0 {
            for l in (-32..=31).filter(|&l| l != 0) {
                let d = f16::from_f32(max_scale / l as f32).to_f32();
                let err: f32 = groups
                    .iter()
                    .map(|&(s, w)| (s - d * ls_for(d, s) as f32).powi(2) * w)
                    .sum();
                if err < best.1 {
                    best = (d, err);
                }
            }
        }
        let d = best.0;
        yb[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let mut scales_h = 0u16;
        yb[4..8].fill(0);
        for (g, (xg, &(s, _))) in xs.chunks_exact(QK).zip(&groups).enumerate() {
            let ls = ls_for(d, s);
            let u = (ls + 32) as u8;
            yb[4 + g / 2] |= (u & 0x0F) << (4 * (g % 2));
            scales_h |= ((u >> 4) as u16) << (2 * g);
            let dl = d * ls as f32;
            let q: [u8; QK] = std::array::from_fn(|j| nearest(&KVALUES_IQ4NL, xg[j], dl));
            pack(&q, &mut yb[8 + 16 * g..8 + 16 * (g + 1)]);
        }
        yb[2..4].copy_from_slice(&scales_h.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_follows_ggml() {
        assert_eq!(mxfp4_exponent(6.0), 127); // 6 = 12 * 2^(127 - 128)
        assert_eq!(mxfp4_exponent(1.0), 125);
        assert_eq!(mxfp4_exponent(0.0), 0);
        // log2(f32::MAX) rounds to 128 in f32, as in C's log2f.
        assert_eq!(mxfp4_exponent(f32::MAX), 253);
        assert_eq!(mxfp4_exponent(1e-45), 0);
    }

    #[test]
    fn nearest_takes_the_first_on_a_tie() {
        // 0 is both code 0 and code 8 of MXFP4.
        assert_eq!(nearest(&KVALUES_MXFP4, 0.0, 1.0), 0);
        assert_eq!(nearest(&KVALUES_IQ4NL, 1000.0, 1.0), 15);
    }
}
