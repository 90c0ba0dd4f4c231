//! What the prefix cache asks the worker to copy between the KV pool and its RAM tier, and
//! what a lookup found. The cache plans; the worker (which owns the KV pool) copies.

use std::sync::Arc;

/// A block evicted from the pool whose bytes go to the RAM tier. Its `pages` (one per layer
/// group) are already free: the worker copies them out before the step writes any page, then
/// hands the bytes to [`super::PrefixCache::store_spill`]. `state_slot`: the checkpoint slot
/// of the recurrent state after the block, freed with it and copied out likewise (a freed
/// checkpoint slot is written only by a step's saves, after its forward pass).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spill {
    pub key: u64,
    pub parent: u64,
    pub tokens: Box<[u32]>,
    pub pages: Vec<u32>,
    pub state_slot: Option<u32>,
}

/// A block that just entered the pool's cache (or got its recurrent-state checkpoint), to be
/// written to the disk tier: the worker copies its `pages` (held by the cache) and its
/// checkpoint slot `state_slot` out after the step and hands them to the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persist {
    pub key: u64,
    pub parent: u64,
    pub tokens: Box<[u32]>,
    pub pages: Vec<u32>,
    pub state_slot: Option<u32>,
}

/// A RAM-tier block to write into fresh `pages` (one per layer group, held by the sequence
/// that looked it up) before the step's forward pass reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub pages: Vec<u32>,
    pub bytes: Arc<[u8]>,
}

/// What a lookup reused: `tokens` in all, of which the first `pool_tokens` were already in
/// the pool (the rest are restored from the RAM tier). Multiples of the block size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hit {
    pub tokens: usize,
    pub pool_tokens: usize,
    /// The lookup reached the RAM tier and found nothing there.
    pub ram_miss: bool,
    /// With recurrent-state checkpoints: the checkpoint slot holding the state after
    /// `tokens`, which the sequence's own slot must be restored from before the step.
    pub state_from: Option<u32>,
    /// Or the state after `tokens` as the RAM tier holds it (`export_checkpoint` bytes), which
    /// the sequence's own slot must be loaded from before the step.
    pub state_bytes: Option<Arc<[u8]>>,
}

/// A state copy the worker makes for the scheduler's checkpoints (see
/// `engine::kv_cache::state`): `Restore` before the step's forward pass (the checkpoint
/// `slot` into sequence `seq`'s own slot, which then covers `covered` positions), `Load`
/// likewise from a RAM-tier copy's `bytes`, `Save` after it (the sequence's slot into
/// checkpoint `slot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateCopy {
    Restore {
        seq: u64,
        slot: u32,
        covered: usize,
    },
    Load {
        seq: u64,
        bytes: Arc<[u8]>,
        covered: usize,
    },
    Save {
        seq: u64,
        slot: u32,
    },
}
