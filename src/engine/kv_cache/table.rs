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
use super::KvCacheError;
use std::sync::{Arc, Mutex, MutexGuard};

/// State shared by the allocator handle and every table it made.
#[derive(Debug)]
struct Shared {
    /// Positions per block.
    block_size: usize,
    free: Mutex<FreeList>,
}

impl Shared {
    /// The free list. A panic while the lock is held cannot leave it half-updated (its
    /// operations check before they mutate), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, FreeList> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands out KV blocks: a free list with per-block reference counts. Cheap to clone (a handle);
/// all clones share one pool. Obtain it from [`super::KvCache::allocator`].
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    shared: Arc<Shared>,
}

impl BlockAllocator {
    /// A pool of `n_blocks` blocks of `block_size` positions each.
    pub(crate) fn new(n_blocks: u32, block_size: usize) -> BlockAllocator {
        BlockAllocator {
            shared: Arc::new(Shared {
                block_size,
                free: Mutex::new(FreeList::new(n_blocks)),
            }),
        }
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// Blocks not held by any table.
    pub fn free_blocks(&self) -> usize {
        self.shared.lock().free_count()
    }

    /// Blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.shared.lock().total()
    }

    /// Reference count of block `id` (0 when free): how many tables hold it.
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

/// A sequence's block table: logical block `i` (positions `i*block_size ..`) lives in physical
/// block `blocks()[i]`. Grows block by block; every block it holds is released (reference count
/// decremented, freed at zero) when the table is dropped.
#[derive(Debug)]
pub struct BlockTable {
    shared: Arc<Shared>,
    blocks: Vec<u32>,
}

impl BlockTable {
    /// An empty table drawing from `alloc`'s pool.
    pub fn new(alloc: &BlockAllocator) -> BlockTable {
        BlockTable {
            shared: Arc::clone(&alloc.shared),
            blocks: Vec::new(),
        }
    }

    /// An empty table with room for `max_positions` positions' block ids, so that growing it up
    /// to that length never allocates (keeps the decode step allocation-free).
    pub fn with_capacity(alloc: &BlockAllocator, max_positions: usize) -> BlockTable {
        let mut t = BlockTable::new(alloc);
        t.blocks.reserve(max_positions.div_ceil(alloc.block_size()));
        t
    }

    /// Makes room for positions `< n_positions`, allocating the missing blocks all at once.
    /// On [`KvCacheError::OutOfBlocks`] the table and the pool are unchanged (nothing leaked).
    pub fn reserve(&mut self, n_positions: usize) -> Result<(), KvCacheError> {
        let want = n_positions.div_ceil(self.shared.block_size);
        if want <= self.blocks.len() {
            return Ok(());
        }
        let need = want - self.blocks.len();
        // Grow the id vector before taking blocks so a failed allocation here cannot strand
        // blocks; this is a no-op when the table was made `with_capacity`.
        self.blocks
            .try_reserve(need)
            .map_err(|_| KvCacheError::OutOfBlocks {
                needed: need,
                free: 0,
            })?;
        self.shared.lock().alloc_into(need, &mut self.blocks)
    }

    /// Number of positions the table has room for.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * self.shared.block_size
    }

    /// Physical block ids in logical order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// Appends the live block `id` (held by another table or a cache) as this table's next
    /// logical block, adding a reference to it. Used to start a sequence on cached prefix blocks;
    /// such blocks are read-only for this table ([`super::KvCache::write`] refuses shared blocks).
    pub fn push_shared(&mut self, id: u32) -> Result<(), KvCacheError> {
        self.blocks
            .try_reserve(1)
            .map_err(|_| KvCacheError::OutOfBlocks { needed: 1, free: 0 })?;
        self.shared.lock().retain(id)?;
        self.blocks.push(id);
        Ok(())
    }

    /// Replaces logical block `i` with a fresh block of its own when it is shared (reference
    /// count above 1): returns `Some((old, new))` so the caller can copy the contents with
    /// [`super::KvCache::copy_block`] before anything writes either block, or `None` when the
    /// block was already exclusive. On [`KvCacheError::OutOfBlocks`] nothing changes.
    pub fn unshare(&mut self, i: usize) -> Result<Option<(u32, u32)>, KvCacheError> {
        let Some(&old) = self.blocks.get(i) else {
            return Err(KvCacheError::Position {
                pos: i * self.shared.block_size,
                capacity: self.capacity(),
            });
        };
        let mut fl = self.shared.lock();
        if fl.refcount(old) <= 1 {
            return Ok(None);
        }
        let mut ids = Vec::with_capacity(1);
        fl.alloc_into(1, &mut ids)?;
        let new = ids[0];
        // `old` had a count of 2 or more, so this release only drops our reference.
        fl.release(old)?;
        self.blocks[i] = new;
        Ok(Some((old, new)))
    }

    /// A second table sharing every block of this one (reference counts incremented), e.g. for a
    /// cached prompt prefix. There is no copy-on-write: writers must only write positions past
    /// the shared prefix, in blocks they alone hold.
    pub fn fork(&self) -> BlockTable {
        let mut fl = self.shared.lock();
        for &id in &self.blocks {
            // Every id in a live table has a count >= 1, so retain cannot fail.
            let r = fl.retain(id);
            debug_assert!(r.is_ok(), "forking a table holding a free block {id}");
        }
        BlockTable {
            shared: Arc::clone(&self.shared),
            blocks: self.blocks.clone(),
        }
    }
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        if self.blocks.is_empty() {
            return;
        }
        let mut fl = self.shared.lock();
        for &id in &self.blocks {
            // Each id was allocated or retained for this table exactly once, so its count is >= 1.
            let r = fl.release(id);
            debug_assert!(r.is_ok(), "releasing block {id} twice");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_grows_by_blocks() {
        let a = BlockAllocator::new(4, 16);
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
        let a = BlockAllocator::new(3, 16);
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
        let a = BlockAllocator::new(4, 8);
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
        let a = BlockAllocator::new(1, 8);
        let b = BlockAllocator::new(1, 8);
        let t = BlockTable::new(&a);
        assert!(a.owns(&t));
        assert!(!b.owns(&t));
    }

    #[test]
    fn with_capacity_reserves_ids() {
        let a = BlockAllocator::new(8, 16);
        let mut t = BlockTable::with_capacity(&a, 100);
        let cap = t.blocks.capacity();
        assert!(cap >= 7);
        t.reserve(100).unwrap();
        assert_eq!(t.blocks.capacity(), cap);
    }

    use proptest::prelude::*;

    proptest! {
        /// Random reserve/fork/drop of real tables (Drop does the releasing): the pool's free
        /// count always matches the blocks held, and returns to the total at the end.
        #[test]
        fn tables_return_every_block(
            ops in proptest::collection::vec((0u8..3, 0usize..6, 0usize..80), 0..60)
        ) {
            let a = BlockAllocator::new(16, 8);
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
