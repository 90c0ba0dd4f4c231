//! Truncation: top-k, top-p (nucleus) and min-p, and the ranked `top_logprobs` list, all on
//! the few largest entries of a row, found by selection rather than by sorting the vocabulary.
//!
//! [`Ranked`] hands out the `k` largest entries of a row, as a set or sorted. It first gathers
//! a candidate set with a cheap threshold: the `k`-th largest of the per-block maxima, which
//! at least `k` entries reach (each of those blocks holds its maximum), and which for real
//! logits lets only a little more than `k` entries through. It then selects
//! (`select_nth_unstable_by`) and sorts only what it hands out, and keeps that work when asked
//! for more.
//!
//! Top-p over the whole row ranks the 64 most likely tokens, then 512; a nucleus wider than
//! that goes to [`wide::draw`], which bins the mass instead of sorting.

use super::passes::{self, BLOCK};
use super::rank::by_rank;
use super::wide::{self, Wide};

/// The largest entries of one row, ranked on demand. [`Ranked::reset`] before each new row.
#[derive(Default)]
pub struct Ranked {
    /// `(logit, id)`: every entry at or above the current threshold (or every non-NaN entry
    /// when `complete`). The first `selected` are the largest `selected` entries, of which the
    /// first `sorted` are in rank order; the rest rank below them.
    cand: Vec<(f32, u32)>,
    selected: usize,
    sorted: usize,
    complete: bool,
    /// Scratch for choosing the threshold among the block maxima.
    maxima: Vec<f32>,
}

impl Ranked {
    /// Forgets the previous row.
    pub fn reset(&mut self) {
        self.cand.clear();
        self.selected = 0;
        self.sorted = 0;
        self.complete = false;
    }

    /// The `k` largest entries of `row` as `(logit, id)`, in no particular order; fewer if
    /// the row has fewer non-NaN entries. `block_max` is [`passes::block_max`] of the row.
    pub fn select(&mut self, row: &[f32], block_max: &[f32], k: usize) -> &[(f32, u32)] {
        let k = self.select_len(row, block_max, k);
        &self.cand[..k]
    }

    /// The `k` largest entries of `row` as `(logit, id)`, ranked by [`by_rank`]; fewer if the
    /// row has fewer non-NaN entries. Asking again for a larger `k` extends the same ranking.
    pub fn top(&mut self, row: &[f32], block_max: &[f32], k: usize) -> &[(f32, u32)] {
        let k = self.select_len(row, block_max, k);
        if self.sorted < k {
            self.cand[self.sorted..k].sort_unstable_by(by_rank);
            self.sorted = k;
        }
        &self.cand[..k]
    }

    /// Moves the `k` largest entries to the front of `cand`; returns how many there are.
    fn select_len(&mut self, row: &[f32], block_max: &[f32], k: usize) -> usize {
        let k = k.min(row.len());
        if !self.complete && self.cand.len() < k {
            self.gather(row, block_max, k);
        }
        let k = k.min(self.cand.len());
        if k > self.sorted {
            // Partition within the selected set if it covers k, else within the rest.
            let (from, to) = if k <= self.selected {
                (self.sorted, self.selected)
            } else {
                (self.selected, self.cand.len())
            };
            if k < to {
                self.cand[from..to].select_nth_unstable_by(k - from - 1, by_rank);
            }
            self.selected = self.selected.max(k);
        }
        k
    }

    /// Gathers a candidate set that holds the `k` largest entries.
    fn gather(&mut self, row: &[f32], block_max: &[f32], k: usize) {
        self.reset();
        if k == 0 {
            return;
        }
        if k <= block_max.len() {
            self.maxima.clear();
            self.maxima.extend_from_slice(block_max);
            self.maxima
                .select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            let threshold = self.maxima[k - 1];
            if threshold > f32::NEG_INFINITY {
                push_at_least(&mut self.cand, row, threshold);
                return;
            }
        }
        // Large `k`, a short row, or too few finite entries: every non-NaN entry.
        push_at_least(&mut self.cand, row, f32::NEG_INFINITY);
        self.complete = true;
    }
}

/// Appends every entry `>= threshold` (never NaN).
fn push_at_least(cand: &mut Vec<(f32, u32)>, row: &[f32], threshold: f32) {
    for (b, block) in row.chunks(BLOCK).enumerate() {
        let base = (b * BLOCK) as u32;
        for (i, &v) in block.iter().enumerate() {
            if v >= threshold {
                cand.push((v, base + i as u32));
            }
        }
    }
}

/// The truncation settings of one draw.
#[derive(Clone, Copy, Debug)]
pub struct Truncation {
    /// Keep the `top_k` most likely tokens; 0 or `>= n_vocab` keeps all.
    pub top_k: usize,
    /// Then the smallest ranked prefix whose probability reaches `top_p`; `>= 1` (or NaN)
    /// keeps all.
    pub top_p: f32,
    /// Then only logits `>= floor` (min-p as a logit threshold); `-inf` keeps all.
    pub floor: f32,
}

/// Buffers of [`draw`].
#[derive(Default)]
pub struct Work {
    weights: Vec<f32>,
    block_sums: Vec<f64>,
    cum: Vec<f64>,
    wide: Wide,
}

/// Draws a token from `row` (whose maximum `max` is finite; `block_max` its block maxima) at
/// `scale = 1/T` under `trunc`, with `u` uniform in [0, 1). Returns the token and
/// `exp_sum(row, max, 1, -inf)`, the softmax denominator at temperature 1 (for logprobs), or
/// NaN without `z1_wanted` when it would cost a pass of its own (the token is the same).
#[allow(clippy::too_many_arguments)]
pub fn draw(
    row: &[f32],
    block_max: &[f32],
    max: f32,
    scale: f32,
    trunc: Truncation,
    ranked: &mut Ranked,
    work: &mut Work,
    u: f64,
    z1_wanted: bool,
) -> (u32, f64) {
    let n = row.len();
    let top_p_on = trunc.top_p < 1.0;
    if trunc.top_k > 0 && trunc.top_k < n {
        let z1 = if z1_wanted {
            passes::exp_sum(row, max, 1.0, f32::NEG_INFINITY)
        } else {
            f64::NAN
        };
        let w = |v: f32, _: u32| f64::from(passes::weight(v, max, scale, f32::NEG_INFINITY));
        let cum = &mut work.cum;
        let id = if top_p_on {
            // Top-k first: the nucleus is taken within the k survivors, renormalized.
            let top = ranked.top(row, block_max, trunc.top_k);
            running_sums(top, w, f32::NEG_INFINITY, cum);
            let target = f64::from(trunc.top_p) * cum.last().copied().unwrap_or(0.0);
            let m = (cum.partition_point(|&c| c < target) + 1).min(top.len());
            draw_among(&top[..m], w, trunc.floor, cum, u)
        } else {
            draw_among(
                ranked.select(row, block_max, trunc.top_k),
                w,
                trunc.floor,
                cum,
                u,
            )
        };
        return (id, z1);
    }
    // The whole row. Top-p needs the weights before min-p; without it min-p masks them.
    let floor = if top_p_on {
        f32::NEG_INFINITY
    } else {
        trunc.floor
    };
    let totals = passes::fill_weights(
        row,
        max,
        scale,
        floor,
        &mut work.weights,
        &mut work.block_sums,
    );
    let z1 = if scale == 1.0 {
        totals.all
    } else if z1_wanted {
        passes::exp_sum(row, max, 1.0, f32::NEG_INFINITY)
    } else {
        f64::NAN
    };
    let id = if top_p_on {
        let target = f64::from(trunc.top_p) * totals.all;
        nucleus(
            row,
            block_max,
            max,
            scale,
            target,
            trunc.floor,
            ranked,
            work,
            u,
        )
    } else {
        passes::draw(&work.weights[..n], &work.block_sums, u).map(|i| i as u32)
    };
    // Only with invalid settings (min-p above 1) is nothing left: then greedy.
    let id = id.unwrap_or_else(|| passes::first_index_of(row, block_max, max) as u32);
    (id, z1)
}

/// Top-p over the whole row: the ranked prefix reaching `target` among the 64, then 512 most
/// likely tokens, else [`wide::draw`]; min-p (`floor`) applies within it. Reads the weights
/// [`passes::fill_weights`] left in `work`.
#[allow(clippy::too_many_arguments)]
fn nucleus(
    row: &[f32],
    block_max: &[f32],
    max: f32,
    scale: f32,
    target: f64,
    floor: f32,
    ranked: &mut Ranked,
    work: &mut Work,
    u: f64,
) -> Option<u32> {
    let Work {
        weights,
        block_sums,
        cum,
        wide,
    } = work;
    let weights = &mut weights[..row.len()];
    let w = |_: f32, id: u32| f64::from(weights[id as usize]);
    let mut acc = 0.0;
    let mut scanned = 0;
    for want in [64, 512] {
        let top = ranked.top(row, block_max, want);
        for &(v, id) in &top[scanned..] {
            acc += w(v, id);
            scanned += 1;
            if acc >= target {
                return Some(draw_among(&top[..scanned], w, floor, cum, u));
            }
        }
        if top.len() < want {
            // Every token is ranked and rounding kept the sum short of the target.
            return Some(draw_among(top, w, floor, cum, u));
        }
    }
    wide::draw(row, weights, block_sums, max, scale, target, floor, u, wide)
}

/// Fills `cum` with the running sums of `weight` over `entries`, counting only entries
/// `>= floor`.
fn running_sums(
    entries: &[(f32, u32)],
    weight: impl Fn(f32, u32) -> f64,
    floor: f32,
    cum: &mut Vec<f64>,
) {
    cum.clear();
    let mut acc = 0.0;
    for &(v, id) in entries {
        if v >= floor {
            acc += weight(v, id);
        }
        cum.push(acc);
    }
}

/// Draws one of `entries` (not empty) in proportion to `weight`, leaving out those below
/// `floor`.
fn draw_among(
    entries: &[(f32, u32)],
    weight: impl Fn(f32, u32) -> f64,
    floor: f32,
    cum: &mut Vec<f64>,
    u: f64,
) -> u32 {
    running_sums(entries, weight, floor, cum);
    entries.get(pick(cum, u)).map_or(0, |e| e.1)
}

/// The index drawn from running weights `cum` (non-decreasing): the first whose running
/// weight passes `u * total`, never one of weight 0 unless every weight is 0.
fn pick(cum: &[f64], u: f64) -> usize {
    let total = cum.last().copied().unwrap_or(0.0);
    let target = u * total;
    let i = cum.partition_point(|&c| c <= target);
    if i < cum.len() {
        i
    } else {
        // `u * total` rounded up to `total`: the token that completed the total.
        cum.partition_point(|&c| c < total)
            .min(cum.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_top(row: &[f32], k: usize) -> Vec<(f32, u32)> {
        let mut all: Vec<(f32, u32)> = row
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .map(|(i, &v)| (v, i as u32))
            .collect();
        all.sort_by(by_rank);
        all.truncate(k);
        all
    }

    fn ranked_top(row: &[f32], ks: &[usize]) -> Vec<Vec<(f32, u32)>> {
        let mut bm = Vec::new();
        passes::block_max(row, &mut bm);
        let mut r = Ranked::default();
        r.reset();
        ks.iter()
            .map(|&k| {
                // A set request first: the ranking that follows must not depend on it.
                let mut set: Vec<u32> = r.select(row, &bm, k / 2 + 1).iter().map(|e| e.1).collect();
                let mut want: Vec<u32> = naive_top(row, k / 2 + 1).iter().map(|e| e.1).collect();
                set.sort_unstable();
                want.sort_unstable();
                assert_eq!(set, want);
                r.top(row, &bm, k).to_vec()
            })
            .collect()
    }

    #[test]
    fn ties_rank_by_id_and_zeros_are_equal() {
        let row = [1.0, 3.0, f32::NAN, 3.0, -0.0, 0.0, f32::NEG_INFINITY];
        let got = ranked_top(&row, &[10]);
        let ids: Vec<u32> = got[0].iter().map(|e| e.1).collect();
        assert_eq!(ids, [1, 3, 0, 4, 5, 6]);
    }

    #[test]
    fn pick_never_lands_on_zero_weight() {
        let cum = [0.0, 1.0, 1.0, 3.0, 3.0];
        assert_eq!(pick(&cum, 0.0), 1);
        assert_eq!(pick(&cum, 0.34), 3);
        assert_eq!(pick(&cum, 1.0), 3);
        assert_eq!(pick(&[0.0, 0.0], 0.5), 0);
    }

    proptest! {
        #[test]
        fn top_matches_a_full_sort(
            row in prop::collection::vec(
                prop_oneof![
                    8 => -20.0f32..20.0,
                    1 => Just(f32::NAN),
                    1 => Just(f32::NEG_INFINITY),
                    2 => (0i32..4).prop_map(|x| x as f32),
                ],
                0..3000,
            ),
            ks in prop::collection::vec(0usize..4000, 1..4),
        ) {
            let got = ranked_top(&row, &ks);
            for (k, g) in ks.iter().zip(&got) {
                let want = naive_top(&row, *k);
                prop_assert_eq!(g.iter().map(|e| e.1).collect::<Vec<_>>(),
                                want.iter().map(|e| e.1).collect::<Vec<_>>());
            }
        }
    }
}
