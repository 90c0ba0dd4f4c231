//! Attention over the paged KV cache: for one query token ([`attend`]) or every token of a
//! ragged batch on the worker team ([`attend_batch`], bit-identical to [`attend`] per token).
//! Below position [`LONG_FROM`] a query runs llama.cpp's CPU flash-attention order (one row,
//! f16 accumulator: `attention/ggml_order.rs`), which the golden test holds bit for bit; from
//! [`LONG_FROM`] on, the long-context order (all f32, tiled, split into spans of [`SPAN`]:
//! `attention/long.rs`), which prefill tiles over many tokens and decode splits over KV.
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

mod batch;
mod dequant;
mod exp_fast;
mod expf;
mod ggml_order;
mod long;
#[cfg(target_arch = "x86_64")]
mod simd;
mod sink;

pub use batch::{attend_batch, AttnBatch, AttnPlan};
use dequant::DequantTiles;
use long::{LongKernel, LongScratch};
pub use long::{LONG_FROM, SPAN};

use crate::engine::kv_cache::kv_type::QK;
use crate::engine::kv_cache::{
    BlockTable, KvCache, KvCacheConfig, KvCacheError, KvType, LayerKv, RELEASED,
};
use crate::kernels::isa::Isa;
use crate::kernels::prefetch;
use half::f16;

/// Instruction set of an attention kernel, narrowest first (the order [`Ord`] follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttnIsa {
    /// `ggml_order::attend_group`, any shape.
    Scalar,
    /// `ggml_order::attend_group_avx2`: head_dim 64, 96, 128, 192, 256 or 512, block
    /// size a multiple of 8.
    Avx2,
    /// `ggml_order::attend_group_avx512`: head_dim 64, 96, 128, 192, 256 or 512,
    /// block size a multiple of 16.
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
    /// The kernel `attend` runs below [`LONG_FROM`] (supported by this CPU, covering the shape).
    isa: AttnIsa,
    /// The kernel of the long-context order (from [`LONG_FROM`] on).
    long: LongKernel,
    /// Its working memory.
    long_scratch: LongScratch,
    /// The cache shape this scratch was made for.
    head_dim: usize,
    block_size: usize,
    kv_type: KvType,
    /// A Q8_0 cache's tiles, widened to f16 for the one-row order (empty for an f16 cache).
    tiles: DequantTiles,
    /// The scalar kernel's f16-rounded query and f16 accumulator, the SIMD kernels' f16-rounded
    /// queries: `head_dim` values each.
    buf: Vec<f32>,
}

impl AttnScratch {
    /// Scratch for attention over a cache of shape `cfg` (any number of query heads).
    pub fn new(cfg: &KvCacheConfig) -> AttnScratch {
        let kernel_isa = crate::kernels::isa();
        let mut s = AttnScratch {
            isa: AttnIsa::Scalar,
            long: LongKernel::Scalar,
            long_scratch: LongScratch::new(cfg.head_dim),
            head_dim: cfg.head_dim,
            block_size: cfg.block_size,
            kv_type: cfg.kv_type,
            tiles: DequantTiles::new(
                match cfg.kv_type {
                    KvType::F16 => 0,
                    KvType::Q8_0 => cfg.block_size * cfg.head_dim,
                },
                cfg.block_size,
                AttnIsa::Scalar,
            ),
            buf: vec![0.0; ggml_order::SCRATCH_HEADS * cfg.head_dim],
        };
        // The long kernel of the selected width when it covers the shape; `force_isa` also
        // checks the CPU, which `kernels::isa()` has already done.
        s.force_isa(AttnIsa::of_kernel_isa(kernel_isa));
        s.isa = AttnIsa::for_kernel_isa(kernel_isa, cfg.head_dim, cfg.block_size);
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
        #[cfg(target_arch = "x86_64")]
        let long_ok = isa.supported() && long::simd_covers(self.head_dim, self.block_size);
        self.long = match isa {
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx512 if long_ok => LongKernel::Avx512,
            #[cfg(target_arch = "x86_64")]
            AttnIsa::Avx2 if long_ok => LongKernel::Avx2,
            _ => LongKernel::Scalar,
        };
        self.tiles.force_isa(isa, self.block_size);
    }

    /// The kernel `attend` runs with this scratch below [`LONG_FROM`].
    pub fn isa(&self) -> AttnIsa {
        self.isa
    }

    /// The kernel of the long-context order with this scratch (from [`LONG_FROM`] on).
    pub fn long_isa(&self) -> AttnIsa {
        match self.long {
            LongKernel::Scalar => AttnIsa::Scalar,
            #[cfg(target_arch = "x86_64")]
            LongKernel::Avx2 => AttnIsa::Avx2,
            #[cfg(target_arch = "x86_64")]
            LongKernel::Avx512 => AttnIsa::Avx512,
        }
    }
}

/// The K and V tiles of one layer and one KV head along a sequence's block table: as f16
/// ([`HeadView::tile`]: a Q8_0 cache's tiles are widened one block at a time into the
/// scratch's tiles) or as stored ([`HeadView::raw_tile`]).
struct HeadView<'a> {
    /// The layer's K (`[block][kv_head][head_dim][block_size]`) and V
    /// (`[block][kv_head][block_size][head_dim]`) values.
    kv: LayerKv<'a>,
    /// Where a Q8_0 block is widened.
    tiles: &'a mut DequantTiles,
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
    /// KV head `h` of `layer` along `table` (the layer's own blocks: a windowed layer's table
    /// may have released some), positions `start..n_pos`, widening Q8_0 tiles into `tiles`
    /// (made for this cache's shape).
    fn new(
        cache: &'a KvCache,
        layer: usize,
        table: &'a BlockTable,
        h: usize,
        start: usize,
        n_pos: usize,
        tiles: &'a mut DequantTiles,
    ) -> Self {
        let cfg = cache.config();
        let (d, hk, bs) = (cfg.head_dim, cfg.n_head_kv, cfg.block_size);
        tiles.reset();
        HeadView {
            kv: cache.layer_kv(layer),
            tiles,
            blocks: cache.layer_blocks(layer, table),
            start,
            n_pos,
            block_size: bs,
            head_dim: d,
            head_off: h * bs * d,
            block_stride: hk * bs * d,
        }
    }

    /// Number of blocks holding positions `0..n_pos` (the attended ones are
    /// `first_block()..n_blocks()`).
    fn n_blocks(&self) -> usize {
        self.n_pos.div_ceil(self.block_size)
    }

    /// The logical block holding `start`.
    fn first_block(&self) -> usize {
        self.start / self.block_size
    }

    /// Logical block `i`: its whole K tile and V tile (`block_size * head_dim` values each).
    fn tile(&mut self, i: usize) -> (&[f16], &[f16]) {
        let (bs, d) = (self.block_size, self.head_dim);
        let base = self.blocks[i] as usize * self.block_stride + self.head_off;
        match self.kv {
            LayerKv::F16 { k, v } => (&k[base..][..bs * d], &v[base..][..bs * d]),
            LayerKv::Q8 { .. } => self.tiles.load(&self.kv, base, bs, d),
        }
    }

    /// Logical block `i`'s K and V tiles as the cache stores them, converting nothing (the
    /// long-context order reads a Q8_0 tile's values and scales directly): `block_size *
    /// head_dim` values each, K `[head_dim][pos]`, V `[pos][head_dim]`; a Q8_0 tile's K scales
    /// `[head_dim / QK][pos]`, V scales `[pos][head_dim / QK]` (see `kv_cache::kv_type`).
    fn raw_tile(&self, i: usize) -> LayerKv<'a> {
        let n = self.block_size * self.head_dim;
        let base = self.blocks[i] as usize * self.block_stride + self.head_off;
        match self.kv {
            LayerKv::F16 { k, v } => LayerKv::F16 {
                k: &k[base..][..n],
                v: &v[base..][..n],
            },
            LayerKv::Q8 {
                k,
                v,
                k_scale,
                v_scale,
            } => LayerKv::Q8 {
                k: &k[base..][..n],
                k_scale: &k_scale[base / QK..][..n / QK],
                v: &v[base..][..n],
                v_scale: &v_scale[base / QK..][..n / QK],
            },
        }
    }

    /// Starts fetching the first attended block's K and V tiles into L1 (a hint).
    fn prefetch_first(&self) {
        let (k, v) = self.stored(self.first_block());
        for p in [k, v] {
            prefetch::lines_to_l1(p, self.stored_bytes());
        }
    }

    /// Starts fetching logical block `i`'s K and V tiles as stored (a Q8_0 tile's scales
    /// included) into L1 (a hint).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the SIMD tiles only
    fn prefetch_block(&self, i: usize) {
        let lines = prefetch::lines_to_l1;
        match self.raw_tile(i) {
            LayerKv::F16 { k, v } => {
                lines(k.as_ptr().cast(), 2 * k.len());
                lines(v.as_ptr().cast(), 2 * v.len());
            }
            LayerKv::Q8 {
                k,
                k_scale: ks,
                v,
                v_scale: vs,
            } => {
                lines(k.as_ptr().cast(), k.len());
                lines(v.as_ptr().cast(), v.len());
                lines(ks.as_ptr().cast(), 2 * ks.len());
                lines(vs.as_ptr().cast(), 2 * vs.len());
            }
        }
    }

    /// Where logical block `i`'s K and V tiles are stored, as the cache holds them (f16 or
    /// Q8_0 values; [`HeadView::stored_bytes`] each): what a prefetch fetches, converting
    /// nothing.
    fn stored(&self, i: usize) -> (*const u8, *const u8) {
        let n = self.block_size * self.head_dim;
        let base = self.blocks[i] as usize * self.block_stride + self.head_off;
        match self.kv {
            LayerKv::F16 { k, v } => (
                k[base..][..n].as_ptr().cast(),
                v[base..][..n].as_ptr().cast(),
            ),
            LayerKv::Q8 { k, v, .. } => (
                k[base..][..n].as_ptr().cast(),
                v[base..][..n].as_ptr().cast(),
            ),
        }
    }

    /// Bytes of one stored K (or V) tile's values (a Q8_0 tile's scales, a sixteenth of that,
    /// are left to the hardware).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn stored_bytes(&self) -> usize {
        let n = self.block_size * self.head_dim;
        match self.kv {
            LayerKv::F16 { .. } => 2 * n,
            LayerKv::Q8 { .. } => n,
        }
    }

    /// Logical block `i`: its K tile, V tile (each `block_size * head_dim` values) and the
    /// attended positions in it, `lo..n` within the block.
    fn block(&mut self, i: usize) -> (&[f16], &[f16], usize, usize) {
        let first = i * self.block_size;
        let n = self.block_size.min(self.n_pos - first);
        let lo = self.start.saturating_sub(first).min(n);
        let (k, v) = self.tile(i);
        (k, v, lo, n)
    }
}

/// How one layer attends, beyond the cache's shape: the score scale, logit softcapping and
/// sliding window of the model description, and the layer's attention sinks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams<'a> {
    /// Scores are `q·k * scale` (`1/sqrt(head_dim)` for most models; 1 when the queries were
    /// pre-scaled).
    pub scale: f32,
    /// Scores become `cap * tanh(score / cap)` (gemma2).
    pub softcap: Option<f32>,
    /// A query at `pos` attends to `pos - window + 1 ..= pos` only.
    pub window: Option<usize>,
    /// One sink logit per query head (`[n_head]`, gpt-oss): it joins each head's softmax
    /// denominator (see `attention/sink.rs`).
    pub sinks: Option<&'a [f32]>,
}

impl AttnParams<'_> {
    /// Full causal attention scaled by `1/sqrt(head_dim)`.
    pub fn standard(head_dim: usize) -> AttnParams<'static> {
        AttnParams {
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            window: None,
            sinks: None,
        }
    }

    /// The first position a query at `pos` attends.
    fn start(&self, pos: usize) -> usize {
        self.window
            .map_or(0, |w| (pos + 1).saturating_sub(w.max(1)))
    }

    /// Whether a query at `pos` runs the long-context order: from [`LONG_FROM`] on, for a
    /// layer without softcapping that attends every position (a windowed or soft-capped
    /// layer keeps llama.cpp's one-row order at every position; a window bounds its cost).
    fn long_at(&self, pos: usize) -> bool {
        pos >= LONG_FROM && self.softcap.is_none() && self.start(pos) == 0
    }
}

/// Causal attention of ONE query token at position `pos` over the positions `0..=pos` that
/// `table` holds in `cache`, for `layer`, scaled by `1/sqrt(head_dim)`: [`attend_with`] with
/// [`AttnParams::standard`].
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

/// Causal attention of ONE query token at position `pos` over the positions that `table`
/// holds in `cache` for `layer`, with the layer's [`AttnParams`]: the score scale, softcapping
/// (as ggml's flash attention: the scale divided by the cap, then `cap * tanh`), and a sliding
/// window (positions before `pos - window + 1` are not visited; the cache may no longer hold
/// them).
///
/// `q` is `[n_head][head_dim]` f32 (RoPE applied), `n_head` a multiple of `n_head_kv`
/// (query head `i` reads KV head `i / (n_head / n_head_kv)`); `out` receives
/// `[n_head][head_dim]`. Online softmax, never a full score matrix; the query heads of one KV
/// head are processed together so each K/V tile is read once. Below [`LONG_FROM`] (and on
/// windowed or soft-capped layers) the order is llama.cpp's one-row order (position by
/// position, `attention/ggml_order.rs`); otherwise the long-context order over spans of
/// [`SPAN`] positions (`attention/long.rs`). A head's sink logit (`params.sinks`) joins its
/// softmax's denominator after the last position in either order. Deterministic: the result depends only on `q`,
/// `pos` and the cached values it attends, never on the physical block ids, on other
/// sequences, on positions after `pos` nor on how a batch is scheduled ([`attend_batch`]
/// computes exactly this for every token). Allocation-free.
///
/// Errors: `layer`, `table` (foreign to `cache`) or `pos` (beyond the table) out of range, `q`
/// or `out` of the wrong length, a scratch made for another cache shape, or a position in the
/// window whose block was released.
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
    let n_head = check(
        cache,
        layer,
        table,
        pos,
        q.len(),
        out.len(),
        scratch,
        params,
    )?;
    let hk = cache.config().n_head_kv;
    attend_kv_heads(
        cache,
        layer,
        table,
        pos,
        (q, 0..hk),
        out,
        scratch,
        params,
        n_head / hk,
    );
    Ok(())
}

/// [`attend_with`] for the query heads of KV heads `heads` only, arguments already checked
/// (`check`): `q` is the token's whole `[n_head][head_dim]` row, `out` receives the
/// `[heads.len() * group][head_dim]` outputs of those heads (`group` query heads per KV head).
/// Each KV head's result is the same whichever range computes it.
#[allow(clippy::too_many_arguments)]
fn attend_kv_heads(
    cache: &KvCache,
    layer: usize,
    table: &BlockTable,
    pos: usize,
    (q, heads): (&[f32], std::ops::Range<usize>),
    out: &mut [f32],
    scratch: &mut AttnScratch,
    params: &AttnParams,
    group: usize,
) {
    let d = cache.config().head_dim;
    let start = params.start(pos);
    let h0 = heads.start;
    let last = heads.end;
    // Out of the scratch while views borrow it (moving it allocates nothing).
    let mut tiles = std::mem::take(&mut scratch.tiles);
    for h in heads {
        let mut view = HeadView::new(cache, layer, table, h, start, pos + 1, &mut tiles);
        if h + 1 < last {
            // The next KV head's first tiles load while this head computes (each head's
            // later tiles are prefetched by the kernels, one block ahead). Its view converts
            // nothing, so it needs no tiles of its own.
            let mut none = DequantTiles::default();
            HeadView::new(cache, layer, table, h + 1, start, pos + 1, &mut none).prefetch_first();
        }
        let qg = &q[h * group * d..(h + 1) * group * d];
        let og = &mut out[(h - h0) * group * d..(h - h0 + 1) * group * d];
        let sinks = params.sinks.map(|s| &s[h * group..(h + 1) * group]);
        if params.long_at(pos) {
            attend_long(
                &mut view,
                qg,
                og,
                (0, pos + 1),
                params.scale,
                sinks,
                scratch,
            );
        } else {
            attend_short(&mut view, qg, og, params, sinks, scratch);
        }
    }
    scratch.tiles = tiles;
}

/// Checks one query's arguments (see [`attend_with`]); returns the number of query heads.
#[allow(clippy::too_many_arguments)]
fn check(
    cache: &KvCache,
    layer: usize,
    table: &BlockTable,
    pos: usize,
    q_len: usize,
    out_len: usize,
    scratch: &AttnScratch,
    params: &AttnParams,
) -> Result<usize, KvCacheError> {
    cache.locate(layer, table, pos)?;
    let cfg = cache.config();
    let (d, hk, bs) = (cfg.head_dim, cfg.n_head_kv, cfg.block_size);
    let n_head = q_len / d;
    if !q_len.is_multiple_of(d) || n_head == 0 || !n_head.is_multiple_of(hk) {
        return Err(KvCacheError::Shape {
            what: "q (a multiple of n_head_kv * head_dim)",
            expected: n_head.max(1).next_multiple_of(hk) * d,
            got: q_len,
        });
    }
    if let Some(s) = params.sinks.filter(|s| s.len() != n_head) {
        return Err(KvCacheError::Shape {
            what: "attention sinks (one per query head)",
            expected: n_head,
            got: s.len(),
        });
    }
    if out_len != q_len {
        return Err(KvCacheError::Shape {
            what: "attention out",
            expected: q_len,
            got: out_len,
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
    if scratch.kv_type != cfg.kv_type {
        return Err(KvCacheError::InvalidConfig(format!(
            "attention scratch made for a {} cache, the cache is {} (AttnScratch::new for this cache)",
            scratch.kv_type, cfg.kv_type
        )));
    }
    let start = params.start(pos);
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
    Ok(n_head)
}

/// The one-row order for the query heads `q` of one KV head, with their sink logits `sinks`
/// if they have some (see [`attend_with`]).
fn attend_short(
    view: &mut HeadView,
    q: &[f32],
    out: &mut [f32],
    params: &AttnParams,
    sinks: Option<&[f32]>,
    scratch: &mut AttnScratch,
) {
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
    match scratch.isa {
        AttnIsa::Scalar => ggml_order::attend_group(view, q, out, scale, sinks, &mut scratch.buf),
        // SAFETY: `force_isa` keeps Avx2 only when `supported()` detected AVX2, FMA and F16C
        // and `covers()` accepted this (head_dim, block_size), which `check` compared with the
        // cache's.
        #[cfg(target_arch = "x86_64")]
        AttnIsa::Avx2 => unsafe {
            ggml_order::attend_group_avx2(view, q, out, scale, sinks, &mut scratch.buf)
        },
        // SAFETY: as above, with AVX-512F.
        #[cfg(target_arch = "x86_64")]
        AttnIsa::Avx512 => unsafe {
            ggml_order::attend_group_avx512(view, q, out, scale, sinks, &mut scratch.buf)
        },
        #[cfg(not(target_arch = "x86_64"))]
        AttnIsa::Avx2 | AttnIsa::Avx512 => unreachable!("never supported off x86-64"),
    }
}

/// The long-context order for the query heads `q` of one KV head, each attending positions
/// `lo..hi` with scores scaled by `scale`, with their sink logits `sinks` if they have some
/// (see [`attend_with`]): the heads in sets of at most `long::MAX_ROWS`.
fn attend_long(
    view: &mut HeadView,
    q: &[f32],
    out: &mut [f32],
    (lo, hi): (usize, usize),
    scale: f32,
    sinks: Option<&[f32]>,
    scratch: &mut AttnScratch,
) {
    let d = view.head_dim;
    let sc = &mut scratch.long_scratch;
    for (set, (qs, os)) in q
        .chunks(long::MAX_ROWS * d)
        .zip(out.chunks_mut(long::MAX_ROWS * d))
        .enumerate()
    {
        sc.clear();
        for (r, qh) in qs.chunks(d).enumerate() {
            sc.push(qh, lo, hi, sinks.map(|s| s[set * long::MAX_ROWS + r]));
        }
        long::attend_rows(scratch.long, view, sc, scale);
        for (r, o) in os.chunks_mut(d).enumerate() {
            o.copy_from_slice(sc.output(r));
        }
    }
}

#[cfg(test)]
mod tests;
