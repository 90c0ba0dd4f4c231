//! The block allocator handle and the per-sequence block table.
//!
//! Why `Arc<Mutex<FreeList>>`: a [`BlockTable`] must give its blocks back in `Drop` without a
//! borrow of the cache (a sequence outlives any one engine step), and it must be `Send + Sync`
//! (the scheduler moves sequences between threads; pool workers read tables while attending).
//! The lock is taken once per `block_size` positions (in [`BlockTable::reserve`]) and once per
//! dropped table, by one engine thread, so it is uncontended (~20 ns) and costs nothing next to a
//! forward step. An `Rc<RefCell<_>>` would be cheaper but not `Sync`; returning blocks by an
//! explicit call on `&mut KvCache` could not be enforced when a sequence is dropped early.

use super::free_list::FreeList;
use super::layout::KvLayout;
use super::state::{Checkpoint, CheckpointSlots, SlotList, StateSlot};
use super::KvCacheError;
use std::sync::{Arc, Mutex, MutexGuard};

/// A table entry whose page was released (a local group's block older than its window).
pub const RELEASED: u32 = u32::MAX;

/// State shared by the allocator handle and every table it made.
#[derive(Debug)]
struct Shared {
    /// Positions per block.
    block_size: usize,
    layout: KvLayout,
    free: Mutex<FreeList>,
    /// Recurrent-state slots (see [`super::state`]); `None` when sequences carry no state.
    slots: Option<Mutex<SlotList>>,
    /// Checkpoint slots (see [`super::state`]); `None` without.
    checkpoints: Option<CheckpointSlots>,
}

impl Shared {
    /// The free list. A panic while the lock is held cannot leave it half-updated (its
    /// operations check before they mutate), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, FreeList> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The free state slots (poisoning is harmless as for the free list).
    fn slots(&self) -> Option<MutexGuard<'_, SlotList>> {
        self.slots
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Hands out KV pages (blocks of a group of layers, see [`super::layout`]): a free list with
/// per-page reference counts. Cheap to clone (a handle); all clones share one pool. Obtain it
/// from [`super::KvCache::allocator`]. Without sliding windows a page is a block of every
/// layer, and "block" and "page" are the same thing.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    shared: Arc<Shared>,
}

impl BlockAllocator {
    /// A pool of `n_blocks` pages of `block_size` positions each, in `layout` (tests).
    #[cfg(test)]
    pub(crate) fn new(n_blocks: u32, block_size: usize, layout: KvLayout) -> BlockAllocator {
        BlockAllocator::with_state_slots(n_blocks, block_size, layout, None, 0)
    }

    /// As [`BlockAllocator::new`], every table also taking one of `state_slots` recurrent
    /// state slots on its first reserve (`None`: sequences carry no state), and
    /// `checkpoints` further slots (numbered after those) handed out by
    /// [`Self::take_checkpoint`].
    pub(crate) fn with_state_slots(
        n_blocks: u32,
        block_size: usize,
        layout: KvLayout,
        state_slots: Option<usize>,
        checkpoints: usize,
    ) -> BlockAllocator {
        let checkpoints = match state_slots {
            Some(n) if checkpoints > 0 => Some(CheckpointSlots::new(n, checkpoints)),
            _ => None,
        };
        BlockAllocator {
            shared: Arc::new(Shared {
                block_size,
                layout,
                free: Mutex::new(FreeList::new(n_blocks)),
                slots: state_slots.map(|n| Mutex::new(SlotList::new(n))),
                checkpoints,
            }),
        }
    }

    /// A free recurrent-state checkpoint slot (see [`super::state`]); `None` when the pool
    /// has none or every one is held.
    pub fn take_checkpoint(&self) -> Option<Checkpoint> {
        self.shared.checkpoints.as_ref()?.take()
    }

    /// Checkpoint slots `(free, total)`, `None` when the pool has none.
    pub fn checkpoint_slots(&self) -> Option<(usize, usize)> {
        self.shared
            .checkpoints
            .as_ref()
            .map(CheckpointSlots::counts)
    }

    /// Whether `slot` is one of this pool's checkpoint slots.
    pub(crate) fn is_checkpoint(&self, slot: u32) -> bool {
        self.shared
            .checkpoints
            .as_ref()
            .is_some_and(|c| c.contains(slot))
    }

    /// Recurrent-state slots `(free, total)`, `None` when sequences carry no state.
    pub fn state_slots(&self) -> Option<(usize, usize)> {
        self.shared.slots().map(|s| (s.free_count(), s.total()))
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// How layers share pages and how long each group keeps its blocks.
    pub fn layout(&self) -> &KvLayout {
        &self.shared.layout
    }

    /// Pages not held by any table.
    pub fn free_blocks(&self) -> usize {
        self.shared.lock().free_count()
    }

    /// Pages in the pool.
    pub fn total_blocks(&self) -> usize {
        self.shared.lock().total()
    }

    /// Reference count of page `id` (0 when free): how many tables hold it.
    pub fn refcount(&self, id: u32) -> u32 {
        self.shared.lock().refcount(id)
    }

    /// How many of `ids` have a reference count of exactly 1 (one lock for all of them).
    pub fn count_exclusive(&self, ids: impl Iterator<Item = u32>) -> usize {
        let fl = self.shared.lock();
        ids.filter(|&id| fl.refcount(id) == 1).count()
    }

    /// True when `table` was made by this allocator (the same pool).
    pub fn owns(&self, table: &BlockTable) -> bool {
        Arc::ptr_eq(&self.shared, &table.shared)
    }
}

/// A sequence's block table: for each group of layers, logical block `i` (positions
/// `i*block_size ..`) lives in page `group(g)[i]`, or was released ([`RELEASED`]) when the
/// group is local and the block fell out of its window. Grows block by block; every page it
/// holds is released (reference count decremented, freed at zero) when the table is dropped.
#[derive(Debug)]
pub struct BlockTable {
    shared: Arc<Shared>,
    /// One list per group of the layout, all of the same length.
    groups: Vec<Vec<u32>>,
    /// The sequence's recurrent-state slot, once reserved (models with recurrent layers).
    state: Option<StateSlot>,
}

impl BlockTable {
    /// An empty table drawing from `alloc`'s pool.
    pub fn new(alloc: &BlockAllocator) -> BlockTable {
        BlockTable {
            shared: Arc::clone(&alloc.shared),
            groups: vec![Vec::new(); alloc.shared.layout.n_groups()],
            state: None,
        }
    }

    /// An empty table with room for `max_positions` positions' page ids, so that growing it up
    /// to that length never allocates (keeps the decode step allocation-free).
    pub fn with_capacity(alloc: &BlockAllocator, max_positions: usize) -> BlockTable {
        let mut t = BlockTable::new(alloc);
        for g in &mut t.groups {
            g.reserve(max_positions.div_ceil(alloc.block_size()));
        }
        t
    }

    /// Logical blocks (in every group).
    pub fn n_blocks(&self) -> usize {
        self.groups.first().map_or(0, Vec::len)
    }

    /// Pages to allocate to cover positions `< n_positions` (one per group and missing block).
    pub fn pages_to_reserve(&self, n_positions: usize) -> usize {
        let want = n_positions.div_ceil(self.shared.block_size);
        want.saturating_sub(self.n_blocks()) * self.groups.len()
    }

    /// Makes room for positions `< n_positions`, allocating the missing pages of every group
    /// all at once. On [`KvCacheError::OutOfBlocks`] the table and the pool are unchanged
    /// (nothing leaked).
    /// On a pool with recurrent state, the first call also takes the table's state slot
    /// ([`KvCacheError::OutOfStateSlots`] when none is free).
    pub fn reserve(&mut self, n_positions: usize) -> Result<(), KvCacheError> {
        if self.state.is_none() {
            if let Some(mut slots) = self.shared.slots() {
                let id = slots.take().ok_or(KvCacheError::OutOfStateSlots {
                    total: slots.total(),
                })?;
                self.state = Some(StateSlot::new(id));
            }
        }
        let want = n_positions.div_ceil(self.shared.block_size);
        let have = self.n_blocks();
        if want <= have {
            return Ok(());
        }
        let per_group = want - have;
        let need = per_group * self.groups.len();
        // Grow the id vectors before taking pages so a failed allocation here cannot strand
        // pages; this is a no-op when the table was made `with_capacity`.
        for g in &mut self.groups {
            g.try_reserve(per_group)
                .map_err(|_| KvCacheError::OutOfBlocks {
                    needed: need,
                    free: 0,
                })?;
        }
        // Every group's pages or none: the free count is checked once under the lock, then
        // each group's ids go straight into its (already grown) vector, allocating nothing.
        let mut fl = self.shared.lock();
        if need > fl.free_count() {
            return Err(KvCacheError::OutOfBlocks {
                needed: need,
                free: fl.free_count(),
            });
        }
        for g in &mut self.groups {
            fl.alloc_into(per_group, g)?;
        }
        Ok(())
    }

    /// Releases the pages of local groups' blocks that no query from position `pos` on can
    /// see (every position in them older than `pos + 1 - window`); returns how many pages this
    /// table dropped. A no-op without sliding windows.
    pub fn forget_before(&mut self, pos: usize) -> usize {
        let layout = &self.shared.layout;
        if !layout.has_windows() {
            return 0;
        }
        let bs = self.shared.block_size;
        let mut fl = self.shared.lock();
        let mut dropped = 0;
        for (gi, g) in self.groups.iter_mut().enumerate() {
            let keep = layout.first_kept_block(gi, pos, bs).min(g.len());
            for id in g[..keep].iter_mut().filter(|id| **id != RELEASED) {
                let r = fl.release(*id);
                invariant!(r.is_ok(), "releasing page {id} twice");
                *id = RELEASED;
                dropped += 1;
            }
        }
        dropped
    }

    /// Number of positions the table has room for.
    pub fn capacity(&self) -> usize {
        self.n_blocks() * self.shared.block_size
    }

    /// The pages of the first group in logical order: every page of a model without sliding
    /// windows (whose only group is every layer).
    pub fn blocks(&self) -> &[u32] {
        self.groups.first().map_or(&[], Vec::as_slice)
    }

    /// Group `g`'s pages in logical order ([`RELEASED`] where a local block was dropped).
    pub fn group(&self, g: usize) -> &[u32] {
        &self.groups[g]
    }

    /// Logical block `b`'s page in every group (`RELEASED` where dropped).
    pub fn block_pages(&self, b: usize) -> Vec<u32> {
        self.groups.iter().map(|g| g[b]).collect()
    }

    /// Pages held (not released), over every group.
    pub fn pages_held(&self) -> usize {
        self.groups
            .iter()
            .map(|g| g.iter().filter(|&&id| id != RELEASED).count())
            .sum()
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// Appends the live page `id` (held by another table or a cache) as this table's next
    /// logical block, adding a reference to it: the single-group form of [`Self::push_pages`].
    pub fn push_shared(&mut self, id: u32) -> Result<(), KvCacheError> {
        self.push_pages(&[id])
    }

    /// Appends a logical block made of `pages` (one per group; `RELEASED` for a local group's
    /// dropped page), adding a reference to each live one. Used to start a sequence on cached
    /// prefix blocks; such pages are read-only for this table ([`super::KvCache::write`] refuses
    /// shared pages). On error nothing changes.
    pub fn push_pages(&mut self, pages: &[u32]) -> Result<(), KvCacheError> {
        if pages.len() != self.groups.len() {
            return Err(KvCacheError::Shape {
                what: "pages of one block (one per layer group)",
                expected: self.groups.len(),
                got: pages.len(),
            });
        }
        for g in &mut self.groups {
            g.try_reserve(1)
                .map_err(|_| KvCacheError::OutOfBlocks { needed: 1, free: 0 })?;
        }
        let mut fl = self.shared.lock();
        for (i, &id) in pages.iter().enumerate().filter(|(_, &id)| id != RELEASED) {
            if let Err(e) = fl.retain(id) {
                // Undo the references taken so far.
                for &done in pages[..i].iter().filter(|&&d| d != RELEASED) {
                    let _ = fl.release(done);
                }
                return Err(e);
            }
        }
        for (g, &id) in self.groups.iter_mut().zip(pages) {
            g.push(id);
        }
        Ok(())
    }

    /// Drops logical blocks from `n_blocks` on (releasing their pages).
    pub fn truncate(&mut self, n_blocks: usize) {
        let mut fl = self.shared.lock();
        for g in &mut self.groups {
            for &id in g.iter().skip(n_blocks).filter(|&&id| id != RELEASED) {
                let r = fl.release(id);
                invariant!(r.is_ok(), "releasing page {id} twice");
            }
            g.truncate(n_blocks);
        }
    }

    /// Releases the pages of local groups at logical block `b` that nobody else holds
    /// (reference count 1: a cache's own copy), marking them [`RELEASED`]; returns how many
    /// pages went back to the pool.
    pub fn release_unshared_local(&mut self, b: usize) -> usize {
        let layout = &self.shared.layout;
        let mut fl = self.shared.lock();
        let mut freed = 0;
        for (gi, g) in self.groups.iter_mut().enumerate() {
            if layout.window(gi).is_none() {
                continue;
            }
            if let Some(id) = g.get_mut(b).filter(|id| **id != RELEASED) {
                if fl.refcount(*id) == 1 {
                    let r = fl.release(*id);
                    invariant!(r.is_ok());
                    *id = RELEASED;
                    freed += 1;
                }
            }
        }
        freed
    }

    /// Pages of logical block `b` shared with another table (reference count above 1).
    pub fn shared_pages_at(&self, b: usize) -> usize {
        let fl = self.shared.lock();
        self.groups
            .iter()
            .filter_map(|g| g.get(b))
            .filter(|&&id| id != RELEASED && fl.refcount(id) > 1)
            .count()
    }

    /// Replaces logical block `i`'s pages that are shared (reference count above 1) with fresh
    /// pages of its own: returns the `(old, new)` pairs so the caller can copy the contents with
    /// [`super::KvCache::copy_block`] before anything writes either page (empty when every page
    /// was already exclusive). On [`KvCacheError::OutOfBlocks`] nothing changes.
    pub fn unshare(&mut self, i: usize) -> Result<Vec<(u32, u32)>, KvCacheError> {
        if i >= self.n_blocks() {
            return Err(KvCacheError::Position {
                pos: i * self.shared.block_size,
                capacity: self.capacity(),
            });
        }
        let mut fl = self.shared.lock();
        let shared: Vec<usize> = (0..self.groups.len())
            .filter(|&g| {
                let id = self.groups[g][i];
                id != RELEASED && fl.refcount(id) > 1
            })
            .collect();
        let mut fresh = Vec::with_capacity(shared.len());
        fl.alloc_into(shared.len(), &mut fresh)?;
        let mut pairs = Vec::with_capacity(shared.len());
        for (g, new) in shared.into_iter().zip(fresh) {
            let old = self.groups[g][i];
            // `old` had a count of 2 or more, so this release only drops our reference.
            let _ = fl.release(old);
            self.groups[g][i] = new;
            pairs.push((old, new));
        }
        Ok(pairs)
    }

    /// A second table sharing every page of this one (reference counts incremented), e.g. for a
    /// cached prompt prefix. There is no copy-on-write: writers must only write positions past
    /// the shared prefix, in pages they alone hold.
    pub fn fork(&self) -> BlockTable {
        let mut fl = self.shared.lock();
        for g in &self.groups {
            for &id in g.iter().filter(|&&id| id != RELEASED) {
                // Every id in a live table has a count >= 1, so retain cannot fail.
                let r = fl.retain(id);
                invariant!(r.is_ok(), "forking a table holding a free page {id}");
            }
        }
        BlockTable {
            shared: Arc::clone(&self.shared),
            groups: self.groups.clone(),
            // A state is not shared: the fork takes its own slot on its first reserve, and
            // the forward pass refuses to resume it past position 0 (see `super::state`).
            state: None,
        }
    }

    /// The recurrent-state slot this table holds (after its first reserve, on a pool with
    /// state).
    pub fn state_slot(&self) -> Option<u32> {
        self.state.as_ref().map(|s| s.id)
    }

    /// Positions `0..n` the table's recurrent state stands for (0 before any forward call).
    pub fn state_covered(&self) -> Option<usize> {
        self.state.as_ref().map(StateSlot::covered)
    }

    /// Records that the state now stands for positions `0..n` (the forward pass, after
    /// computing them).
    pub(crate) fn set_state_covered(&self, n: usize) {
        if let Some(s) = &self.state {
            s.set_covered(n);
        }
    }
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        if let Some(st) = self.state.take() {
            if let Some(mut slots) = self.shared.slots() {
                slots.give_back(st.id);
            }
        }
        if self.n_blocks() == 0 {
            return;
        }
        let mut fl = self.shared.lock();
        for g in &self.groups {
            for &id in g.iter().filter(|&&id| id != RELEASED) {
                // Each id was allocated or retained for this table exactly once.
                let r = fl.release(id);
                invariant!(r.is_ok(), "releasing page {id} twice");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kv_cache::LayerWindows;

    #[test]
    fn reserve_grows_by_blocks() {
        let a = BlockAllocator::new(4, 16, KvLayout::new(1, &LayerWindows::NONE));
        let mut t = BlockTable::new(&a);
        t.reserve(1).unwrap();
        assert_eq!(t.capacity(), 16);
        t.reserve(16).unwrap();
        assert_eq!(t.blocks().len(), 1);
        t.reserve(17).unwrap();
        assert_eq!(t.blocks(), &[0, 1]);
        assert_eq!(a.free_blocks(), 2);
        drop(t);
        assert_eq!(a.free_blocks(), 4);
    }

    #[test]
    fn out_of_blocks_leaves_table_and_pool_unchanged() {
        let a = BlockAllocator::new(3, 16, KvLayout::new(1, &LayerWindows::NONE));
        let mut t = BlockTable::new(&a);
        t.reserve(20).unwrap();
        let err = t.reserve(100).unwrap_err();
        assert!(matches!(
            err,
            KvCacheError::OutOfBlocks { needed: 5, free: 1 }
        ));
        assert_eq!(t.blocks().len(), 2);
        assert_eq!(a.free_blocks(), 1);
        drop(t);
        assert_eq!(a.free_blocks(), 3);
    }

    #[test]
    fn fork_shares_until_last_drop() {
        let a = BlockAllocator::new(4, 8, KvLayout::new(1, &LayerWindows::NONE));
        let mut t = BlockTable::new(&a);
        t.reserve(16).unwrap();
        let f = t.fork();
        assert_eq!(f.blocks(), t.blocks());
        assert_eq!(a.refcount(0), 2);
        drop(t);
        assert_eq!(a.free_blocks(), 2);
        drop(f);
        assert_eq!(a.free_blocks(), 4);
    }

    #[test]
    fn ownership_is_checked() {
        let a = BlockAllocator::new(1, 8, KvLayout::new(1, &LayerWindows::NONE));
        let b = BlockAllocator::new(1, 8, KvLayout::new(1, &LayerWindows::NONE));
        let t = BlockTable::new(&a);
        assert!(a.owns(&t));
        assert!(!b.owns(&t));
    }

    #[test]
    fn with_capacity_reserves_ids() {
        let a = BlockAllocator::new(8, 16, KvLayout::new(1, &LayerWindows::NONE));
        let mut t = BlockTable::with_capacity(&a, 100);
        let cap = t.groups[0].capacity();
        assert!(cap >= 7);
        t.reserve(100).unwrap();
        assert_eq!(t.groups[0].capacity(), cap);
    }

    #[test]
    fn state_slot_is_taken_on_reserve_and_freed_on_drop() {
        let a = BlockAllocator::with_state_slots(
            8,
            16,
            KvLayout::new(1, &LayerWindows::NONE),
            Some(2),
            0,
        );
        let mut t = BlockTable::new(&a);
        assert_eq!(t.state_slot(), None);
        t.reserve(1).unwrap();
        let s0 = t.state_slot().expect("a slot with the first pages");
        assert_eq!(a.state_slots(), Some((1, 2)));
        let mut u = BlockTable::new(&a);
        u.reserve(20).unwrap();
        // No slot left: refused before any page is taken.
        let mut v = BlockTable::new(&a);
        let free = a.free_blocks();
        assert_eq!(
            v.reserve(1),
            Err(KvCacheError::OutOfStateSlots { total: 2 })
        );
        assert_eq!(a.free_blocks(), free);
        // A fork shares pages, never the state.
        let f = t.fork();
        assert_eq!(f.state_slot(), None);
        t.set_state_covered(5);
        assert_eq!(t.state_covered(), Some(5));
        drop(t);
        assert_eq!(a.state_slots(), Some((1, 2)));
        v.reserve(1).unwrap();
        assert_eq!(v.state_slot(), Some(s0));
        assert_eq!(v.state_covered(), Some(0), "a reused slot starts uncovered");
        drop((u, v, f));
        assert_eq!(a.state_slots(), Some((2, 2)));
        assert_eq!(a.free_blocks(), 8);
    }

    use proptest::prelude::*;

    proptest! {
        /// Random reserve/fork/drop of real tables (Drop does the releasing): the pool's free
        /// count always matches the blocks held, and returns to the total at the end.
        #[test]
        fn tables_return_every_block(
            ops in proptest::collection::vec((0u8..3, 0usize..6, 0usize..80), 0..60)
        ) {
            let a = BlockAllocator::new(16, 8, KvLayout::new(1, &LayerWindows::NONE));
            let mut tables: Vec<Option<BlockTable>> = (0..6).map(|_| None).collect();
            for (kind, slot, n) in ops {
                match kind {
                    0 => {
                        let t = tables[slot].get_or_insert_with(|| BlockTable::new(&a));
                        let (cap, free) = (t.capacity(), a.free_blocks());
                        if t.reserve(n).is_err() {
                            prop_assert_eq!(t.capacity(), cap);
                            prop_assert_eq!(a.free_blocks(), free);
                        }
                    }
                    1 => {
                        let f = tables[slot].as_ref().map(BlockTable::fork);
                        tables[(slot + 1) % 6] = f;
                    }
                    _ => tables[slot] = None,
                }
                let mut held: Vec<u32> = tables.iter().flatten().flat_map(|t| t.blocks().to_vec()).collect();
                for id in 0..16 {
                    let holders = held.iter().filter(|&&b| b == id).count() as u32;
                    prop_assert_eq!(a.refcount(id), holders);
                }
                held.sort_unstable();
                held.dedup();
                prop_assert_eq!(a.free_blocks() + held.len(), 16);
            }
            drop(tables);
            prop_assert_eq!(a.free_blocks(), 16);
        }
    }
}
