//! Attention in llama.cpp's CPU flash-attention order (one query row, f16 K/V): the query is
//! rounded to f16, each score is an f16·f16 dot product summed in a fixed tree (four 16-lane
//! partial vectors, then a halving reduction), the online softmax visits positions one by one
//! with `expf`, and the weighted V sum is kept in an **f16** accumulator (rounded after every
//! fused multiply-add and every rescale), divided by the softmax sum at the end.
//!
//! Why: SmolLM2's activations are quantized to 8 bits right after attention (the Wo matmul), so
//! output differences of ~1e-5 flip Q8 roundings and grow into visible logit differences. Using
//! the reference's order and roundings makes kiln's attention output bit-identical to it for
//! head_dim 64 (the default model), which is what the golden test compares against.

use super::HeadView;
use half::f16;

/// Lanes of the reference's score vectors (AVX-512: 16 f32).
const LANES: usize = 16;
/// Partial-sum vectors of the reference's f16 dot product (64 values per step).
const PARTS: usize = 4;

/// Sums `p` (16 lanes) the way `_mm512_reduce_add_ps` does: halves, then quarters, ...
fn reduce_lanes(p: &[f32; LANES]) -> f32 {
    let mut v = *p;
    let mut w = LANES / 2;
    while w >= 1 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// Dot product of the f16 query `q` with position `pos` of a K tile laid out `[dim][pos]`
/// (`bs` positions per dimension), in the reference's summation order. `q.len()` is a multiple
/// of 64 (the caller checks); the tail past the last full 64 is summed left to right.
fn score(q: &[f32], k: &[f16], bs: usize, pos: usize) -> f32 {
    let d = q.len();
    let step = LANES * PARTS;
    let full = d - d % step;
    let mut acc = [[0.0f32; LANES]; PARTS];
    for base in (0..full).step_by(step) {
        for (j, part) in acc.iter_mut().enumerate() {
            for (lane, a) in part.iter_mut().enumerate() {
                let i = base + j * LANES + lane;
                *a = q[i].mul_add(k[i * bs + pos].to_f32(), *a);
            }
        }
    }
    // Halving over the partial vectors: (0 + 2), (1 + 3), then (0 + 1).
    let mut w = PARTS / 2;
    while w >= 1 {
        for j in 0..w {
            for lane in 0..LANES {
                acc[j][lane] += acc[j + w][lane];
            }
        }
        w /= 2;
    }
    let mut s = f64::from(reduce_lanes(&acc[0]));
    for (i, &qi) in q.iter().enumerate().skip(full) {
        s += f64::from(qi * k[i * bs + pos].to_f32());
    }
    s as f32
}

/// Attends the `q.len() / head_dim` query heads of one GQA group in the reference's order,
/// writing `out` (same shape as `q`). `scratch` must hold at least `2 * head_dim` values.
pub(super) fn attend_group(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: f32,
    scratch: &mut [f32],
) {
    let (d, bs) = (view.head_dim, view.block_size);
    let g = q.len() / d;
    let (qh, acc) = scratch[..2 * d].split_at_mut(d);
    for j in 0..g {
        for (h, &x) in qh.iter_mut().zip(&q[j * d..][..d]) {
            *h = f16::from_f32(x).to_f32();
        }
        // The f16 accumulator, held as f32 values that are always f16-representable.
        acc.fill(0.0);
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        for bi in 0..view.n_blocks() {
            let (k, v, n) = view.block(bi);
            for p in 0..n {
                let s = score(qh, k, bs, p) * scale;
                let (mut ms, mut vs) = (1.0f32, 1.0f32);
                if s > m {
                    ms = (m - s).exp();
                    m = s;
                    for a in acc.iter_mut() {
                        *a = f16::from_f32(*a * ms).to_f32();
                    }
                } else {
                    vs = (s - m).exp();
                }
                for (a, &x) in acc.iter_mut().zip(&v[p * d..][..d]) {
                    *a = f16::from_f32(x.to_f32().mul_add(vs, *a)).to_f32();
                }
                l = l * ms + vs;
            }
        }
        let inv = if l == 0.0 { 0.0 } else { 1.0 / l };
        for (o, &a) in out[j * d..][..d].iter_mut().zip(acc.iter()) {
            *o = a * inv;
        }
    }
}
