//! Decode attention over the paged KV cache: one query token, all heads, online softmax.
//!
//! The query heads sharing one KV head (a GQA group) are processed together: every K/V tile is
//! read and converted from f16 once per group. Scores are produced and folded into the output
//! chunk by chunk (running max `m`, running sum `l`, output rescaled when the max grows), so no
//! score matrix is ever materialized. The kernel is chosen once per process from the CPU's
//! features ([`attention_isa`]); each SIMD kernel has this file's scalar twin and is tested
//! against it and against an f64 reference.
//!
//! Determinism: blocks are visited in table order and positions in order, chunk boundaries sit
//! at fixed multiples of the block size, and the reduction order is fixed, so the output depends
//! only on `q` and the cached values, never on physical block ids or on other sequences.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod expf;
mod ggml_order;

use crate::engine::kv_cache::{KvCache, KvCacheConfig, KvCacheError};
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::sync::OnceLock;

/// Instruction set of an attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnIsa {
    Scalar,
    Avx2,
    Avx512,
}

impl AttnIsa {
    /// True when this CPU can run the kernel.
    pub fn supported(self) -> bool {
        match self {
            AttnIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// "scalar", "avx2" or "avx512".
    pub fn name(self) -> &'static str {
        match self {
            AttnIsa::Scalar => "scalar",
            AttnIsa::Avx2 => "avx2",
            AttnIsa::Avx512 => "avx512",
        }
    }

    /// The best kernel for this CPU, detected once per process.
    pub fn detected() -> AttnIsa {
        static ISA: OnceLock<AttnIsa> = OnceLock::new();
        *ISA.get_or_init(|| {
            [AttnIsa::Avx512, AttnIsa::Avx2]
                .into_iter()
                .find(|isa| isa.supported())
                .unwrap_or(AttnIsa::Scalar)
        })
    }
}

/// Name of the attention kernel this process uses ("avx512", "avx2" or "scalar"), for logs and
/// metric labels. Shapes a SIMD kernel does not cover fall back to the scalar one.
pub fn attention_isa() -> &'static str {
    AttnIsa::detected().name()
}

/// Per-thread scratch for [`KvCache::attend`], sized once from the cache shape and the number of
/// query heads; `attend` never allocates. It also names the kernel used ([`AttnIsa::detected`]
/// unless forced with [`AttnScratch::force_isa`]).
#[derive(Debug, Clone)]
pub struct AttnScratch {
    isa: AttnIsa,
    /// Scores, then weights, of one block: `[group][block_size]`.
    scores: Vec<f32>,
    /// Output accumulators `[group][head_dim]`.
    acc: Vec<f32>,
    /// Running max and sum per query head of the group.
    m: Vec<f32>,
    l: Vec<f32>,
    /// One K and one V tile converted to f32 (scalar kernel), `block_size * head_dim` each.
    k_tile: Vec<f32>,
    v_tile: Vec<f32>,
}

impl AttnScratch {
    /// Scratch for attention with `n_head` query heads over a cache of shape `cfg`.
    pub fn new(cfg: &KvCacheConfig, n_head: usize) -> AttnScratch {
        let group = n_head.div_ceil(cfg.n_head_kv.max(1));
        AttnScratch {
            isa: AttnIsa::detected(),
            scores: vec![0.0; group * cfg.block_size],
            acc: vec![0.0; group * cfg.head_dim],
            m: vec![0.0; group],
            l: vec![0.0; group],
            k_tile: vec![0.0; cfg.block_size * cfg.head_dim],
            v_tile: vec![0.0; cfg.block_size * cfg.head_dim],
        }
    }

    /// Uses `isa` instead of the detected kernel (for benchmarks and tests comparing kernels);
    /// an ISA this CPU lacks runs the scalar kernel. Results stay deterministic per kernel, but
    /// differ in the last bits between kernels: one engine must use one kernel throughout.
    pub fn force_isa(&mut self, isa: AttnIsa) {
        self.isa = isa;
    }

    /// The kernel `attend` runs with this scratch.
    pub fn isa(&self) -> AttnIsa {
        if self.isa.supported() {
            self.isa
        } else {
            AttnIsa::Scalar
        }
    }
}

/// The K and V tiles of one layer and one KV head along a sequence's block table.
pub(crate) struct HeadView<'a> {
    /// The layer's K values, `[block][kv_head][head_dim][block_size]`.
    k: &'a [f16],
    /// The layer's V values, `[block][kv_head][block_size][head_dim]`.
    v: &'a [f16],
    blocks: &'a [u32],
    /// Positions attended: `0..n_pos`.
    n_pos: usize,
    block_size: usize,
    head_dim: usize,
    /// Offset of this KV head's tile inside a block, and the size of a block, in values.
    head_off: usize,
    block_stride: usize,
}

impl<'a> HeadView<'a> {
    /// Number of blocks holding positions `0..n_pos`.
    fn n_blocks(&self) -> usize {
        self.n_pos.div_ceil(self.block_size)
    }

    /// Logical block `i`: its K tile, V tile (each `block_size * head_dim` values) and the
    /// number of attended positions in it.
    fn block(&self, i: usize) -> (&'a [f16], &'a [f16], usize) {
        let tile = self.block_size * self.head_dim;
        let base = self.blocks[i] as usize * self.block_stride + self.head_off;
        let n = self.block_size.min(self.n_pos - i * self.block_size);
        (&self.k[base..][..tile], &self.v[base..][..tile], n)
    }

    /// Hints the CPU to start loading logical block `i`'s K and V tiles into cache (no-op past
    /// the end or off x86-64). Physical blocks are scattered, so the hardware prefetcher cannot
    /// guess the next one; the kernels call this a couple of blocks ahead. One hint per 64-byte
    /// line (one per 128 bytes, counting on the adjacent-line prefetcher, measured 2x slower).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn prefetch(&self, i: usize) {
        if i < self.n_blocks() {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            const STEP: usize = 64 / size_of::<f16>();
            let (k, v, n) = self.block(i);
            let v = &v[..n * self.head_dim];
            for tile in [k, v] {
                for at in (0..tile.len()).step_by(STEP) {
                    // SAFETY: SSE is part of the x86-64 baseline; a prefetch never faults, and
                    // `at < tile.len()` keeps the address inside the tile anyway.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(tile.as_ptr().wrapping_add(at).cast()) };
                }
            }
        }
    }
}

/// How many blocks ahead the SIMD kernels prefetch.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 2;

/// One attention query: which layer, which sequence, which token.
pub(crate) struct Query<'a> {
    pub(crate) layer: usize,
    /// The sequence's block table; it must cover `0..n_pos` (checked by the caller).
    pub(crate) blocks: &'a [u32],
    /// Positions attended: `0..n_pos`.
    pub(crate) n_pos: usize,
    /// `[n_head][head_dim]`.
    pub(crate) q: &'a [f32],
}

/// Checks shapes, then attends every GQA group with the scratch's kernel (or the scalar one when
/// that does not cover the shape).
pub(crate) fn attend(
    cache: &KvCache,
    query: &Query,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) -> Result<(), KvCacheError> {
    let Query {
        layer,
        blocks,
        n_pos,
        q,
    } = *query;
    let cfg = cache.config();
    let (d, hk, bs) = (cfg.head_dim, cfg.n_head_kv, cfg.block_size);
    let n_head = q.len() / d;
    if !q.len().is_multiple_of(d) || n_head == 0 || !n_head.is_multiple_of(hk) {
        return Err(KvCacheError::Shape {
            what: "q (a multiple of n_head_kv * head_dim)",
            expected: n_head.max(1).next_multiple_of(hk) * d,
            got: q.len(),
        });
    }
    if out.len() != q.len() {
        return Err(KvCacheError::Shape {
            what: "attention out",
            expected: q.len(),
            got: out.len(),
        });
    }
    let group = n_head / hk;
    if scratch.acc.len() < group * d
        || scratch.scores.len() < group * bs
        || scratch.k_tile.len() < bs * d
    {
        return Err(KvCacheError::Shape {
            what: "attention scratch (AttnScratch::new for this n_head)",
            expected: group * d,
            got: scratch.acc.len(),
        });
    }
    let isa = scratch.isa();
    let scale = 1.0 / (d as f32).sqrt();
    let (k, v) = (cache.layer_k(layer), cache.layer_v(layer));
    for h in 0..hk {
        let view = HeadView {
            k,
            v,
            blocks,
            n_pos,
            block_size: bs,
            head_dim: d,
            head_off: h * bs * d,
            block_stride: hk * bs * d,
        };
        let span = h * group * d..(h + 1) * group * d;
        let (qg, og) = (&q[span.clone()], &mut out[span]);
        // llama.cpp's order first (see ggml_order): the AVX-512 twin, else the scalar one.
        #[cfg(target_arch = "x86_64")]
        if isa == AttnIsa::Avx512
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
            // SAFETY: AVX-512F (isa), FMA and F16C were detected.
            && unsafe { ggml_order::attend_group_avx512(&view, qg, og, scale) }
        {
            continue;
        }
        if scratch.k_tile.len() >= 2 * d {
            ggml_order::attend_group(&view, qg, og, scale, &mut scratch.k_tile);
            continue;
        }
        let done = match isa {
            AttnIsa::Scalar => false,
            // SAFETY: `isa` is only Avx512/Avx2 here when `supported()` confirmed the features.
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx512 => unsafe { avx512::attend_group(&view, qg, og, scale) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx2 => unsafe { avx2::attend_group(&view, qg, og, scale) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        };
        if !done {
            attend_group_scalar(&view, qg, og, scale, scratch);
        }
    }
    Ok(())
}

/// Scalar twin of the SIMD kernels: attention of the `q.len() / head_dim` query heads of one
/// GQA group, online softmax updated once per block.
fn attend_group_scalar(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: f32,
    s: &mut AttnScratch,
) {
    let (d, bs) = (view.head_dim, view.block_size);
    let g = q.len() / d;
    let acc = &mut s.acc[..g * d];
    acc.fill(0.0);
    s.m[..g].fill(f32::NEG_INFINITY);
    s.l[..g].fill(0.0);
    let (kf, vf) = (&mut s.k_tile[..bs * d], &mut s.v_tile[..bs * d]);
    for bi in 0..view.n_blocks() {
        let (k, v, n) = view.block(bi);
        // Convert each tile once (F16C when available), shared by the group's query heads.
        k.convert_to_f32_slice(kf);
        v[..n * d].convert_to_f32_slice(&mut vf[..n * d]);
        for j in 0..g {
            let qj = &q[j * d..][..d];
            let sj = &mut s.scores[j * bs..][..n];
            sj.fill(0.0);
            // K tile is [head_dim][pos]: accumulate dimension by dimension over positions.
            for (i, &qi) in qj.iter().enumerate() {
                let qi = qi * scale;
                for (score, &x) in sj.iter_mut().zip(&kf[i * bs..][..n]) {
                    *score += qi * x;
                }
            }
            softmax_fold(sj, &mut s.m[j], &mut s.l[j], &mut acc[j * d..][..d]);
        }
        for p in 0..n {
            let row = &vf[p * d..][..d];
            for j in 0..g {
                let w = s.scores[j * bs + p];
                for (a, &x) in acc[j * d..][..d].iter_mut().zip(row) {
                    *a += w * x;
                }
            }
        }
    }
    for j in 0..g {
        let inv = 1.0 / s.l[j];
        for (o, &a) in out[j * d..][..d].iter_mut().zip(&acc[j * d..][..d]) {
            *o = a * inv;
        }
    }
}

/// Online-softmax step for one query head: folds the `scores` of a chunk into the running max
/// `m` and sum `l`, rescales the accumulator `acc`, and turns `scores` into weights
/// `exp(score - m)`.
fn softmax_fold(scores: &mut [f32], m: &mut f32, l: &mut f32, acc: &mut [f32]) {
    let m_new = scores.iter().copied().fold(*m, f32::max);
    // exp(-inf) = 0: the first chunk starts from an empty accumulator.
    let alpha = (*m - m_new).exp();
    *l *= alpha;
    for a in acc.iter_mut() {
        *a *= alpha;
    }
    for s in scores.iter_mut() {
        *s = (*s - m_new).exp();
        *l += *s;
    }
    *m = m_new;
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_kernels_cover_the_default_model() {
        // 9 query heads over 3 KV heads of 64, blocks of 16: no scalar fallback.
        assert!(super::avx512::covers(3, 64, 16));
        assert!(super::avx2::covers(3, 64, 16));
        assert!(!super::avx512::covers(2, 24, 5));
    }
}
