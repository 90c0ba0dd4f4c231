//! Whole-row passes: the maximum, sums of `exp`, per-token weights and the draw over them.
//!
//! A row (49,152 logits for the default model) is walked in blocks of [`BLOCK`] entries, each
//! block with [`LANES`] independent accumulators so the compiler can vectorize the loops on the
//! baseline instruction set (no `unsafe`, no run-time dispatch). The summation order is fixed
//! by the code alone, so a given row always gives the same bits on any machine and thread.
//!
//! The row passes over every entry ([`block_max`], [`exp_sum`], [`fill_weights`]) are compiled
//! three times, for the baseline, AVX2 and AVX-512, and the copy of the kernel instruction set
//! ([`crate::kernels::isa()`], which `KILN_ISA` steers) runs: wider registers, the same
//! operations (Rust never fuses a multiply and an add on its own), so the same bits.

/// Entries per block: the unit of the block maxima (candidate thresholds) and block sums (draw).
pub const BLOCK: usize = 64;
/// Independent accumulators per block.
const LANES: usize = 8;

/// Below this, `exp` is flushed to 0 (e^-87.3 ~ 1.2e-38: nothing next to the top token's 1).
const EXP_FLOOR: f32 = -87.3;

/// `e^x` for `x <= 0` in f32, about 1 ulp (Cephes `expf`: `x = n ln2 + r`, a degree-6
/// polynomial in `r`, times `2^n` built from its bits). Written without fused multiply-adds
/// and branches so it vectorizes everywhere and rounds identically everywhere. Returns 0 for
/// `x < -87.3`, `-inf` and NaN; positive `x` is treated as 0 (callers pass `x - max`).
#[inline(always)]
pub fn exp_nonpos(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n * LN2_HI` is exact for |n| < 2^15.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let keep = x >= EXP_FLOOR;
    let xc = if x > EXP_FLOOR { x } else { EXP_FLOOR };
    let xc = if xc < 0.0 { xc } else { 0.0 };
    let z = xc * LOG2E + ROUND;
    let n = z - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5;
    let y = p * (r * r) + r + 1.0;
    // n is in [-126, 0]: 2^n is a normal float whose exponent field is n + 127.
    let pow2n = f32::from_bits(z.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    if keep {
        y * pow2n
    } else {
        0.0
    }
}

/// The sampling weight of logit `v`: `e^((v - max) * scale)` if `v >= floor`, else 0 (so NaN
/// and `-inf` weigh 0).
#[inline(always)]
pub fn weight(v: f32, max: f32, scale: f32, floor: f32) -> f32 {
    let e = exp_nonpos((v - max) * scale);
    if v >= floor {
        e
    } else {
        0.0
    }
}

/// Sums `xs` in f64 with [`LANES`] accumulators, reduced in a fixed order.
#[inline(always)]
fn lane_sum(xs: &[f32]) -> f64 {
    let mut acc = [0f64; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(tail) {
        *a += f64::from(x);
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// Writes `weight(v)` for each entry of `block` into `out` (same length).
#[inline(always)]
fn block_weights(block: &[f32], max: f32, scale: f32, floor: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(block) {
        *o = weight(v, max, scale, floor);
    }
}

/// The largest entry of `xs` (NaN ignored; `-inf` if there is none).
#[inline(always)]
fn lane_max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    for (a, &x) in acc.iter_mut().zip(tail) {
        *a = if x > *a { x } else { *a };
    }
    acc.iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// Defines `pub fn $name` running `$imp` compiled for the kernel instruction set's width.
macro_rules! multiversion {
    ($(#[$doc:meta])* pub fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $imp:ident;) => {
        $(#[$doc])*
        pub fn $name($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                use crate::kernels::isa::Isa;
                /// # Safety
                /// The CPU must support AVX-512F.
                #[target_feature(enable = "avx512f")]
                unsafe fn w512($($a: $t),*) -> $r {
                    $imp($($a),*)
                }
                /// # Safety
                /// The CPU must support AVX2.
                #[target_feature(enable = "avx2")]
                unsafe fn w256($($a: $t),*) -> $r {
                    $imp($($a),*)
                }
                match crate::kernels::isa() {
                    // SAFETY: `kernels::isa()` names an instruction set this CPU supports
                    // (AVX-512 includes AVX-512F).
                    Isa::Avx512 => return unsafe { w512($($a),*) },
                    // SAFETY: as above; AVX-VNNI CPUs have AVX2.
                    Isa::Avx2 | Isa::AvxVnni => return unsafe { w256($($a),*) },
                    _ => {}
                }
            }
            $imp($($a),*)
        }
    };
}

multiversion! {
    /// Fills `block_max` with the maximum of each [`BLOCK`] of `row` and returns the row's
    /// maximum (NaN ignored; `-inf` for an empty or all-NaN/`-inf` row).
    pub fn block_max(row: &[f32], block_max: &mut Vec<f32>) -> f32 = block_max_impl;
}

multiversion! {
    /// `sum(weight(v))` over the row, block by block: the same bits as the matching total of
    /// [`fill_weights`].
    pub fn exp_sum(row: &[f32], max: f32, scale: f32, floor: f32) -> f64 = exp_sum_impl;
}

multiversion! {
    /// Writes `weight(v)` for every entry into `weights` (grown to the row's length if needed;
    /// entries beyond it are left alone) and the sum of each block into `block_sums`; returns
    /// the totals (sums of the block sums in order).
    pub fn fill_weights(
        row: &[f32],
        max: f32,
        scale: f32,
        floor: f32,
        weights: &mut Vec<f32>,
        block_sums: &mut Vec<f64>
    ) -> Totals = fill_weights_impl;
}

/// Fills `block_max` with the maximum of each [`BLOCK`] of `row` and returns the row's maximum
/// (NaN ignored; `-inf` for an empty or all-NaN/`-inf` row).
#[inline(always)]
fn block_max_impl(row: &[f32], block_max: &mut Vec<f32>) -> f32 {
    block_max.clear();
    block_max.extend(row.chunks(BLOCK).map(lane_max));
    block_max
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// The first index holding `max` (the value [`block_max`] returned), found through the block
/// maxima. Equals `engine::token_choice::argmax(row)` whenever `max` is not `-inf`.
pub fn first_index_of(row: &[f32], block_max: &[f32], max: f32) -> usize {
    let Some(b) = block_max.iter().position(|&m| m == max) else {
        return 0;
    };
    let start = b * BLOCK;
    row[start..]
        .iter()
        .position(|&v| v == max)
        .map_or(0, |i| start + i)
}

/// `sum(weight(v))` over the row, block by block: the same bits as the matching total of
/// [`fill_weights`].
#[inline(always)]
fn exp_sum_impl(row: &[f32], max: f32, scale: f32, floor: f32) -> f64 {
    let mut buf = [0f32; BLOCK];
    let mut total = 0.0;
    for block in row.chunks(BLOCK) {
        let w = &mut buf[..block.len()];
        block_weights(block, max, scale, floor, w);
        total += lane_sum(w);
    }
    total
}

/// The totals [`fill_weights`] returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Totals {
    /// Of the weights kept (at or above the floor).
    pub kept: f64,
    /// Of every weight, floor or not: `exp_sum(row, max, scale, -inf)`.
    pub all: f64,
}

/// Writes `weight(v)` for every entry into `weights` (grown to the row's length if needed;
/// entries beyond it are left alone) and the sum of each block into `block_sums`; returns
/// the totals (sums of the block sums in order).
#[inline(always)]
fn fill_weights_impl(
    row: &[f32],
    max: f32,
    scale: f32,
    floor: f32,
    weights: &mut Vec<f32>,
    block_sums: &mut Vec<f64>,
) -> Totals {
    if weights.len() < row.len() {
        weights.resize(row.len(), 0.0);
    }
    block_sums.clear();
    let mut t = Totals {
        kept: 0.0,
        all: 0.0,
    };
    for (block, w) in row.chunks(BLOCK).zip(weights.chunks_mut(BLOCK)) {
        let w = &mut w[..block.len()];
        block_weights(block, max, scale, f32::NEG_INFINITY, w);
        let all = lane_sum(w);
        let kept = if floor > f32::NEG_INFINITY {
            for (o, &v) in w.iter_mut().zip(block) {
                *o = if v >= floor { *o } else { 0.0 };
            }
            lane_sum(w)
        } else {
            all
        };
        block_sums.push(kept);
        t.kept += kept;
        t.all += all;
    }
    t
}

/// Fills `block_sums` with the sum of each block of `weights`, as [`fill_weights`] does.
pub fn block_sums(weights: &[f32], block_sums: &mut Vec<f64>) {
    block_sums.clear();
    block_sums.extend(weights.chunks(BLOCK).map(lane_sum));
}

/// Draws an index with probability `weights[i] / total` from the output of [`fill_weights`]
/// (`u` uniform in [0, 1), `total > 0`): the first index where the running sum passes
/// `u * total`, found block by block. Never returns an index of weight 0; `None` only if every
/// weight is 0.
pub fn draw(weights: &[f32], block_sums: &[f64], u: f64) -> Option<usize> {
    let total = block_sums.iter().fold(0.0, |t, s| t + s);
    let target = u * total;
    let mut acc = 0.0;
    let mut last_positive = None;
    for (b, &s) in block_sums.iter().enumerate() {
        if s <= 0.0 {
            continue;
        }
        let start = b * BLOCK;
        let block = &weights[start..(start + BLOCK).min(weights.len())];
        if acc + s > target {
            let mut inner = acc;
            for (i, &w) in block.iter().enumerate() {
                inner += f64::from(w);
                if w > 0.0 && inner > target {
                    return Some(start + i);
                }
            }
            // The sequential sum fell short of the block's lane sum by rounding.
            return last_positive_in(block).map(|i| start + i);
        }
        acc += s;
        last_positive = Some(b);
    }
    // `u * total` rounded up to `total`: the last token that has any weight.
    last_positive.and_then(|b| last_positive_in(&weights[b * BLOCK..]).map(|i| b * BLOCK + i))
}

fn last_positive_in(w: &[f32]) -> Option<usize> {
    w.iter().rposition(|&x| x > 0.0)
}

/// Sets every logit whose bit in `allowed` is clear to `-inf` (bit `i % 32` of word `i / 32`;
/// entries past the end of `allowed` are cleared too). A grammar's mask as a sampling pass.
pub fn apply_mask(row: &mut [f32], allowed: &[u32]) {
    for (w, chunk) in row.chunks_mut(32).enumerate() {
        let bits = allowed.get(w).copied().unwrap_or(0);
        if bits == u32::MAX {
            continue;
        }
        for (b, v) in chunk.iter_mut().enumerate() {
            if bits & (1 << b) == 0 {
                *v = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::token_choice::argmax;

    #[test]
    fn wide_copies_give_the_baseline_bits() {
        // The dispatched passes (AVX-512 or AVX2 here, per `kernels::isa()`) against the
        // baseline build of the same code, on a row with a ragged last block, NaN and -inf.
        let mut rng = crate::engine::token_choice::Rng::new(5);
        let mut row: Vec<f32> = (0..4_999)
            .map(|_| rng.next_f64() as f32 * 30.0 - 20.0)
            .collect();
        row[7] = f32::NAN;
        row[100] = f32::NEG_INFINITY;
        let (mut bm, mut bm0) = (vec![], vec![]);
        let max = block_max(&row, &mut bm);
        assert_eq!(max.to_bits(), block_max_impl(&row, &mut bm0).to_bits());
        assert_eq!(bm, bm0);
        for (scale, floor) in [(1.0, f32::NEG_INFINITY), (1.7, max - 9.0)] {
            let a = exp_sum(&row, max, scale, floor);
            assert_eq!(a.to_bits(), exp_sum_impl(&row, max, scale, floor).to_bits());
            let (mut w, mut s, mut w0, mut s0) = (vec![], vec![], vec![], vec![]);
            let t = fill_weights(&row, max, scale, floor, &mut w, &mut s);
            let t0 = fill_weights_impl(&row, max, scale, floor, &mut w0, &mut s0);
            assert_eq!(t, t0);
            assert_eq!(
                w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                w0.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!(s, s0);
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            let want = f64::from(x).exp();
            let rel = ((f64::from(exp_nonpos(x)) - want) / want).abs();
            worst = worst.max(rel);
            x += 0.000_731;
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp_nonpos(0.0), 1.0);
        assert_eq!(exp_nonpos(-0.0), 1.0);
        for v in [-87.5, -100.0, -1e30, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(exp_nonpos(v), 0.0, "{v}");
        }
    }

    #[test]
    fn block_max_and_first_index_match_argmax() {
        let mut row: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32).collect();
        row[7] = f32::NAN;
        let mut bm = Vec::new();
        let max = block_max(&row, &mut bm);
        assert_eq!(max, 100.0);
        assert_eq!(bm.len(), 5);
        assert_eq!(first_index_of(&row, &bm, max), argmax(&row) as usize);
        row[250] = 1000.0;
        let max = block_max(&row, &mut bm);
        assert_eq!(first_index_of(&row, &bm, max), 250);
        assert_eq!(block_max(&[], &mut bm), f32::NEG_INFINITY);
        assert_eq!(block_max(&[f32::NAN], &mut bm), f32::NEG_INFINITY);
    }

    #[test]
    fn weights_sum_like_exp_sum_and_draw_skips_zero_weights() {
        let row: Vec<f32> = (0..200).map(|i| (i % 13) as f32 * 0.3).collect();
        let (mut w, mut sums) = (Vec::new(), Vec::new());
        let max = 3.6;
        let total = fill_weights(&row, max, 0.7, 1.0, &mut w, &mut sums);
        assert_eq!(total.kept, exp_sum(&row, max, 0.7, 1.0));
        assert_eq!(total.all, exp_sum(&row, max, 0.7, f32::NEG_INFINITY));
        assert_eq!(sums.len(), 4);
        for u in [0.0, 0.1, 0.5, 0.999_999, 1.0 - f64::EPSILON] {
            let i = draw(&w, &sums, u).unwrap();
            assert!(row[i] >= 1.0 && w[i] > 0.0, "{u} -> {i}");
        }
        // `u` at the very top lands on the last token with weight.
        let last = row.iter().rposition(|&v| v >= 1.0).unwrap();
        assert_eq!(draw(&w, &sums, 1.0), Some(last));
        let total = fill_weights(&row, max, 1.0, 100.0, &mut w, &mut sums);
        assert_eq!(total.kept, 0.0);
        assert_eq!(draw(&w, &sums, 0.5), None);
    }

    #[test]
    fn mask_keeps_only_allowed_tokens() {
        let mut row: Vec<f32> = (0..70).map(|i| i as f32).collect();
        // Tokens 1, 33 and 64 allowed; 70 logits but only 3 words of bits.
        let allowed = [1u32 << 1, 1 << 1, 1];
        apply_mask(&mut row, &allowed);
        let kept: Vec<usize> = (0..70).filter(|&i| row[i].is_finite()).collect();
        assert_eq!(kept, vec![1, 33, 64]);
        assert_eq!(row[33], 33.0);
        let mut short = vec![1.0f32; 40];
        apply_mask(&mut short, &[u32::MAX]);
        assert!(
            short[..32].iter().all(|v| *v == 1.0) && short[32..].iter().all(|v| v.is_infinite())
        );
    }
}
