//! The prefix cache: full KV blocks kept after their sequence ends, keyed by a hash of every
//! token up to and including the block, so a new prompt that starts the same way (a shared
//! system prompt, the earlier turns of a chat) reuses them instead of recomputing them.
//!
//! Contracts:
//! - Only blocks whose K/V is fully computed are inserted (the scheduler inserts a block after
//!   the step that wrote its last position). A lookup therefore never hands out garbage KV
//!   (TGI once shared prefix blocks freed before they were prefilled).
//! - The cache holds one reference to each page of a cached block (a one-block [`BlockTable`]:
//!   one page per layer group), so a cached block outlives the sequences that made it. A page
//!   only the cache holds is evictable; [`PrefixCache::evict`] frees those, least recently
//!   used first: local layers' pages of a block first (the block stays cached, usable inside a
//!   longer hit), then whole leaf blocks.
//! - With sliding windows a hit of `k` blocks is usable only if the local layers' pages of the
//!   blocks the next query can see (a window before block `k`) are still there; a lookup returns
//!   the longest usable hit.
//! - Keys are chained: `hash(parent key, the block's tokens)`. An entry also stores its parent
//!   key and tokens, and a lookup compares both, so a hash collision can never alias two
//!   different prefixes.
//! - Hits are looked up from the first block and stop at the first miss, and a lookup leaves
//!   at least one prompt token to compute (the sampler needs the last position's logits).
//! - With a RAM tier ([`ram`]), a whole block evicted from the pool (every group's page still
//!   there) is not lost: eviction queues a [`Spill`] naming its freed pages, which the worker
//!   copies out before anything writes them (it runs a step's spills first), and
//!   [`PrefixCache::store_spill`] keeps the bytes. A lookup continues past the pool's blocks
//!   into the RAM tier: each block found there gets fresh pages and a [`Restore`] the worker
//!   runs before the forward pass; such blocks enter the pool's cache once the step is done
//!   (like computed ones).
//! - Keys are [`stable_hash`]es: the same in every run, so the disk tier can use them.
//! - Recurrent models ([`PrefixCache::keep_state_checkpoints`]): a block's K/V is not enough
//!   to resume a sequence, its recurrent state at the block's end is needed too. Blocks may
//!   carry a [`Checkpoint`] of that state (attached after the step that computed it); a
//!   lookup stops at the deepest matching block that has one and names it in the [`Hit`].
//!   Checkpoints are bounded by the pool's checkpoint slots: taking one when none is free
//!   takes the least recently used block's ([`PrefixCache::steal_checkpoint`]).
//! - The tiers keep checkpoints too: a block evicted with one spills its state beside its K/V
//!   ([`Spill::state_slot`], [`ram::RamBlock::state`]), and the disk tier stores it in the
//!   block's file. A lookup's state may then come from the RAM tier, for a pool block whose
//!   checkpoint is gone or for a block restored from RAM; the hit names its bytes
//!   ([`Hit::state_bytes`]) and the sequence's own slot is loaded from them. Such a state never
//!   takes a checkpoint slot, so the bound on checkpoints in the pool stays as it was.
//! - Namespaces: the chain of a prompt's keys starts at a root, [`ROOT`] for the shared
//!   namespace or [`namespace_root`] of an id (an API key's, with `cache.namespace_by_key`).
//!   Every key depends on its root, so a prompt only ever matches blocks computed under the
//!   same root, in the pool, the RAM tier and the disk tier's file names alike.

use crate::engine::kv_cache::{BlockAllocator, BlockTable, Checkpoint, KvCacheError, RELEASED};
use std::collections::{BTreeMap, HashMap};

pub mod disk;
pub mod disk_file;
pub mod disk_read;
pub mod disk_stats;
pub mod identity;
pub mod ram;
mod ram_lookup;
pub mod stable_hash;
mod tier_ops;

pub use disk::DiskTier;
pub use disk_read::{ReadDone, ReadRequest, Wanted};
pub use disk_stats::DiskStats;
pub use ram::{RamBlock, RamTier};
pub use tier_ops::{Hit, Persist, Restore, Spill, StateCopy};

/// Key of the empty prefix (the parent of every first block).
pub const ROOT: u64 = 0x6b69_6c6e_5f72_6f6f;

/// The root of namespace `id`'s chains (None: the shared one, [`ROOT`]). Stable across runs,
/// like every key.
pub fn namespace_root(id: Option<u64>) -> u64 {
    match id {
        None => ROOT,
        Some(id) => {
            let mut h = stable_hash::StableHasher::new(ROOT);
            h.word(id);
            h.finish()
        }
    }
}

/// Chained key of a block: its parent's key and its tokens. The same in every run and build
/// ([`stable_hash`]).
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = stable_hash::StableHasher::new(parent);
    for pair in tokens.chunks(2) {
        let hi = pair.get(1).map_or(u64::MAX << 32, |&t| u64::from(t) << 32);
        h.word(hi | u64::from(pair[0]));
    }
    h.word(tokens.len() as u64);
    h.finish()
}

struct Entry {
    /// Holds the cache's reference to the block.
    holder: BlockTable,
    parent: u64,
    tokens: Box<[u32]>,
    /// Last use, for LRU eviction (a key of `lru`).
    tick: u64,
    /// Cached blocks whose parent is this one: only leaves are evicted, so a cached block is
    /// always reachable from the root.
    children: u32,
    /// The first block of its chain (its parent is a namespace root): read by the invariant
    /// checks.
    #[cfg_attr(not(test), allow(dead_code))]
    first: bool,
    /// The recurrent state after this block (recurrent models only; see the module docs).
    checkpoint: Option<Checkpoint>,
}

/// Counters since start: lookups, lookups that reused at least one block, and tokens reused
/// (from any tier); of those, what came from the RAM tier; blocks spilled to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    pub queries: u64,
    pub hits: u64,
    pub hit_tokens: u64,
    /// Lookups that restored at least one block from the RAM tier, and its tokens.
    pub ram_hits: u64,
    pub ram_hit_tokens: u64,
    /// Lookups that reused at least one block already in the pool.
    pub pool_hits: u64,
    /// Lookups that reached the RAM tier (the pool's blocks ended before the prompt did) and
    /// found nothing there.
    pub ram_misses: u64,
    /// Blocks evicted from the pool into the RAM tier.
    pub spilled: u64,
}

/// See the module docs. Owned by one scheduler (no locking of its own).
pub struct PrefixCache {
    alloc: BlockAllocator,
    block_size: usize,
    entries: HashMap<u64, Entry>,
    /// tick -> key, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
    stats: PrefixStats,
    ram: RamTier,
    /// Evicted blocks whose bytes the worker has yet to copy out (see [`Self::take_spills`]).
    spills: Vec<Spill>,
    /// Whether new blocks are queued for the disk tier ([`Self::take_persists`]).
    persist: bool,
    persists: Vec<Persist>,
    /// Hits must end at a block with a recurrent-state checkpoint.
    state_checkpoints: bool,
}

impl PrefixCache {
    /// An empty cache over `alloc`'s pool, without a RAM tier.
    pub fn new(alloc: BlockAllocator) -> PrefixCache {
        PrefixCache::with_ram(alloc, 0)
    }

    /// An empty cache over `alloc`'s pool whose evicted blocks move to a RAM tier of at most
    /// `ram_bytes` (0: no RAM tier).
    pub fn with_ram(alloc: BlockAllocator, ram_bytes: usize) -> PrefixCache {
        PrefixCache {
            block_size: alloc.block_size(),
            alloc,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            stats: PrefixStats::default(),
            ram: RamTier::new(ram_bytes),
            spills: Vec::new(),
            persist: false,
            persists: Vec::new(),
            state_checkpoints: false,
        }
    }

    /// Makes hits end at blocks carrying a recurrent-state checkpoint (a model with recurrent
    /// layers: its sequences resume from a state, not from K/V alone).
    pub fn keep_state_checkpoints(&mut self) {
        self.state_checkpoints = true;
    }

    /// Whether hits need recurrent-state checkpoints.
    pub fn keeps_state_checkpoints(&self) -> bool {
        self.state_checkpoints
    }

    /// Attaches `checkpoint`, the recurrent state after the cached block `key`, to it; false
    /// (and the checkpoint dropped, its slot free again) when the block is not cached or
    /// already has one.
    pub fn attach_checkpoint(&mut self, key: u64, checkpoint: Checkpoint) -> bool {
        match self.entries.get_mut(&key) {
            Some(e) if e.checkpoint.is_none() => {
                e.checkpoint = Some(checkpoint);
                // The disk tier gets the block again, with its state.
                let pages = e.holder.block_pages(0);
                if self.persist && !pages.contains(&RELEASED) {
                    self.persists.push(Persist {
                        key,
                        parent: e.parent,
                        tokens: e.tokens.clone(),
                        pages,
                        state_slot: None,
                    });
                }
                true
            }
            _ => false,
        }
    }

    /// Takes the checkpoint of the least recently used block that has one (its K/V stay
    /// cached), for a newer one.
    pub fn steal_checkpoint(&mut self) -> Option<Checkpoint> {
        let key = self
            .lru
            .values()
            .find(|k| self.entries.get(k).is_some_and(|e| e.checkpoint.is_some()))
            .copied()?;
        self.entries.get_mut(&key)?.checkpoint.take()
    }

    /// Whether the cached block `key` carries a recurrent-state checkpoint.
    pub fn has_checkpoint(&self, key: u64) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.checkpoint.is_some())
    }

    /// Cached blocks carrying a recurrent-state checkpoint.
    pub fn checkpoints(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.checkpoint.is_some())
            .count()
    }

    /// Queues every block that enters the cache from now on for the disk tier.
    pub fn persist_new_blocks(&mut self) {
        self.persist = true;
    }

    /// The blocks that entered the cache since the last call (with [`Self::persist_new_blocks`]),
    /// in order: the cache holds their pages until it evicts them, which happens only while
    /// planning a step, so the worker copies them out after the step that computed them.
    /// Each names the checkpoint slot its block carries now (a block queued twice, once
    /// entering and once getting its checkpoint, is listed once).
    pub fn take_persists(&mut self) -> Vec<Persist> {
        let mut out: Vec<Persist> = Vec::new();
        for mut p in std::mem::take(&mut self.persists) {
            if out.iter().any(|q| q.key == p.key) {
                continue;
            }
            p.state_slot = self
                .entries
                .get(&p.key)
                .and_then(|e| e.checkpoint.as_ref())
                .map(Checkpoint::slot);
            out.push(p);
        }
        out
    }

    /// The RAM tier (sizes, for monitoring).
    pub fn ram(&self) -> &RamTier {
        &self.ram
    }

    /// The spills queued by evictions since the last call, in order. The worker must copy
    /// each one's pages out before the step writes any page ([`Self::store_spill`]).
    pub fn take_spills(&mut self) -> Vec<Spill> {
        std::mem::take(&mut self.spills)
    }

    /// Keeps `block`, what the worker copied out of `spill`'s pages (and checkpoint slot), in
    /// the RAM tier.
    pub fn store_spill(&mut self, spill: &Spill, block: RamBlock) {
        self.ram.put(spill.key, spill.parent, &spill.tokens, block);
    }

    /// Keeps `block` as the block `key` (following `parent`, holding `tokens`) in the RAM tier:
    /// a block read back from the disk tier. False when there is no RAM tier.
    pub fn store_ram(&mut self, key: u64, parent: u64, tokens: &[u32], block: RamBlock) -> bool {
        if !self.ram.is_on() {
            return false;
        }
        self.ram.put(key, parent, tokens, block);
        true
    }

    /// Whether the block `key` is in the pool's cache or the RAM tier.
    pub fn holds(&self, key: u64) -> bool {
        self.entries.contains_key(&key) || self.ram.contains(key)
    }

    /// Cached blocks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> PrefixStats {
        self.stats
    }

    fn touch(&mut self, key: u64) {
        if let Some(e) = self.entries.get_mut(&key) {
            self.lru.remove(&e.tick);
            self.tick += 1;
            e.tick = self.tick;
            self.lru.insert(self.tick, key);
        }
    }

    /// Appends to the empty `table` the longest run of cached blocks that starts `tokens` in the
    /// namespace whose chains start at `root` ([`namespace_root`]),
    /// leaving at least one token uncovered: the pool's blocks first, then (when every pool
    /// block was usable) RAM-tier blocks in fresh pages, each with a [`Restore`] pushed to
    /// `restores` that must run before the step's forward pass. Counts a query, and a hit when
    /// anything was reused. A restore's pages are this table's alone: dropping the table
    /// before the step drops them (and the restores must then be dropped too).
    pub fn lookup(
        &mut self,
        root: u64,
        tokens: &[u32],
        table: &mut BlockTable,
        restores: &mut Vec<Restore>,
    ) -> Hit {
        invariant!(table.blocks().is_empty(), "lookup into a non-empty table");
        self.stats.queries += 1;
        let bs = self.block_size;
        let max_blocks = tokens.len().saturating_sub(1) / bs;
        let mut parent = root;
        let mut keys = Vec::new();
        for chunk in tokens.chunks_exact(bs).take(max_blocks) {
            let key = block_key(parent, chunk);
            let Some(e) = self.entries.get(&key) else {
                break;
            };
            if e.parent != parent || *e.tokens != *chunk {
                break;
            }
            if table.push_pages(&e.holder.block_pages(0)).is_err() {
                break;
            }
            keys.push(key);
            parent = key;
        }
        let window = self.usable_prefix(table);
        let whole = window == keys.len();
        let mut ram_blocks = 0;
        let mut ram_state = None;
        if whole && self.ram.is_on() {
            (ram_blocks, ram_state) =
                self.restore_from_ram(tokens, table, restores, parent, max_blocks);
        }
        let mut usable = window;
        let (mut state_from, mut state_bytes) = (None, None);
        if self.state_checkpoints {
            if ram_blocks > 0 {
                state_bytes = ram_state;
            } else {
                // A recurrent model resumes only where a state was saved.
                (usable, state_from, state_bytes) = self.pool_state(root, tokens, &keys[..window]);
            }
        }
        if usable < keys.len() {
            table.truncate(usable);
            keys.truncate(usable);
        }
        // Touch the deepest block first so that it is evicted before its parents.
        for &k in keys.iter().rev() {
            self.touch(k);
        }
        let pool_blocks = keys.len();
        let blocks = pool_blocks + ram_blocks;
        if blocks > 0 {
            self.stats.hits += 1;
            self.stats.hit_tokens += (blocks * bs) as u64;
        }
        if pool_blocks > 0 {
            self.stats.pool_hits += 1;
        }
        if ram_blocks > 0 {
            self.stats.ram_hits += 1;
            self.stats.ram_hit_tokens += (ram_blocks * bs) as u64;
        }
        let ram_miss = ram_blocks == 0 && whole && self.ram.is_on() && window < max_blocks;
        if ram_miss {
            self.stats.ram_misses += 1;
        }
        Hit {
            tokens: blocks * bs,
            pool_tokens: pool_blocks * bs,
            ram_miss,
            state_from,
            state_bytes,
        }
    }

    /// The longest prefix of `table`'s blocks a sequence can continue from: every local group
    /// must hold the blocks the next query's window reaches into.
    fn usable_prefix(&self, table: &BlockTable) -> usize {
        let layout = self.alloc.layout();
        let bs = self.block_size;
        let mut k = table.n_blocks();
        'shorter: while k > 0 {
            for g in 0..layout.n_groups() {
                let first = layout.first_kept_block(g, k * bs, bs);
                if table.group(g)[first..k].contains(&RELEASED) {
                    k -= 1;
                    continue 'shorter;
                }
            }
            break;
        }
        k
    }

    /// Takes back the counts of a lookup whose blocks were returned unused (the sequence could
    /// not be admitted this step and will look up again; its restores are dropped).
    pub fn forget_lookup(&mut self, hit: &Hit) {
        let st = &mut self.stats;
        st.queries = st.queries.saturating_sub(1);
        if hit.tokens > 0 {
            st.hits = st.hits.saturating_sub(1);
            st.hit_tokens = st.hit_tokens.saturating_sub(hit.tokens as u64);
        }
        if hit.pool_tokens > 0 {
            st.pool_hits = st.pool_hits.saturating_sub(1);
        }
        if hit.ram_miss {
            st.ram_misses = st.ram_misses.saturating_sub(1);
        }
        let ram = hit.tokens - hit.pool_tokens;
        if ram > 0 {
            st.ram_hits = st.ram_hits.saturating_sub(1);
            st.ram_hit_tokens = st.ram_hit_tokens.saturating_sub(ram as u64);
        }
    }

    /// Records that the block made of `pages` (one per layer group, see
    /// [`BlockTable::block_pages`]) holds the fully computed K/V of `tokens` (exactly one block)
    /// following the prefix keyed `parent` (`root`, the chain's namespace root, for a first
    /// block); returns the block's key. A key already cached keeps
    /// its block (the new one stays with its sequence only); a block whose parent is no longer
    /// cached is not cached (it could never be reached).
    pub fn insert(
        &mut self,
        root: u64,
        parent: u64,
        tokens: &[u32],
        pages: &[u32],
    ) -> Result<u64, KvCacheError> {
        invariant_eq!(tokens.len(), self.block_size);
        let key = block_key(parent, tokens);
        if self.entries.contains_key(&key) {
            self.touch(key);
            return Ok(key);
        }
        let first = parent == root;
        if !first && !self.entries.contains_key(&parent) {
            // The parent was evicted (this sequence's own copy of it was never cached): a child
            // would be unreachable from the root, so it is not cached either.
            return Ok(key);
        }
        let mut holder = BlockTable::new(&self.alloc);
        holder.push_pages(pages)?;
        if self.persist && !pages.contains(&RELEASED) {
            self.persists.push(Persist {
                key,
                parent,
                tokens: tokens.into(),
                pages: pages.to_vec(),
                state_slot: None,
            });
        }
        if let Some(p) = self.entries.get_mut(&parent) {
            p.children += 1;
        }
        self.tick += 1;
        self.lru.insert(self.tick, key);
        self.entries.insert(
            key,
            Entry {
                holder,
                parent,
                tokens: tokens.into(),
                tick: self.tick,
                children: 0,
                first,
                checkpoint: None,
            },
        );
        Ok(key)
    }

    /// Pages that only the cache holds (freed by [`Self::evict`]). O(cached pages), under
    /// one lock.
    pub fn evictable(&self) -> usize {
        self.alloc.count_exclusive(
            self.entries
                .values()
                .flat_map(|e| e.holder.block_pages(0))
                .filter(|&id| id != RELEASED),
        )
    }

    /// Whether every page `e` still holds is held by the cache alone.
    fn all_exclusive(&self, e: &Entry) -> bool {
        let pages: Vec<u32> = e
            .holder
            .block_pages(0)
            .into_iter()
            .filter(|&id| id != RELEASED)
            .collect();
        self.alloc.count_exclusive(pages.iter().copied()) == pages.len()
    }

    /// Frees up to `n` pages that only the cache holds, least recently used first: a block's
    /// local layers' pages (the block stays cached), then whole blocks, leaves before their
    /// parents; returns how many pages were freed.
    pub fn evict(&mut self, n: usize) -> usize {
        let mut freed = 0;
        while freed < n {
            let mut victim = None;
            let order: Vec<(u64, u64)> = self.lru.iter().map(|(&t, &k)| (t, k)).collect();
            for (tick, key) in order {
                let e = self.entries.get_mut(&key).expect("LRU names a live entry");
                freed += e.holder.release_unshared_local(0);
                if freed >= n {
                    return freed;
                }
                let e = &self.entries[&key];
                if e.children == 0 && self.all_exclusive(e) {
                    victim = Some((tick, key, e.holder.pages_held()));
                    break;
                }
            }
            let Some((tick, key, pages)) = victim else {
                break;
            };
            self.lru.remove(&tick);
            // Dropping the entry drops its holder table: its pages return to the pool.
            if let Some(e) = self.entries.remove(&key) {
                if let Some(p) = self.entries.get_mut(&e.parent) {
                    p.children -= 1;
                }
                self.spill(key, e);
            }
            freed += pages;
        }
        freed
    }

    /// Queues the block `e` (keyed `key`), just evicted, for the RAM tier when it has one and
    /// every group's page is still there (a block already in the tier is only touched).
    fn spill(&mut self, key: u64, e: Entry) {
        if !self.ram.is_on() {
            return;
        }
        if self.ram.contains(key) && (e.checkpoint.is_none() || self.ram.has_state(key)) {
            self.ram.touch(key);
            return;
        }
        let pages = e.holder.block_pages(0);
        if pages.contains(&RELEASED) {
            return;
        }
        self.stats.spilled += 1;
        // The checkpoint's slot is free once `e` is dropped, but only a step's saves write a
        // free slot, after the spill is copied out.
        self.spills.push(Spill {
            key,
            parent: e.parent,
            tokens: e.tokens,
            pages,
            state_slot: e.checkpoint.as_ref().map(Checkpoint::slot),
        });
    }

    /// Drops every entry of the pool's cache and the RAM tier (blocks still used by sequences
    /// stay with them). Spills already queued still run (their pages are free).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.lru.clear();
        self.ram.clear();
    }

    /// Checks the cache's internal invariants (tests): every entry is live and listed once in
    /// the LRU order, and its key is the hash of its parent and tokens.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.lru.len() != self.entries.len() {
            return Err(format!(
                "lru {} entries {}",
                self.lru.len(),
                self.entries.len()
            ));
        }
        for (&tick, key) in &self.lru {
            let e = self.entries.get(key).ok_or("lru names a missing entry")?;
            if e.tick != tick {
                return Err("tick mismatch".into());
            }
            if block_key(e.parent, &e.tokens) != *key {
                return Err("key is not the hash of parent and tokens".into());
            }
            let pages = e.holder.block_pages(0);
            if pages
                .iter()
                .any(|&id| id != RELEASED && self.alloc.refcount(id) == 0)
            {
                return Err("cached page is free".into());
            }
            if !e.first && !self.entries.contains_key(&e.parent) {
                return Err("cached block whose parent was evicted".into());
            }
            let kids = self.entries.values().filter(|c| c.parent == *key).count();
            if kids != e.children as usize {
                return Err(format!("children {} counted {}", kids, e.children));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod disk_read_tests;
#[cfg(test)]
mod ram_tests;
#[cfg(test)]
mod tests;
