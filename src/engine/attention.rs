//! Decode attention over the paged KV cache: one query token, all heads, in llama.cpp's CPU
//! flash-attention order (see `attention/ggml_order.rs`).
//!
//! The query heads sharing one KV head (a GQA group) are attended together. The kernel follows
//! the kernel instruction set (`KILN_ISA`, [`crate::kernels::isa()`]) through
//! [`AttnIsa::for_kernel_isa`] and is resolved per cache shape when the scratch is made
//! ([`AttnScratch::isa`] names the one that runs): the AVX-512 kernel, its AVX2 twin, or the
//! scalar twin (`ggml_order::attend_group`), all three bit-identical. A shape a SIMD kernel does
//! not cover falls back to the next narrower one that does.
//!
//! Determinism: blocks are visited in table order and positions in order, and the reduction
//! order is fixed, so the output depends only on `q` and the cached values, never on physical
//! block ids or on other sequences.
//!
//! This module reads the cache ([`KvCache`]); the cache knows nothing of attention.

#[cfg(target_arch = "x86_64")]
mod expf;
mod ggml_order;

use crate::engine::kv_cache::{BlockTable, KvCache, KvCacheConfig, KvCacheError, RELEASED};
use crate::kernels::isa::Isa;
use half::f16;

/// Instruction set of an attention kernel, narrowest first (the order [`Ord`] follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttnIsa {
    /// `ggml_order::attend_group`, any shape.
    Scalar,
    /// `ggml_order::attend_group_avx2`: head_dim a multiple of 64 up to 256, block size a
    /// multiple of 8.
    Avx2,
    /// `ggml_order::attend_group_avx512`: head_dim a multiple of 64 up to 256, block size a
    /// multiple of 16.
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
            AttnIsa::Avx512 => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            AttnIsa::Avx2 | AttnIsa::Avx512 => false,
        }
    }

    /// True when the kernel handles heads of `head_dim` values in blocks of `block_size`.
    pub fn covers(self, head_dim: usize, block_size: usize) -> bool {
        match self {
            AttnIsa::Scalar => true,
            AttnIsa::Avx2 => ggml_order::avx2_covers(head_dim, block_size),
            AttnIsa::Avx512 => ggml_order::avx512_covers(head_dim, block_size),
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

    /// The attention kernel of the kernel instruction set `isa`, before any shape is known:
    /// AVX-512 and AVX2 map to their own kernels, scalar and NEON (no NEON attention yet) to
    /// the scalar twin.
    pub fn of_kernel_isa(isa: Isa) -> AttnIsa {
        match isa {
            Isa::Avx512 => AttnIsa::Avx512,
            Isa::Avx2 | Isa::AvxVnni => AttnIsa::Avx2,
            Isa::Scalar | Isa::Neon => AttnIsa::Scalar,
        }
    }

    /// The kernel that runs heads of `head_dim` in blocks of `block_size` when the kernel
    /// instruction set is `isa` (assumed supported by this CPU, as [`crate::kernels::isa()`]'s
    /// choice is): [`AttnIsa::of_kernel_isa`], else the next narrower kernel covering the shape
    /// (AVX-512, AVX2, scalar). Pure: reads neither the CPU nor the environment.
    pub fn for_kernel_isa(isa: Isa, head_dim: usize, block_size: usize) -> AttnIsa {
        let widest = AttnIsa::of_kernel_isa(isa);
        [AttnIsa::Avx512, AttnIsa::Avx2, AttnIsa::Scalar]
            .into_iter()
            .filter(|k| *k <= widest)
            .find(|k| k.covers(head_dim, block_size))
            .unwrap_or(AttnIsa::Scalar)
    }

    /// The kernel selected for this process: [`AttnIsa::of_kernel_isa`] of
    /// [`crate::kernels::isa()`] (`KILN_ISA`, else the best the CPU has).
    pub fn selected() -> AttnIsa {
        AttnIsa::of_kernel_isa(crate::kernels::isa())
    }
}

/// Name of the attention kernel this process selected ("avx512", "avx2" or "scalar", following
/// `KILN_ISA`), for logs and metric labels. A cache shape that kernel does not cover runs a
/// narrower one ([`AttnScratch::isa`] says which for a given shape).
pub fn attention_isa() -> &'static str {
    AttnIsa::selected().name()
}

/// Per-thread scratch for [`attend`], made once for a cache shape; `attend` never allocates.
/// It also fixes the kernel used: [`AttnIsa::for_kernel_isa`] of the kernel instruction set
/// ([`crate::kernels::isa()`], which `KILN_ISA` steers) unless forced with
/// [`AttnScratch::force_isa`].
#[derive(Debug, Clone)]
pub struct AttnScratch {
    /// The kernel `attend` runs (supported by this CPU, covering the shape).
    isa: AttnIsa,
    /// The cache shape this scratch was made for.
    head_dim: usize,
    block_size: usize,
    /// The scalar kernel's f16-rounded query and f16 accumulator, the SIMD kernels' f16-rounded
    /// queries: `head_dim` values each.
    buf: Vec<f32>,
}

impl AttnScratch {
    /// Scratch for attention over a cache of shape `cfg` (any number of query heads).
    pub fn new(cfg: &KvCacheConfig) -> AttnScratch {
        let isa = AttnIsa::for_kernel_isa(crate::kernels::isa(), cfg.head_dim, cfg.block_size);
        let mut s = AttnScratch {
            isa: AttnIsa::Scalar,
            head_dim: cfg.head_dim,
            block_size: cfg.block_size,
            buf: vec![0.0; ggml_order::SCRATCH_HEADS * cfg.head_dim],
        };
        // `force_isa` also checks the CPU, which `kernels::isa()` has already done.
        s.force_isa(isa);
        s
    }

    /// Uses `isa` instead of the selected kernel (for benchmarks and tests comparing kernels);
    /// an ISA this CPU lacks, or one that does not cover the shape, runs the scalar kernel. The
    /// kernels are bit-identical, so this changes speed only.
    pub fn force_isa(&mut self, isa: AttnIsa) {
        self.isa = if isa.supported() && isa.covers(self.head_dim, self.block_size) {
            isa
        } else {
            AttnIsa::Scalar
        };
    }

    /// The kernel `attend` runs with this scratch.
    pub fn isa(&self) -> AttnIsa {
        self.isa
    }
}

/// The K and V tiles of one layer and one KV head along a sequence's block table.
struct HeadView<'a> {
    /// The layer's K values, `[block][kv_head][head_dim][block_size]`.
    k: &'a [f16],
    /// The layer's V values, `[block][kv_head][block_size][head_dim]`.
    v: &'a [f16],
    blocks: &'a [u32],
    /// Positions attended: `start..n_pos` (`start` > 0 under a sliding window).
    start: usize,
    n_pos: usize,
    block_size: usize,
    head_dim: usize,
    /// Offset of this KV head's tile inside a block, and the size of a block, in values.
    head_off: usize,
    block_stride: usize,
}

impl<'a> HeadView<'a> {
    /// Number of blocks holding positions `0..n_pos` (the attended ones are
    /// `first_block()..n_blocks()`).
    fn n_blocks(&self) -> usize {
        self.n_pos.div_ceil(self.block_size)
    }

    /// The logical block holding `start`.
    fn first_block(&self) -> usize {
        self.start / self.block_size
    }

    /// Logical block `i`: its K tile, V tile (each `block_size * head_dim` values) and the
    /// attended positions in it, `lo..n` within the block.
    fn block(&self, i: usize) -> (&'a [f16], &'a [f16], usize, usize) {
        let tile = self.block_size * self.head_dim;
        let base = self.blocks[i] as usize * self.block_stride + self.head_off;
        let first = i * self.block_size;
        let n = self.block_size.min(self.n_pos - first);
        let lo = self.start.saturating_sub(first).min(n);
        (&self.k[base..][..tile], &self.v[base..][..tile], lo, n)
    }
}

/// How one layer attends, beyond the cache's shape: the score scale, logit softcapping and
/// sliding window of the model description.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams {
    /// Scores are `q·k * scale` (`1/sqrt(head_dim)` for most models; 1 when the queries were
    /// pre-scaled).
    pub scale: f32,
    /// Scores become `cap * tanh(score / cap)` (gemma2).
    pub softcap: Option<f32>,
    /// A query at `pos` attends to `pos - window + 1 ..= pos` only.
    pub window: Option<usize>,
}

impl AttnParams {
    /// Full causal attention scaled by `1/sqrt(head_dim)`.
    pub fn standard(head_dim: usize) -> AttnParams {
        AttnParams {
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            window: None,
        }
    }
}

/// Causal attention of ONE query token at position `pos` over the positions `0..=pos` that
/// `table` holds in `cache`, for `layer`.
///
/// `q` is `[n_head][head_dim]` f32 (RoPE applied), `n_head` a multiple of `n_head_kv`
/// (query head `i` reads KV head `i / (n_head / n_head_kv)`); `out` receives
/// `[n_head][head_dim]`. Scale is `1/sqrt(head_dim)`. Online softmax position by position in
/// llama.cpp's order (never a full score matrix); the query heads of one KV head are processed
/// together so each K/V tile is read once. Deterministic: blocks in table order, positions in
/// order; the result depends only on `q` and the cached values at `0..=pos`, never on the
/// physical block ids, on other sequences or on positions after `pos`. Allocation-free.
///
/// Errors: `layer`, `table` (foreign to `cache`) or `pos` (beyond the table) out of range, `q`
/// or `out` of the wrong length, or a scratch made for another cache shape.
pub fn attend(
    cache: &KvCache,
    layer: usize,
    table: &BlockTable,
    pos: usize,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut AttnScratch,
) -> Result<(), KvCacheError> {
    let p = AttnParams::standard(cache.config().head_dim);
    attend_with(cache, layer, table, pos, q, out, scratch, &p)
}

/// [`attend`] with the layer's [`AttnParams`]: the score scale, softcapping (as ggml's flash
/// attention: the scale divided by the cap, then `cap * tanh`), and a sliding window (positions
/// before `pos - window + 1` are not visited; the cache may no longer hold them).
#[allow(clippy::too_many_arguments)]
pub fn attend_with(
    cache: &KvCache,
    layer: usize,
    table: &BlockTable,
    pos: usize,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut AttnScratch,
    params: &AttnParams,
) -> Result<(), KvCacheError> {
    cache.locate(layer, table, pos)?;
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
    if scratch.head_dim != d {
        return Err(KvCacheError::Shape {
            what: "attention scratch head_dim (AttnScratch::new for this cache)",
            expected: d,
            got: scratch.head_dim,
        });
    }
    if scratch.block_size != bs {
        return Err(KvCacheError::Shape {
            what: "attention scratch block_size (AttnScratch::new for this cache)",
            expected: bs,
            got: scratch.block_size,
        });
    }
    let group = n_head / hk;
    let scale = match params.softcap {
        Some(cap) => ggml_order::Scores {
            scale: params.scale / cap,
            cap,
        },
        None => ggml_order::Scores {
            scale: params.scale,
            cap: 0.0,
        },
    };
    let start = params
        .window
        .map_or(0, |w| (pos + 1).saturating_sub(w.max(1)));
    let blocks = cache.layer_blocks(layer, table);
    if let Some(b) = blocks[start / bs..=pos / bs]
        .iter()
        .position(|&b| b == RELEASED)
    {
        return Err(KvCacheError::Released {
            layer,
            pos: (start / bs + b) * bs,
        });
    }
    let (k, v) = (cache.layer_k(layer), cache.layer_v(layer));
    for h in 0..hk {
        let view = HeadView {
            k,
            v,
            blocks,
            start,
            n_pos: pos + 1,
            block_size: bs,
            head_dim: d,
            head_off: h * bs * d,
            block_stride: hk * bs * d,
        };
        let span = h * group * d..(h + 1) * group * d;
        let (qg, og) = (&q[span.clone()], &mut out[span]);
        match scratch.isa {
            AttnIsa::Scalar => ggml_order::attend_group(&view, qg, og, scale, &mut scratch.buf),
            // SAFETY: `force_isa` keeps Avx2 only when `supported()` detected AVX2, FMA and
            // F16C and `covers()` accepted this (head_dim, block_size), checked above.
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx2 => unsafe {
                ggml_order::attend_group_avx2(&view, qg, og, scale, &mut scratch.buf)
            },
            // SAFETY: `force_isa` keeps Avx512 only when `supported()` detected AVX-512F, FMA
            // and F16C and `covers()` accepted this (head_dim, block_size), checked above.
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx512 => unsafe {
                ggml_order::attend_group_avx512(&view, qg, og, scale, &mut scratch.buf)
            },
            #[cfg(not(target_arch = "x86_64"))]
            AttnIsa::Avx2 | AttnIsa::Avx512 => unreachable!("never supported off x86-64"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
