//! Top-p over the whole row when the nucleus is wide (more than the 512 most likely tokens,
//! as on flat distributions): without sorting the row.
//!
//! The probability mass is binned by `(max - v) / T`, which orders the bins as the tokens
//! rank; the bin where the running mass crosses `top_p` is the only one sorted. Everything in
//! the bins above it is in the nucleus, everything below is out.

use super::passes;
use super::rank::by_rank;

/// Bins over `(max - v) / T` in [0, 88): below `e^-88` a weight is 0 anyway.
const BINS: usize = 2048;
const BINS_PER_UNIT: f32 = BINS as f32 / 88.0;

/// Buffers of [`draw`].
#[derive(Default)]
pub struct Wide {
    mass: Vec<f64>,
    /// The crossing bin's entries as `(logit, id)`, ranked.
    members: Vec<(f32, u32)>,
}

/// Where logit `v` falls on the bin scale: `(max - v) / T` in bins, growing as `v` falls.
#[inline(always)]
fn bin_pos(v: f32, max: f32, scale: f32) -> f32 {
    (max - v) * scale * BINS_PER_UNIT
}

/// The bin of logit `v`: 0 for the maximum, never decreasing as `v` falls, the last bin for
/// everything beyond the range (and NaN). `bin(v) < b` exactly when `bin_pos(v) < b`.
#[inline(always)]
fn bin(v: f32, max: f32, scale: f32) -> usize {
    let x = bin_pos(v, max, scale);
    if x < (BINS - 1) as f32 {
        x as usize
    } else {
        BINS - 1
    }
}

/// Draws from the nucleus of `row`: the smallest prefix, in rank order (largest logit first,
/// lower id on ties), of the tokens whose weights reach `target` (`top_p` times the total);
/// of it, only tokens `>= floor` (min-p). `weights` holds the row's untruncated weights at
/// `scale` (as [`passes::fill_weights`] leaves them, the row's length) and is overwritten with
/// the nucleus' weights; `block_sums` is scratch. `u` is uniform in [0, 1). `None` if no
/// token qualifies.
#[allow(clippy::too_many_arguments)]
pub fn draw(
    row: &[f32],
    weights: &mut [f32],
    block_sums: &mut Vec<f64>,
    max: f32,
    scale: f32,
    target: f64,
    floor: f32,
    u: f64,
    wide: &mut Wide,
) -> Option<u32> {
    let Wide { mass, members } = wide;
    mass.clear();
    mass.resize(BINS, 0.0);
    for (&v, &w) in row.iter().zip(weights.iter()) {
        mass[bin(v, max, scale)] += f64::from(w);
    }
    // The bin where the running mass reaches the target; `BINS` if rounding kept it short
    // (then the nucleus is every token).
    let mut above = 0.0;
    let mut crossing = BINS;
    for (b, &m) in mass.iter().enumerate() {
        if above + m >= target && m > 0.0 {
            crossing = b;
            break;
        }
        above += m;
    }
    members.clear();
    if crossing < BINS {
        for (i, (&v, &w)) in row.iter().zip(weights.iter()).enumerate() {
            if w > 0.0 && bin(v, max, scale) == crossing {
                members.push((v, i as u32));
            }
        }
        members.sort_unstable_by(by_rank);
        let mut acc = above;
        let cut = members
            .iter()
            .position(|&(_, id)| {
                acc += f64::from(weights[id as usize]);
                acc >= target
            })
            .map_or(members.len(), |j| j + 1);
        members.truncate(cut);
    }

    // Keep the bins above the crossing one and the crossing bin's members in the nucleus, of
    // them what min-p keeps; then draw as from any row of weights.
    let c = if crossing < BINS {
        crossing as f32
    } else {
        f32::INFINITY
    };
    for (w, &v) in weights.iter_mut().zip(row) {
        *w = if bin_pos(v, max, scale) < c && v >= floor {
            *w
        } else {
            0.0
        };
    }
    for &(v, id) in members.iter() {
        if v >= floor {
            weights[id as usize] = passes::weight(v, max, scale, f32::NEG_INFINITY);
        }
    }
    passes::block_sums(weights, block_sums);
    passes::draw(weights, block_sums, u).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_follow_the_ranking() {
        let (max, scale) = (3.0, 1.3);
        let vs = [3.0, 2.999, 1.0, -10.0, -60.0, -1e9, f32::NEG_INFINITY];
        let bins: Vec<usize> = vs.iter().map(|&v| bin(v, max, scale)).collect();
        assert_eq!(bins[0], 0);
        assert!(bins.windows(2).all(|w| w[0] <= w[1]), "{bins:?}");
        assert_eq!(bins[5], BINS - 1);
    }

    #[test]
    fn nucleus_by_hand() {
        // Equal logits rank by id: a target of 2.5 keeps ids 0, 1, 2, never 3.
        let row = [0.0f32, 0.0, 0.0, 0.0];
        let (mut wide, mut sums) = (Wide::default(), Vec::new());
        let mut seen = [0usize; 4];
        for i in 0..300 {
            let u = i as f64 / 300.0;
            let mut w = [1.0f32; 4];
            let id = draw(
                &row,
                &mut w,
                &mut sums,
                0.0,
                1.0,
                2.5,
                f32::NEG_INFINITY,
                u,
                &mut wide,
            );
            let id = id.unwrap();
            seen[id as usize] += 1;
        }
        assert_eq!(seen, [100, 100, 100, 0]);
        // Min-p drops id 0 of a row where it is lower.
        let row = [-1.0f32, 0.0, 0.0, 0.0];
        for i in 0..100 {
            let u = i as f64 / 100.0;
            let mut w = [(-1.0f32).exp(), 1.0, 1.0, 1.0];
            let id = draw(&row, &mut w, &mut sums, 0.0, 1.0, 10.0, -0.5, u, &mut wide);
            let id = id.unwrap();
            assert_ne!(id, 0);
        }
    }
}
