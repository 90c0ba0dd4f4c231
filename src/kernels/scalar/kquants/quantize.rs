//! Weight quantizers for Q2_K..Q6_K (kiln's own; any reasonable quantizer reads back with the
//! same dequantizer, so these need not match llama.cpp's bit for bit).
//!
//! Each sub-block gets a weighted least-squares fit over a small grid of candidate grid scales
//! ([`fit_affine`] for the types with a min, [`fit_symmetric`] for the signed ones); the
//! sub-block scales (and mins) are then quantized against one f16 block scale, and every value
//! is re-rounded with the scale that will actually be stored.

use super::nearest_int;
use crate::kernels::blocks::kquants::{
    pack_scales_mins_k4, pack_scales_q3k, scales_mins_k4, scales_q3k, write_block, BlockQ2K,
    BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, KBlock, QK_K,
};
use half::f16;

/// Values whose magnitude is below this count as zero (an all-zero sub-block).
const GROUP_EPS: f32 = 1e-15;

/// Candidate offsets added to `nmax` when searching a sub-block's grid scale.
const GRID_STEPS: i32 = 10;
const GRID_DELTA: f32 = 0.1;

/// Fit `x ~ scale * l - min` with `l` in `0..=nmax` and `min >= 0`, minimizing the error
/// weighted by `w`. Writes `l`, returns `(scale, min)`.
fn fit_affine(x: &[f32], w: &[f32], nmax: i32, l: &mut [u8]) -> (f32, f32) {
    let lo = x.iter().copied().fold(f32::INFINITY, f32::min).min(0.0);
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if hi - lo <= GROUP_EPS || !(hi - lo).is_finite() {
        l.fill(0);
        return (0.0, -lo.max(-f32::MAX));
    }
    let (sw, swx) = x
        .iter()
        .zip(w)
        .fold((0.0, 0.0), |(a, b), (&xi, &wi)| (a + wi, b + wi * xi));
    let mut best = (f32::INFINITY, 0.0, 0.0);
    let mut cand = vec![0u8; x.len()];
    for step in -GRID_STEPS..=GRID_STEPS {
        let iscale = (nmax as f32 + GRID_DELTA * step as f32) / (hi - lo);
        let (mut swl, mut swl2, mut swxl) = (0.0f32, 0.0f32, 0.0f32);
        for ((c, &xi), &wi) in cand.iter_mut().zip(x).zip(w) {
            let q = nearest_int(iscale * (xi - lo)).clamp(0, nmax);
            *c = q as u8;
            let q = q as f32;
            swl += wi * q;
            swl2 += wi * q * q;
            swxl += wi * q * xi;
        }
        // Solve the 2x2 normal equations for (scale, offset); offset must stay <= 0.
        let det = sw * swl2 - swl * swl;
        let (mut scale, mut offset) = if det > 0.0 {
            (
                (sw * swxl - swx * swl) / det,
                (swl2 * swx - swl * swxl) / det,
            )
        } else {
            (1.0 / iscale, lo)
        };
        if offset > 0.0 {
            offset = 0.0;
            scale = if swl2 > 0.0 { swxl / swl2 } else { 0.0 };
        }
        let err: f32 = cand
            .iter()
            .zip(x)
            .zip(w)
            .map(|((&q, &xi), &wi)| {
                let e = scale * q as f32 + offset - xi;
                wi * e * e
            })
            .sum();
        if err < best.0 {
            best = (err, scale, offset);
            l.copy_from_slice(&cand);
        }
    }
    (best.1, -best.2)
}

/// Fit `x ~ scale * l` with `l` in `-nmax..nmax`, weighting each value by `x^2` (large values
/// matter most). Writes `l`, returns `scale` (possibly negative: the most extreme value is
/// mapped to `-nmax`, the level without a positive twin).
fn fit_symmetric(x: &[f32], nmax: i32, l: &mut [i8]) -> f32 {
    let max = x
        .iter()
        .copied()
        .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
    if max.abs() < GROUP_EPS || !max.is_finite() {
        l.fill(0);
        return 0.0;
    }
    let mut best = (f32::NEG_INFINITY, 0.0f32);
    let mut cand = vec![0i8; x.len()];
    for step in -GRID_STEPS..=GRID_STEPS {
        let iscale = -(nmax as f32 + GRID_DELTA * step as f32) / max;
        let (mut sxl, mut sl2) = (0.0f32, 0.0f32);
        for (c, &xi) in cand.iter_mut().zip(x) {
            let q = nearest_int(iscale * xi).clamp(-nmax, nmax - 1);
            *c = q as i8;
            let wi = xi * xi;
            sxl += wi * xi * q as f32;
            sl2 += wi * (q * q) as f32;
        }
        // Weighted error = sum(w x^2) - sxl^2 / sl2: maximize sxl^2 / sl2.
        if sl2 > 0.0 && sxl * sxl / sl2 > best.0 {
            best = (sxl * sxl / sl2, sxl / sl2);
            l.copy_from_slice(&cand);
        }
    }
    best.1
}

/// Quantize non-negative `v` to `0..=nmax` levels of a step stored as f16; returns
/// `(step as stored, levels)`.
fn quantize_positive<const N: usize>(v: &[f32; N], nmax: i32) -> (f16, [u8; N]) {
    let max = v.iter().copied().fold(0.0f32, f32::max);
    let mut out = [0u8; N];
    if max <= 0.0 {
        return (f16::ZERO, out);
    }
    let iscale = nmax as f32 / max;
    for (o, &s) in out.iter_mut().zip(v) {
        *o = nearest_int(iscale * s).clamp(0, nmax) as u8;
    }
    (f16::from_f32(max / nmax as f32), out)
}

/// Weights for the affine fits: typical magnitude plus the value's own magnitude.
fn affine_weights(x: &[f32], w: &mut [f32]) {
    let av = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    for (wi, &xi) in w.iter_mut().zip(x) {
        *wi = av + xi.abs();
    }
}

/// Re-round `x` to `lo..=hi` given the stored step `d` and offset `m` (`x ~ d*l - m`),
/// storing `level - lo`; a zero step stores the level of 0.
fn requantize(x: &[f32], d: f32, m: f32, lo: i32, hi: i32, l: &mut [u8]) {
    if d == 0.0 {
        l.fill((-lo) as u8);
        return;
    }
    for (li, &xi) in l.iter_mut().zip(x) {
        *li = (nearest_int((xi + m) / d).clamp(lo, hi) - lo) as u8;
    }
}

fn check_lengths<B: KBlock>(src: &[f32], dst: &[u8], what: &str) -> usize {
    assert!(
        src.len().is_multiple_of(QK_K),
        "{what}: {} values",
        src.len()
    );
    let nb = src.len() / QK_K;
    assert!(dst.len() >= nb * B::BYTES, "{what}: {} bytes", dst.len());
    nb
}

/// Pack 256 values of 2 bits (`l < 4`) in Q2_K/Q3_K `qs` order.
fn pack_2bit(l: &[u8; QK_K]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for h in 0..2 {
        for i in 0..32 {
            let b = 128 * h + i;
            qs[32 * h + i] = l[b] | (l[b + 32] << 2) | (l[b + 64] << 4) | (l[b + 96] << 6);
        }
    }
    qs
}

/// Quantize `src` (whole 256-value blocks) to Q2_K.
pub fn quantize_row_q2_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths::<BlockQ2K>(src, dst, "quantize_row_q2_k");
    let (mut l, mut w) = ([0u8; QK_K], [0f32; 16]);
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
        for g in 0..16 {
            let xs = &x[16 * g..16 * g + 16];
            affine_weights(xs, &mut w);
            (scales[g], mins[g]) = fit_affine(xs, &w, 3, &mut l[16 * g..16 * g + 16]);
        }
        let (d, ls) = quantize_positive(&scales, 15);
        let (dmin, lm) = quantize_positive(&mins, 15);
        let mut b = BlockQ2K {
            scales: [0; 16],
            qs: [0; 64],
            d,
            dmin,
        };
        for g in 0..16 {
            b.scales[g] = ls[g] | (lm[g] << 4);
            let (dl, ml) = (d.to_f32() * ls[g] as f32, dmin.to_f32() * lm[g] as f32);
            requantize(
                &x[16 * g..16 * g + 16],
                dl,
                ml,
                0,
                3,
                &mut l[16 * g..16 * g + 16],
            );
        }
        b.qs = pack_2bit(&l);
        write_block(dst, i, &b);
    }
}

/// Quantize `src` (whole 256-value blocks) to Q3_K.
pub fn quantize_row_q3_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths::<BlockQ3K>(src, dst, "quantize_row_q3_k");
    let mut li = [0i8; 16];
    let mut l = [0u8; QK_K];
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        let mut scales = [0f32; 16];
        for g in 0..16 {
            scales[g] = fit_symmetric(&x[16 * g..16 * g + 16], 4, &mut li);
        }
        let (d, ls) = quantize_signed_scales(&scales, 32, 31);
        let mut b = BlockQ3K {
            hmask: [0; 32],
            qs: [0; 64],
            scales: pack_scales_q3k(&ls),
            d,
        };
        let ls = scales_q3k(&b.scales);
        for g in 0..16 {
            let dl = d.to_f32() * ls[g] as f32;
            requantize(
                &x[16 * g..16 * g + 16],
                dl,
                0.0,
                -4,
                3,
                &mut l[16 * g..16 * g + 16],
            );
        }
        for (v, q) in l.iter_mut().enumerate() {
            if *q > 3 {
                b.hmask[v % 32] |= 1 << (v / 32);
                *q -= 4;
            }
        }
        b.qs = pack_2bit(&l);
        write_block(dst, i, &b);
    }
}

/// Quantize signed sub-block scales to integers: the most extreme one maps to `-neg`, the
/// others are clamped to `-neg..=pos`. Returns (block step as stored, levels).
fn quantize_signed_scales(s: &[f32; 16], neg: i32, pos: i32) -> (f16, [i8; 16]) {
    let max = s
        .iter()
        .copied()
        .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
    let mut out = [0i8; 16];
    if max.abs() < GROUP_EPS {
        return (f16::ZERO, out);
    }
    let iscale = -(neg as f32) / max;
    for (o, &v) in out.iter_mut().zip(s) {
        *o = nearest_int(iscale * v).clamp(-neg, pos) as i8;
    }
    (f16::from_f32(1.0 / iscale), out)
}

/// Quantize `src` (whole 256-value blocks) to Q4_K.
pub fn quantize_row_q4_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths::<BlockQ4K>(src, dst, "quantize_row_q4_k");
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        let (d, dmin, scales, l) = affine32_block(x, 15);
        let mut qs = [0u8; 128];
        for p in 0..4 {
            for j in 0..32 {
                qs[32 * p + j] = l[64 * p + j] | (l[64 * p + 32 + j] << 4);
            }
        }
        write_block(
            dst,
            i,
            &BlockQ4K {
                d,
                dmin,
                scales,
                qs,
            },
        );
    }
}

/// Quantize `src` (whole 256-value blocks) to Q5_K.
pub fn quantize_row_q5_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths::<BlockQ5K>(src, dst, "quantize_row_q5_k");
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        let (d, dmin, scales, l) = affine32_block(x, 31);
        let (mut qs, mut qh) = ([0u8; 128], [0u8; 32]);
        for p in 0..4 {
            for j in 0..32 {
                let (a, b) = (l[64 * p + j], l[64 * p + 32 + j]);
                qs[32 * p + j] = (a & 0xF) | ((b & 0xF) << 4);
                qh[j] |= ((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1));
            }
        }
        write_block(
            dst,
            i,
            &BlockQ5K {
                d,
                dmin,
                scales,
                qh,
                qs,
            },
        );
    }
}

/// Shared Q4_K/Q5_K block fit: 8 sub-blocks of 32 with 6-bit scales and mins.
/// Returns (d, dmin, packed scales, levels in value order).
fn affine32_block(x: &[f32], nmax: i32) -> (f16, f16, [u8; 12], [u8; QK_K]) {
    let (mut l, mut w) = ([0u8; QK_K], [0f32; 32]);
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        affine_weights(xs, &mut w);
        (scales[j], mins[j]) = fit_affine(xs, &w, nmax, &mut l[32 * j..32 * j + 32]);
    }
    let (d, ls) = quantize_positive(&scales, 63);
    let (dmin, lm) = quantize_positive(&mins, 63);
    let packed = pack_scales_mins_k4(&ls, &lm);
    let (ls, lm) = scales_mins_k4(&packed);
    for j in 0..8 {
        let (dl, ml) = (d.to_f32() * ls[j] as f32, dmin.to_f32() * lm[j] as f32);
        requantize(
            &x[32 * j..32 * j + 32],
            dl,
            ml,
            0,
            nmax,
            &mut l[32 * j..32 * j + 32],
        );
    }
    (d, dmin, packed, l)
}

/// Quantize `src` (whole 256-value blocks) to Q6_K.
pub fn quantize_row_q6_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths::<BlockQ6K>(src, dst, "quantize_row_q6_k");
    let mut li = [0i8; 16];
    let mut l = [0u8; QK_K];
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        let mut scales = [0f32; 16];
        for g in 0..16 {
            scales[g] = fit_symmetric(&x[16 * g..16 * g + 16], 32, &mut li);
        }
        let (d, ls) = quantize_signed_scales(&scales, 128, 127);
        for g in 0..16 {
            let dl = d.to_f32() * ls[g] as f32;
            requantize(
                &x[16 * g..16 * g + 16],
                dl,
                0.0,
                -32,
                31,
                &mut l[16 * g..16 * g + 16],
            );
        }
        let mut b = BlockQ6K {
            ql: [0; 128],
            qh: [0; 64],
            scales: ls,
            d,
        };
        for h in 0..2 {
            for j in 0..32 {
                let v = |s: usize| l[128 * h + 32 * s + j];
                b.ql[64 * h + j] = (v(0) & 0xF) | ((v(2) & 0xF) << 4);
                b.ql[64 * h + 32 + j] = (v(1) & 0xF) | ((v(3) & 0xF) << 4);
                b.qh[32 * h + j] =
                    (v(0) >> 4) | ((v(1) >> 4) << 2) | ((v(2) >> 4) << 4) | ((v(3) >> 4) << 6);
            }
        }
        write_block(dst, i, &b);
    }
}
