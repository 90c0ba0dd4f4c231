//! The paged KV cache: one pool of fixed-size pages holding K and V in f16, a page allocator
//! (free list + reference counts) and per-sequence block tables.
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
//! K and V are two separate `f16` arrays, allocated once in [`KvCache::new`], both indexed
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
//! reads it through `KvCache::layer_k`, `KvCache::layer_v` and `KvCache::locate` (crate-only).

mod free_list;
pub mod layout;
mod table;

pub use layout::{KvLayout, LayerWindows};
pub use table::{BlockAllocator, BlockTable, RELEASED};

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
    #[error("block table belongs to another KV cache")]
    ForeignTable,
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
        };
        cfg.n_blocks = capacity_bytes
            .checked_div(cfg.bytes_per_block())
            .unwrap_or(0);
        cfg
    }

    /// The page layout of this shape.
    pub fn layout(&self) -> KvLayout {
        KvLayout::new(self.n_layer, &self.windows)
    }

    /// Bytes of one page: K and V of its layers (all of them without sliding windows), all KV
    /// heads (saturating on overflow).
    pub fn bytes_per_block(&self) -> usize {
        let per_page = self.layout().layers_per_page();
        [per_page, self.n_head_kv, self.block_size, self.head_dim]
            .iter()
            .fold(2 * size_of::<f16>(), |acc, &x| acc.saturating_mul(x))
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

    /// f16 values in one of the K (or V) arrays, or an error naming an invalid setting.
    fn values_per_array(&self) -> Result<usize, KvCacheError> {
        let bad = |m: &str| Err(KvCacheError::InvalidConfig(m.to_string()));
        if self.n_layer == 0 || self.n_head_kv == 0 || self.head_dim == 0 {
            return bad("n_layer, n_head_kv and head_dim must be positive");
        }
        if self.head_dim > MAX_HEAD_DIM {
            return bad("head_dim above 1024");
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

/// f16 values per 64-byte line: arrays start on a line boundary.
const LINE: usize = 64 / size_of::<f16>();

/// The K/V pool (see the module docs for layout and threading).
#[derive(Debug)]
pub struct KvCache {
    cfg: KvCacheConfig,
    alloc: BlockAllocator,
    /// Backing store of K; the array proper is `k[k_off..k_off + len]`.
    k: Vec<f16>,
    v: Vec<f16>,
    k_off: usize,
    v_off: usize,
    /// f16 values per slot (a layer's place in its group's pages) in each array.
    layer_len: usize,
    /// Per layer: its group and slot.
    place: Vec<(usize, usize)>,
}

/// Allocates `len` zeroed f16 values plus slack, returning the store and the offset of the first
/// 64-byte aligned value. The memory comes zeroed from the allocator (`calloc`: fresh pages
/// from the OS for a pool this big) and is not touched here: a page is mapped when a sequence
/// first writes to it, so start-up and RSS do not pay for the whole KV budget up front (writing
/// 2 GiB of zeros took 1-17 s of `kiln serve`'s start-up).
fn alloc_array(len: usize) -> Result<(Vec<f16>, usize), KvCacheError> {
    let bytes = len.saturating_mul(size_of::<f16>());
    let total = len.checked_add(LINE).ok_or(KvCacheError::Alloc { bytes })?;
    let layout =
        std::alloc::Layout::array::<f16>(total).map_err(|_| KvCacheError::Alloc { bytes })?;
    // SAFETY: `layout` has a non-zero size (total >= LINE > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut f16;
    if p.is_null() {
        return Err(KvCacheError::Alloc { bytes });
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `total` f16 values
    // (so capacity `total`), and all-zero bytes are a valid f16 (0.0) for every element.
    let v = unsafe { Vec::from_raw_parts(p, total, total) };
    let misalign = (v.as_ptr() as usize % 64) / size_of::<f16>();
    let off = (LINE - misalign) % LINE;
    Ok((v, off))
}

impl KvCache {
    /// Allocates the pool (all of it, up front) and its block allocator.
    pub fn new(cfg: KvCacheConfig) -> Result<KvCache, KvCacheError> {
        let len = cfg.values_per_array()?;
        let (k, k_off) = alloc_array(len)?;
        let (v, v_off) = alloc_array(len)?;
        let layout = cfg.layout();
        let place = (0..cfg.n_layer).map(|l| layout.place(l)).collect();
        let slots = layout.layers_per_page();
        Ok(KvCache {
            cfg,
            // values_per_array checked that n_blocks fits in u32.
            alloc: BlockAllocator::new(cfg.n_blocks as u32, cfg.block_size, layout),
            k,
            v,
            k_off,
            v_off,
            layer_len: len / slots,
            place,
        })
    }

    /// The cache's shape and capacity.
    pub fn config(&self) -> &KvCacheConfig {
        &self.cfg
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
        let mut row = [f16::ZERO; MAX_HEAD_DIM];
        let row = &mut row[..d];
        for h in 0..hk {
            let tile = slot * self.layer_len + (block * hk + h) * bs * d;
            let src = h * d..(h + 1) * d;
            // K tile is [head_dim][pos]: scatter the converted row down column `p`.
            row.convert_from_f32_slice(&k[src.clone()]);
            let kt = &mut self.k[self.k_off + tile..][..bs * d];
            for (i, &x) in row.iter().enumerate() {
                kt[i * bs + p] = x;
            }
            self.v[self.v_off + tile + p * d..][..d].convert_from_f32_slice(&v[src]);
        }
        Ok(())
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
        for slot in 0..self.alloc.layout().layers_per_page() {
            let base = slot * self.layer_len;
            let (s, d) = (base + src as usize * span, base + dst as usize * span);
            self.k
                .copy_within(self.k_off + s..self.k_off + s + span, self.k_off + d);
            self.v
                .copy_within(self.v_off + s..self.v_off + s + span, self.v_off + d);
        }
        Ok(())
    }

    /// The K values of one layer's slot: `[page][kv_head][head_dim][pos_in_block]` (pages of
    /// other groups hold other layers there; the layer's table group names its own pages).
    pub(crate) fn layer_k(&self, layer: usize) -> &[f16] {
        let slot = self.place[layer].1;
        &self.k[self.k_off + slot * self.layer_len..][..self.layer_len]
    }

    /// The V values of one layer's slot: `[page][kv_head][pos_in_block][head_dim]`.
    pub(crate) fn layer_v(&self, layer: usize) -> &[f16] {
        let slot = self.place[layer].1;
        &self.v[self.v_off + slot * self.layer_len..][..self.layer_len]
    }
}

#[cfg(test)]
mod tests;
