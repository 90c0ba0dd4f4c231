//! The long-context order: attention of a query at position [`LONG_FROM`] or later.
//!
//! Below [`LONG_FROM`] every query runs llama.cpp's one-row order (`ggml_order.rs`), which the
//! golden test holds bit for bit (its longest sequence ends at position 990). That order rounds
//! the weighted V sum to f16 after every position and walks the softmax one position at a
//! time, so its cost per position is a chain of conversions. From [`LONG_FROM`] on the query
//! runs this order instead, built to be tiled and split:
//!
//! - The attended positions are cut into spans of [`SPAN`] positions aligned on multiples of
//!   [`SPAN`]. Each span gives a partial softmax `(m, l, acc)` of its own, computed as below; the
//!   partials are folded in span order, as llama.cpp folds its split-KV chunks:
//!   `M = max(M, m)`, `A = A * e^(M_old - M) + acc * e^(m - M)` (a product, a product, a sum),
//!   `L` likewise; the output is `A * (1 / L)`.
//! - Inside a span, tiles of [`TILE`] positions aligned on multiples of [`TILE`]: the scores of
//!   a tile are `s = dot(q, k) * scale`, the dot product in f32 with four partial sums (element
//!   `i` goes to sum `i % 4`, fused multiply-adds in order, then `(s0 + s1) + (s2 + s3)`); the
//!   running maximum moves once per tile (`c = e^(m_old - m)` rescales the accumulator and the
//!   16 per-lane sums `lv`, which then add `p = e^(s - m)`: `lv * c + p`); the f32 accumulator
//!   adds `p * v` position by position with fused multiply-adds. At the span's end `l` is the
//!   halving sum of the 16 lanes of `lv`. `e^(s - m)` is [`exp_fast`] (no gather, ~1 ulp);
//!   the rarer `e^x` of a rescale or a fold is the C library's `expf`.
//! - A head with a sink logit (gpt-oss) folds it in after the last span, before the division
//!   (`super::sink::finish_row`, as ggml does after its last position).
//!
//! A Q8_0 cache is read as stored (no f16 tile in between): a K value is its i8 `k` and the
//! f16 scale `sk` of its 32 values, a V value `f32(v) * sv` (exact in f32: 8 x 11 significant
//! bits). A score sums each 32-dimension block in two partial sums (element `i` to sum `i % 2`,
//! fused multiply-adds of `q` and the i8 value in order), then `t = fma(p0 + p1, sk, t)` block
//! by block, and `s = t * scale`; the softmax is the f16 cache's, and the accumulator adds
//! `p * (f32(v) * sv)` with fused multiply-adds. So the scale is applied once per 32 values of
//! a K row and the kernels widen i8 in registers (`vpmovsxbd` + `vcvtdq2ps`).
//!
//! Everything is per query row, so a row's result does not depend on which rows share a tile
//! (prefill tiles many tokens and the query heads of a KV head together), on whether its spans
//! ran as separate tasks (split-K decode) or in one loop, nor on the thread that ran them: a
//! sequence's logits are the same alone, batched or chunked. The SIMD kernels (one generic
//! body, [`super::simd`]) are bit-identical to the scalar twin [`tiles_scalar`].

use super::exp_fast::exp_fast;
use super::sink::finish_row;
use super::HeadView;
use crate::engine::kv_cache::kv_type::QK;
use crate::engine::kv_cache::LayerKv;

#[cfg(target_arch = "x86_64")]
mod kv_tile;
#[cfg(target_arch = "x86_64")]
mod simd_tiles;
#[cfg(target_arch = "x86_64")]
use simd_tiles::{tiles_avx2, tiles_avx512};

/// First query position that runs the long-context order.
pub const LONG_FROM: usize = 1024;
/// Positions per span (the unit of split-K decode).
pub const SPAN: usize = 256;
/// Positions per tile (the softmax maximum moves once per tile).
pub(super) const TILE: usize = 16;
/// Query rows one [`LongScratch`] holds.
pub(super) const MAX_ROWS: usize = 64;

/// Which kernel computes the tiles (the driver and the fold are shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LongKernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// True when the SIMD long kernels handle heads of `d` values in blocks of `bs` positions: a
/// tile lies in one block and a head is whole registers.
#[cfg(target_arch = "x86_64")]
pub(super) fn simd_covers(d: usize, bs: usize) -> bool {
    d > 0 && d.is_multiple_of(16) && bs > 0 && bs.is_multiple_of(TILE)
}

/// Working memory of the long kernels for up to [`MAX_ROWS`] query rows of one KV head.
#[derive(Debug, Clone)]
pub(super) struct LongScratch {
    d: usize,
    /// Rows in use.
    n: usize,
    /// `[row][d]` queries (f32, RoPE applied).
    q: Vec<f32>,
    /// Each row attends positions `lo..hi`.
    lo: Vec<usize>,
    hi: Vec<usize>,
    /// Each row's sink logit (`super::sink`), if its head has one.
    sink: Vec<Option<f32>>,
    /// The current span's partial: maximum, rescale of this tile, sum, per-lane sums,
    /// scores then probabilities of this tile, accumulator.
    m: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the SIMD tiles only
    c: Vec<f32>,
    l: Vec<f32>,
    lv: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the SIMD tiles only
    s: Vec<f32>,
    acc: Vec<f32>,
    /// Each row's lanes `a..b` attended in this tile.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    lanes: Vec<(usize, usize)>,
    /// The tile's K as f32, `[d][TILE]`, when many rows share it (a Q8_0 tile's i8 values,
    /// unscaled).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    kf: Vec<f32>,
    /// A Q8_0 tile's V scales as f32, `[TILE][d / QK]`, and its V values scaled to f32,
    /// `[TILE][d]`, when many rows share them.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vsf: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vf: Vec<f32>,
    /// The fold of the spans so far.
    run_m: Vec<f32>,
    run_l: Vec<f32>,
    run_a: Vec<f32>,
}

impl LongScratch {
    pub(super) fn new(d: usize) -> LongScratch {
        let rows = |w: usize| vec![0.0; MAX_ROWS * w];
        LongScratch {
            d,
            n: 0,
            q: rows(d),
            lo: vec![0; MAX_ROWS],
            hi: vec![0; MAX_ROWS],
            sink: vec![None; MAX_ROWS],
            m: rows(1),
            c: rows(1),
            l: rows(1),
            lv: rows(TILE),
            s: rows(TILE),
            acc: rows(d),
            lanes: vec![(0, 0); MAX_ROWS],
            kf: vec![0.0; d * TILE],
            vsf: vec![0.0; d.div_ceil(QK) * TILE],
            vf: vec![0.0; d * TILE],
            run_m: rows(1),
            run_l: rows(1),
            run_a: rows(d),
        }
    }

    /// Starts a set of rows (at most [`MAX_ROWS`]).
    pub(super) fn clear(&mut self) {
        self.n = 0;
    }

    /// Adds a row: query `q` (`head_dim` values) attending positions `lo..hi`, with its head's
    /// sink logit if it has one.
    pub(super) fn push(&mut self, q: &[f32], lo: usize, hi: usize, sink: Option<f32>) {
        let (r, d) = (self.n, self.d);
        assert!(
            r < MAX_ROWS && q.len() == d && lo < hi,
            "long attention row"
        );
        self.q[r * d..][..d].copy_from_slice(q);
        self.lo[r] = lo;
        self.hi[r] = hi;
        self.sink[r] = sink;
        self.n += 1;
    }

    pub(super) fn rows(&self) -> usize {
        self.n
    }

    /// Row `r`'s partial of the last span computed: `(m, l, acc)`.
    pub(super) fn partial(&self, r: usize) -> (f32, f32, &[f32]) {
        (self.m[r], self.l[r], &self.acc[r * self.d..][..self.d])
    }

    /// Row `r`'s output after [`attend_rows`].
    pub(super) fn output(&self, r: usize) -> &[f32] {
        &self.run_a[r * self.d..][..self.d]
    }

    /// True when row `r` attends a position of span `j`.
    fn in_span(&self, r: usize, j: usize) -> bool {
        self.lo[r] < (j + 1) * SPAN && self.hi[r] > j * SPAN
    }
}

/// Spans a row attending `lo..hi` touches: `first..last`.
pub(super) fn spans_of(lo: usize, hi: usize) -> std::ops::Range<usize> {
    lo / SPAN..(hi - 1) / SPAN + 1
}

/// Folds a span's partial `(m, l, a)` into the running `(run_m, run_l, run_a)` (see the module
/// docs); one implementation for every kernel.
pub(super) fn fold(run_m: &mut f32, run_l: &mut f32, run_a: &mut [f32], m: f32, l: f32, a: &[f32]) {
    let mn = run_m.max(m);
    let so = (*run_m - mn).exp();
    let sn = (m - mn).exp();
    for (x, &y) in run_a.iter_mut().zip(a) {
        *x = *x * so + y * sn;
    }
    *run_l = *run_l * so + l * sn;
    *run_m = mn;
}

/// Halving sum of 16 lanes: `v[i] += v[i + w]` for w = 8, 4, 2, 1.
fn reduce16(lv: &[f32]) -> f32 {
    let mut v = [0f32; TILE];
    v.copy_from_slice(&lv[..TILE]);
    let mut w = TILE / 2;
    while w >= 1 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// Computes span `j`'s partial for every row of `sc` that attends a position of it (the others'
/// partials are left stale: check [`LongScratch::in_span`]).
pub(super) fn span_partial(
    kernel: LongKernel,
    view: &mut HeadView,
    sc: &mut LongScratch,
    j: usize,
    scale: f32,
) {
    let (n, d) = (sc.n, sc.d);
    let (mut lo, mut hi) = (usize::MAX, 0);
    for r in 0..n {
        sc.m[r] = f32::NEG_INFINITY;
        sc.lv[r * TILE..][..TILE].fill(0.0);
        sc.acc[r * d..][..d].fill(0.0);
        if sc.in_span(r, j) {
            lo = lo.min(sc.lo[r]);
            hi = hi.max(sc.hi[r]);
        }
    }
    if lo >= hi {
        return;
    }
    let begin = lo.max(j * SPAN) / TILE * TILE;
    let end = hi.min((j + 1) * SPAN);
    match kernel {
        LongKernel::Scalar => tiles_scalar(view, sc, begin, end, scale),
        // SAFETY: `LongKernel::Avx2` is chosen only when the CPU has AVX2, FMA and F16C and
        // `simd_covers` accepted the view's shape.
        #[cfg(target_arch = "x86_64")]
        LongKernel::Avx2 => unsafe { tiles_avx2(view, sc, begin, end, scale) },
        // SAFETY: as above, with AVX-512F.
        #[cfg(target_arch = "x86_64")]
        LongKernel::Avx512 => unsafe { tiles_avx512(view, sc, begin, end, scale) },
    }
    for r in 0..n {
        sc.l[r] = reduce16(&sc.lv[r * TILE..]);
    }
}

/// Attends every row of `sc` over all its spans, folding them in order; the outputs are then
/// [`LongScratch::output`].
pub(super) fn attend_rows(
    kernel: LongKernel,
    view: &mut HeadView,
    sc: &mut LongScratch,
    scale: f32,
) {
    let (n, d) = (sc.n, sc.d);
    let (mut first, mut end) = (usize::MAX, 0);
    for r in 0..n {
        sc.run_m[r] = f32::NEG_INFINITY;
        sc.run_l[r] = 0.0;
        sc.run_a[r * d..][..d].fill(0.0);
        let s = spans_of(sc.lo[r], sc.hi[r]);
        first = first.min(s.start);
        end = end.max(s.end);
    }
    for j in first..end {
        span_partial(kernel, view, sc, j, scale);
        for r in 0..n {
            if sc.in_span(r, j) {
                let (m, l) = (sc.m[r], sc.l[r]);
                fold(
                    &mut sc.run_m[r],
                    &mut sc.run_l[r],
                    &mut sc.run_a[r * d..][..d],
                    m,
                    l,
                    &sc.acc[r * d..][..d],
                );
            }
        }
    }
    for r in 0..n {
        finish_row(
            sc.run_m[r],
            sc.run_l[r],
            sc.sink[r],
            &mut sc.run_a[r * d..][..d],
        );
    }
}

/// Lanes `a..b` of the tile starting at `t0` that `lo..hi` covers (`a >= b`: none).
fn lanes(lo: usize, hi: usize, t0: usize) -> (usize, usize) {
    (
        lo.saturating_sub(t0).min(TILE),
        hi.saturating_sub(t0).min(TILE),
    )
}

/// The dot product of the module docs: four partial sums by `i % 4`, then `(0 + 1) + (2 + 3)`.
fn dot4(q: &[f32], k: impl Fn(usize) -> f32) -> f32 {
    let mut p = [0f32; 4];
    for (i, &x) in q.iter().enumerate() {
        p[i % 4] = x.mul_add(k(i), p[i % 4]);
    }
    (p[0] + p[1]) + (p[2] + p[3])
}

/// The Q8_0 dot product of the module docs: per block of [`QK`] dimensions two partial sums of
/// `q[i] * k(i)` by `i % 2`, then `t = fma(p0 + p1, s(block), t)`. `q.len()` is a multiple of
/// [`QK`].
fn dot_q8(q: &[f32], k: impl Fn(usize) -> f32, s: impl Fn(usize) -> f32) -> f32 {
    let mut t = 0f32;
    for (blk, qb) in q.chunks_exact(QK).enumerate() {
        let mut p = [0f32; 2];
        for (j, &x) in qb.iter().enumerate() {
            p[j % 2] = x.mul_add(k(blk * QK + j), p[j % 2]);
        }
        t = (p[0] + p[1]).mul_add(s(blk), t);
    }
    t
}

/// The scalar twin: tiles `begin..end` (tile-aligned `begin`) of every row, any head size and
/// block size (a Q8_0 cache's head size is a multiple of [`QK`]).
fn tiles_scalar(view: &mut HeadView, sc: &mut LongScratch, begin: usize, end: usize, scale: f32) {
    let (d, bs) = (view.head_dim, view.block_size);
    for t0 in (begin..end).step_by(TILE) {
        for r in 0..sc.n {
            let (a, b) = lanes(sc.lo[r], sc.hi[r], t0);
            if a >= b {
                continue;
            }
            let q = &sc.q[r * d..][..d];
            let mut s = [f32::NEG_INFINITY; TILE];
            for (lane, x) in s.iter_mut().enumerate().take(b).skip(a) {
                let pos = t0 + lane;
                let p = pos % bs;
                *x = match view.raw_tile(pos / bs) {
                    LayerKv::F16 { k, .. } => dot4(q, |i| k[i * bs + p].to_f32()),
                    LayerKv::Q8 { k, k_scale: ks, .. } => dot_q8(
                        q,
                        |i| f32::from(k[i * bs + p]),
                        |blk| ks[blk * bs + p].to_f32(),
                    ),
                } * scale;
            }
            let tmax = s.iter().fold(f32::NEG_INFINITY, |x, &y| x.max(y));
            let acc = &mut sc.acc[r * d..][..d];
            let mut c = 1.0f32;
            if tmax > sc.m[r] {
                c = (sc.m[r] - tmax).exp();
                sc.m[r] = tmax;
                for x in acc.iter_mut() {
                    *x *= c;
                }
            }
            let m = sc.m[r];
            for (x, lv) in s.iter_mut().zip(&mut sc.lv[r * TILE..][..TILE]) {
                *x = exp_fast(*x - m);
                *lv = *lv * c + *x;
            }
            for (lane, &p) in s.iter().enumerate().take(b).skip(a) {
                let pos = t0 + lane;
                let row = (pos % bs) * d;
                match view.raw_tile(pos / bs) {
                    LayerKv::F16 { v, .. } => {
                        for (x, y) in acc.iter_mut().zip(&v[row..][..d]) {
                            *x = p.mul_add(y.to_f32(), *x);
                        }
                    }
                    LayerKv::Q8 { v, v_scale: vs, .. } => {
                        for (i, (x, &y)) in acc.iter_mut().zip(&v[row..][..d]).enumerate() {
                            let sv = vs[(row + i) / QK].to_f32();
                            *x = p.mul_add(f32::from(y) * sv, *x);
                        }
                    }
                }
            }
        }
    }
}
