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

use super::sink::finish_row;
use super::HeadView;
use half::f16;

#[cfg(target_arch = "x86_64")]
mod simd_twin;
#[cfg(target_arch = "x86_64")]
pub(super) use simd_twin::{attend_group_avx2, attend_group_avx512};

/// Lanes of the reference's score vectors (AVX-512: 16 f32).
const LANES: usize = 16;
/// Partial-sum vectors of the reference's f16 dot product (64 values per step).
const PARTS: usize = 4;

/// How a raw q·k dot product becomes the softmax argument, as in ggml's flash attention:
/// `s * scale`, then with logit softcapping (`cap != 0`, `scale` already divided by the cap)
/// `cap * tanh(s * scale)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Scores {
    pub scale: f32,
    pub cap: f32,
}

impl Scores {
    #[inline(always)]
    pub fn apply(self, s: f32) -> f32 {
        let s = s * self.scale;
        if self.cap != 0.0 {
            self.cap * s.tanh()
        } else {
            s
        }
    }
}

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
            let add = acc[j + w];
            for (a, b) in acc[j].iter_mut().zip(add) {
                *a += b;
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
/// writing `out` (same shape as `q`); `sinks`, when given, holds each of these heads' sink
/// logit (`super::sink`). `scratch` must hold at least `2 * head_dim` values. Any head_dim and
/// block size (a block size of 1 included).
pub(super) fn attend_group(
    view: &mut HeadView,
    q: &[f32],
    out: &mut [f32],
    sc: Scores,
    sinks: Option<&[f32]>,
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
        for bi in view.first_block()..view.n_blocks() {
            let (k, v, lo, n) = view.block(bi);
            for p in lo..n {
                let s = sc.apply(score(qh, k, bs, p));
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
                l = l.mul_add(ms, vs);
            }
        }
        let o = &mut out[j * d..][..d];
        o.copy_from_slice(acc);
        finish_row(m, l, sinks.map(|s| s[j]), o);
    }
}

/// Heads' worth of scratch (`head_dim` values each) that every kernel here fits in: the scalar
/// twin's query and accumulator, the SIMD twins' f16-rounded queries (up to four heads a pass).
pub(super) const SCRATCH_HEADS: usize = 4;

/// Head sizes the SIMD twins handle: 64, 96, 128, 192, 256 and 512, the sizes of the model
/// families kiln runs (512: gemma4's global layers, and its 256-wide local heads as the cache
/// stores them). Up to 256 a pass's accumulators live in registers; wider ones spill to f16
/// scratch (`simd_twin::heads`). Past the last multiple of 64 (96's last 32 values) the
/// reference sums the products in f64, as [`score`] does.
fn simd_head_dim(d: usize) -> bool {
    matches!(d, 64 | 96 | 128 | 192 | 256 | 512)
}

/// True when [`attend_group_avx512`] handles heads of `d` values in blocks of `bs` positions:
/// `d` one of [`simd_head_dim`]'s, `bs` a multiple of 16 (it scores 16 positions of a K tile
/// at once).
pub(super) fn avx512_covers(d: usize, bs: usize) -> bool {
    simd_head_dim(d) && bs > 0 && bs.is_multiple_of(LANES)
}

/// Positions the AVX2 twin scores at once: one 256-bit register of f32.
const AVX2_POS: usize = 8;

/// True when [`attend_group_avx2`] handles heads of `d` values in blocks of `bs` positions:
/// `d` as for AVX-512, `bs` a multiple of 8 (it scores 8
/// positions of a K tile at once).
pub(super) fn avx2_covers(d: usize, bs: usize) -> bool {
    simd_head_dim(d) && bs > 0 && bs.is_multiple_of(AVX2_POS)
}
