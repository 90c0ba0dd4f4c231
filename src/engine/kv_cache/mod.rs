//! The paged KV cache: one pool of fixed-size pages holding K and V in f16 or Q8_0
//! ([`KvType`]), a page allocator (free list + reference counts) and per-sequence block tables.
//!
//! # Pages and sliding windows
//!
//! A page holds `block_size` positions of K and V for a group of layers (see [`layout`]):
//! every layer when the model has no sliding window, else layers grouped by the span they
//! attend over, so that a local (windowed) layer's blocks can be released once they fall out of
//! the window while the global layers keep theirs. A sequence's [`BlockTable`] has one page list
//! per group.
//!
//! # Storage layout
//!
//! K and V are two separate `f16` arrays (with [`KvType::Q8_0`]: two `i8` arrays at the same
//! indices plus two arrays of scales, see [`kv_type`]), allocated once in [`KvCache::new`], both indexed
//! `[slot][page][kv_head]` (a slot is a layer's place in its group's pages) and then by a tile
//! of `block_size x head_dim` values (2 KiB for 16 x 64), contiguous so the query heads of one
//! GQA group stream it once, in order:
//! - K tiles are transposed, `[head_dim][pos_in_block]`: 16 positions of one dimension are one
//!   SIMD vector, so the scores of 16 positions come out of plain FMAs (q broadcast), with no
//!   horizontal reductions;
//! - V tiles are `[pos_in_block][head_dim]`: each weighted row is added to the output.
//!
//! The arrays start on a 64-byte boundary.
//!
//! # Threads
//!
//! [`KvCache::write`] takes `&mut self`: the engine writes the K/V of a layer sequentially
//! (576 values per token for the default model, cheap) and then runs attention
//! (`engine::attention::attend`), which reads the cache through `&self`, in parallel. `KvCache`,
//! [`BlockTable`] and [`BlockAllocator`] are `Send + Sync`.
//!
//! This module is storage and block allocation only: it imports nothing of attention, which
//! reads it through `KvCache::layer_kv` and `KvCache::locate` (crate-only).

mod block_bytes;
pub mod block_q8;
mod free_list;
pub mod kv_type;
pub mod layout;
pub mod state;
mod state_copy;
mod table;

pub use kv_type::KvType;
use kv_type::{quantize_row, QK};
pub use layout::{KvLayout, LayerWindows};
pub use state::{Checkpoint, StateShape};
pub use table::{BlockAllocator, BlockTable, RELEASED};

use crate::engine::line_buf::{LineBuf, ZeroValid};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// A KV cache problem, naming what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvCacheError {
    #[error("KV cache is full: {needed} more blocks needed, {free} free")]
    OutOfBlocks { needed: usize, free: usize },
    #[error("invalid KV cache config: {0}")]
    InvalidConfig(String),
    #[error("cannot allocate the KV cache ({bytes} bytes)")]
    Alloc { bytes: usize },
    #[error("block {id} is not live in the pool (double free or foreign id)")]
    BadBlock { id: u32 },
    #[error("block {id} is shared by {refs} tables (forked prefix): it is read-only")]
    SharedBlock { id: u32, refs: u32 },
    #[error("all {total} recurrent-state slots are taken")]
    OutOfStateSlots { total: usize },
    #[error("block table belongs to another KV cache")]
    ForeignTable,
    #[error("the block table holds no recurrent-state slot (nothing reserved yet, or a model without state)")]
    NoStateSlot,
    #[error("slot {slot} is not a recurrent-state checkpoint of this cache")]
    NotACheckpoint { slot: u32 },
    #[error("layer {layer} out of range (the cache has {n_layer})")]
    Layer { layer: usize, n_layer: usize },
    #[error("position {pos} is beyond the block table's capacity {capacity}")]
    Position { pos: usize, capacity: usize },
    #[error(
        "position {pos} of layer {layer} fell out of its sliding window; its page was released"
    )]
    Released { layer: usize, pos: usize },
    #[error("{what}: expected {expected} values, got {got}")]
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
}

/// Shape and capacity of a [`KvCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Positions per block.
    pub block_size: usize,
    /// Pages in the pool (each `block_size` positions of `layers_per_page` layers).
    pub n_blocks: usize,
    /// The local layers and their window ([`LayerWindows::NONE`]: every layer global).
    pub windows: LayerWindows,
    /// How K and V values are stored.
    pub kv_type: KvType,
}

/// Positions per block unless configured otherwise.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// Largest head dimension accepted (bounds the stack row `write` converts a head through).
pub(crate) const MAX_HEAD_DIM: usize = 1024;

impl KvCacheConfig {
    /// As many blocks as fit in `capacity_bytes` (K and V of every layer, f16).
    pub fn from_bytes(
        n_layer: usize,
        n_head_kv: usize,
        head_dim: usize,
        block_size: usize,
        capacity_bytes: usize,
    ) -> KvCacheConfig {
        let mut cfg = KvCacheConfig {
            n_layer,
            n_head_kv,
            head_dim,
            block_size,
            n_blocks: 0,
            windows: LayerWindows::NONE,
            kv_type: KvType::F16,
        };
        cfg.n_blocks = capacity_bytes
            .checked_div(cfg.bytes_per_block())
            .unwrap_or(0);
        cfg
    }

    /// This shape storing its values as `kv_type`.
    pub fn with_kv_type(self, kv_type: KvType) -> KvCacheConfig {
        KvCacheConfig { kv_type, ..self }
    }

    /// The page layout of this shape.
    pub fn layout(&self) -> KvLayout {
        KvLayout::new(self.n_layer, &self.windows)
    }

    /// Bytes of one page: K and V of its layers (all of them without sliding windows), all KV
    /// heads, values and (Q8_0) scales (saturating on overflow).
    pub fn bytes_per_block(&self) -> usize {
        let per_page = self.layout().layers_per_page();
        let (num, den) = self.kv_type.bytes_per_value();
        [per_page, self.n_head_kv, self.block_size, self.head_dim]
            .iter()
            .fold(2 * num, |acc, &x| acc.saturating_mul(x))
            / den
    }

    /// Bytes of K and V one sequence of `positions` positions holds at most when computed in
    /// steps of at most `chunk` positions (local layers keep a window plus a chunk).
    pub fn bytes_for_positions(&self, positions: usize, chunk: usize) -> usize {
        self.layout()
            .pages_for(positions, chunk, self.block_size)
            .saturating_mul(self.bytes_per_block())
    }

    /// Bytes of the whole pool.
    pub fn bytes(&self) -> usize {
        self.bytes_per_block().saturating_mul(self.n_blocks)
    }

    /// Values in one of the K (or V) arrays, or an error naming an invalid setting.
    fn values_per_array(&self) -> Result<usize, KvCacheError> {
        let bad = |m: &str| Err(KvCacheError::InvalidConfig(m.to_string()));
        if self.n_layer == 0 || self.n_head_kv == 0 || self.head_dim == 0 {
            return bad("n_layer, n_head_kv and head_dim must be positive");
        }
        if self.head_dim > MAX_HEAD_DIM {
            return bad("head_dim above 1024");
        }
        if self.kv_type == KvType::Q8_0 && !self.head_dim.is_multiple_of(QK) {
            return bad("kv_type q8_0 needs a head_dim that is a multiple of 32");
        }
        if self.block_size == 0 {
            return bad("block_size must be positive");
        }
        if self.n_blocks == 0 {
            return bad("capacity too small for one block");
        }
        if u32::try_from(self.n_blocks).is_err() {
            return bad("more than 2^32 blocks");
        }
        let per_page = self.layout().layers_per_page();
        [per_page, self.n_blocks, self.n_head_kv, self.block_size]
            .iter()
            .try_fold(self.head_dim, |acc, &x| acc.checked_mul(x))
            .ok_or_else(|| KvCacheError::InvalidConfig("size overflows".to_string()))
    }
}

/// One zeroed array of the pool, its first value on a 64-byte line. The memory comes zeroed
/// from the allocator (`calloc`: fresh pages from the OS for a pool this big) and is not
/// touched here: a page is mapped when a sequence first writes to it, so start-up and RSS do
/// not pay for the whole KV budget up front (writing 2 GiB of zeros took 1-17 s of `kiln
/// serve`'s start-up).
fn array<T: ZeroValid>(len: usize) -> Result<LineBuf<T>, KvCacheError> {
    LineBuf::try_zeroed(len).ok_or(KvCacheError::Alloc {
        bytes: len.saturating_mul(size_of::<T>()),
    })
}

/// One layer's stored K and V values (see [`KvType`] and the module docs' layouts), as the
/// attention reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LayerKv<'a> {
    F16 {
        k: &'a [f16],
        v: &'a [f16],
    },
    /// Values at the f16 layout's indices, one scale per [`QK`] of them (`kv_type` docs).
    Q8 {
        k: &'a [i8],
        v: &'a [i8],
        k_scale: &'a [f16],
        v_scale: &'a [f16],
    },
}

/// The K/V pool (see the module docs for layout and threading).
#[derive(Debug)]
pub struct KvCache {
    cfg: KvCacheConfig,
    alloc: BlockAllocator,
    /// f16: the K and V values. Q8_0: their scales (a [`QK`]th of the values' length).
    k: LineBuf<f16>,
    v: LineBuf<f16>,
    /// Q8_0: the K and V values (empty for f16).
    kq: LineBuf<i8>,
    vq: LineBuf<i8>,
    /// Values per slot (a layer's place in its group's pages) in each array.
    layer_len: usize,
    /// Per layer: its group and slot.
    place: Vec<(usize, usize)>,
    /// The recurrent-state slots (see [`state`]).
    state_shape: StateShape,
    state: Vec<f32>,
}

impl KvCache {
    /// Allocates the pool (all of it, up front) and its block allocator.
    pub fn new(cfg: KvCacheConfig) -> Result<KvCache, KvCacheError> {
        KvCache::with_state(cfg, StateShape::NONE)
    }

    /// As [`KvCache::new`], with `state` recurrent-state slots beside the pages (every table
    /// takes one on its first reserve; see [`state`]).
    pub fn with_state(cfg: KvCacheConfig, state: StateShape) -> Result<KvCache, KvCacheError> {
        KvCache::with_state_checkpoints(cfg, state, 0)
    }

    /// As [`KvCache::with_state`], plus `checkpoints` slots for copies of sequences' states at
    /// block boundaries (handed out by [`BlockAllocator::take_checkpoint`]; ignored for a
    /// model without state).
    pub fn with_state_checkpoints(
        cfg: KvCacheConfig,
        state: StateShape,
        checkpoints: usize,
    ) -> Result<KvCache, KvCacheError> {
        if state.is_some() && state.n_slots == 0 {
            return Err(KvCacheError::InvalidConfig(
                "a model with recurrent state needs at least one state slot".into(),
            ));
        }
        let checkpoints = if state.is_some() { checkpoints } else { 0 };
        let floats = state
            .floats_per_seq
            .checked_mul(state.n_slots.saturating_add(checkpoints))
            .ok_or(KvCacheError::Alloc { bytes: usize::MAX })?;
        let mut state_buf = Vec::new();
        state_buf
            .try_reserve_exact(floats)
            .map_err(|_| KvCacheError::Alloc {
                bytes: floats.saturating_mul(4),
            })?;
        state_buf.resize(floats, 0.0);
        let len = cfg.values_per_array()?;
        let (k, v, kq, vq) = match cfg.kv_type {
            KvType::F16 => (
                array(len)?,
                array(len)?,
                LineBuf::zeroed(0),
                LineBuf::zeroed(0),
            ),
            KvType::Q8_0 => (array(len / QK)?, array(len / QK)?, array(len)?, array(len)?),
        };
        let layout = cfg.layout();
        let place = (0..cfg.n_layer).map(|l| layout.place(l)).collect();
        let slots = layout.layers_per_page();
        Ok(KvCache {
            cfg,
            // values_per_array checked that n_blocks fits in u32.
            alloc: BlockAllocator::with_state_slots(
                cfg.n_blocks as u32,
                cfg.block_size,
                layout,
                state.is_some().then_some(state.n_slots),
                checkpoints,
            ),
            k,
            v,
            kq,
            vq,
            layer_len: len / slots,
            place,
            state_shape: state,
            state: state_buf,
        })
    }

    /// The cache's shape and capacity.
    pub fn config(&self) -> &KvCacheConfig {
        &self.cfg
    }

    /// The recurrent-state slots beside the pages.
    pub fn state_shape(&self) -> StateShape {
        self.state_shape
    }

    /// Slot `slot`'s recurrent state (`floats_per_seq` values).
    pub fn state(&self, slot: u32) -> &[f32] {
        let n = self.state_shape.floats_per_seq;
        &self.state[slot as usize * n..][..n]
    }

    /// Every slot's recurrent state, mutably: slot `i`'s is `[i * floats_per_seq..][..
    /// floats_per_seq]` (for a forward pass updating several sequences' states at once).
    pub fn states_mut(&mut self) -> &mut [f32] {
        &mut self.state
    }

    /// Slot `slot`'s recurrent state, mutably.
    pub fn state_mut(&mut self, slot: u32) -> &mut [f32] {
        let n = self.state_shape.floats_per_seq;
        &mut self.state[slot as usize * n..][..n]
    }

    /// The allocator handing out this pool's blocks (clone it to keep a handle).
    pub fn allocator(&self) -> &BlockAllocator {
        &self.alloc
    }

    /// An empty block table drawing from this pool.
    pub fn new_table(&self) -> BlockTable {
        BlockTable::new(&self.alloc)
    }

    /// Blocks not held by any table.
    pub fn free_blocks(&self) -> usize {
        self.alloc.free_blocks()
    }

    /// Blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.cfg.n_blocks
    }

    /// Checks that `layer`, `table` and `pos` address a slot of this cache; returns the page
    /// holding `pos` for `layer`.
    pub(crate) fn locate(
        &self,
        layer: usize,
        table: &BlockTable,
        pos: usize,
    ) -> Result<usize, KvCacheError> {
        if layer >= self.cfg.n_layer {
            return Err(KvCacheError::Layer {
                layer,
                n_layer: self.cfg.n_layer,
            });
        }
        if !self.alloc.owns(table) {
            return Err(KvCacheError::ForeignTable);
        }
        match self
            .layer_blocks(layer, table)
            .get(pos / self.cfg.block_size)
        {
            Some(&RELEASED) => Err(KvCacheError::Released { layer, pos }),
            Some(&b) => Ok(b as usize),
            None => Err(KvCacheError::Position {
                pos,
                capacity: table.capacity(),
            }),
        }
    }

    /// The pages of `layer`'s group in `table`, logical order (`RELEASED` where dropped).
    pub(crate) fn layer_blocks<'t>(&self, layer: usize, table: &'t BlockTable) -> &'t [u32] {
        table.group(self.place[layer].0)
    }

    /// Stores the K and V of one token at position `pos` of the sequence owning `table`, for
    /// `layer`. `k` and `v` are `[n_head_kv][head_dim]` f32 (RoPE already applied to `k`),
    /// rounded to f16 (nearest even). `pos` must be below `table.capacity()`, in a block this
    /// table alone holds: a block shared with a fork is read-only ([`KvCacheError::SharedBlock`]),
    /// since writing it would change the other sequence's cache.
    pub fn write(
        &mut self,
        layer: usize,
        table: &BlockTable,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvCacheError> {
        let block = self.locate(layer, table, pos)?;
        // One uncontended lock per (token, layer): ~30 per token, negligible next to a step.
        let refs = self.alloc.refcount(block as u32);
        if refs != 1 {
            return Err(KvCacheError::SharedBlock {
                id: block as u32,
                refs,
            });
        }
        let (d, bs, hk) = (self.cfg.head_dim, self.cfg.block_size, self.cfg.n_head_kv);
        for (what, x) in [("k", k), ("v", v)] {
            if x.len() != hk * d {
                return Err(KvCacheError::Shape {
                    what,
                    expected: hk * d,
                    got: x.len(),
                });
            }
        }
        let p = pos % bs;
        let slot = self.place[layer].1;
        for h in 0..hk {
            let tile = slot * self.layer_len + (block * hk + h) * bs * d;
            let src = h * d..(h + 1) * d;
            self.write_head(tile, p, &k[src.clone()], &v[src]);
        }
        Ok(())
    }

    /// Stores one KV head's `k` and `v` rows at position `p` of the tiles starting at value
    /// `tile` (K scattered down column `p` of `[head_dim][pos]`, V as row `p`).
    fn write_head(&mut self, tile: usize, p: usize, k: &[f32], v: &[f32]) {
        let (d, bs) = (self.cfg.head_dim, self.cfg.block_size);
        match self.cfg.kv_type {
            KvType::F16 => {
                let mut row = [f16::ZERO; MAX_HEAD_DIM];
                let row = &mut row[..d];
                row.convert_from_f32_slice(k);
                let kt = &mut self.k[tile..][..bs * d];
                for (i, &x) in row.iter().enumerate() {
                    kt[i * bs + p] = x;
                }
                self.v[tile + p * d..][..d].convert_from_f32_slice(v);
            }
            KvType::Q8_0 => {
                let (mut q, mut sc) = ([0i8; MAX_HEAD_DIM], [f16::ZERO; MAX_HEAD_DIM / QK]);
                let (q, sc) = (&mut q[..d], &mut sc[..d / QK]);
                quantize_row(k, q, sc);
                let kt = &mut self.kq[tile..][..bs * d];
                for (i, &x) in q.iter().enumerate() {
                    kt[i * bs + p] = x;
                }
                let ks = &mut self.k[tile / QK..][..bs * d / QK];
                for (b, &x) in sc.iter().enumerate() {
                    ks[b * bs + p] = x;
                }
                quantize_row(v, q, sc);
                self.vq[tile + p * d..][..d].copy_from_slice(q);
                self.v[(tile + p * d) / QK..][..d / QK].copy_from_slice(sc);
            }
        }
    }

    /// Copies the K/V of every slot from page `src` to page `dst` (copy on write, after
    /// [`BlockTable::unshare`]). Both must be live pages of this pool.
    pub fn copy_block(&mut self, src: u32, dst: u32) -> Result<(), KvCacheError> {
        for id in [src, dst] {
            if id as usize >= self.cfg.n_blocks || self.alloc.refcount(id) == 0 {
                return Err(KvCacheError::BadBlock { id });
            }
        }
        // A page's values in one slot are contiguous: `[kv_head][tile]`.
        let span = self.cfg.n_head_kv * self.cfg.block_size * self.cfg.head_dim;
        // The f16 arrays hold a value per value (f16) or per QK values (Q8_0 scales).
        let per = match self.cfg.kv_type {
            KvType::F16 => 1,
            KvType::Q8_0 => QK,
        };
        for slot in 0..self.alloc.layout().layers_per_page() {
            let base = slot * self.layer_len;
            let (s, d) = (base + src as usize * span, base + dst as usize * span);
            for a in [&mut self.k, &mut self.v] {
                a.copy_within(s / per..(s + span) / per, d / per);
            }
            if self.cfg.kv_type == KvType::Q8_0 {
                for a in [&mut self.kq, &mut self.vq] {
                    a.copy_within(s..s + span, d);
                }
            }
        }
        Ok(())
    }

    /// The K and V of one layer's slot: K `[page][kv_head][head_dim][pos_in_block]`, V
    /// `[page][kv_head][pos_in_block][head_dim]` (pages of other groups hold other layers
    /// there; the layer's table group names its own pages).
    pub(crate) fn layer_kv(&self, layer: usize) -> LayerKv<'_> {
        let at = self.place[layer].1 * self.layer_len;
        let n = self.layer_len;
        match self.cfg.kv_type {
            KvType::F16 => LayerKv::F16 {
                k: &self.k[at..][..n],
                v: &self.v[at..][..n],
            },
            KvType::Q8_0 => LayerKv::Q8 {
                k: &self.kq[at..][..n],
                v: &self.vq[at..][..n],
                k_scale: &self.k[at / QK..][..n / QK],
                v_scale: &self.v[at / QK..][..n / QK],
            },
        }
    }
}

#[cfg(test)]
mod tests;
