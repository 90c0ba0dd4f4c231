//! The block free list with per-block reference counts: pure bookkeeping, no storage.
//!
//! Every operation is O(1) (a bulk allocation is O(n) in the blocks it hands out) and never
//! allocates after construction: the free stack and the count table are sized once.

use super::KvCacheError;

/// Free stack plus reference counts for `total` blocks, ids `0..total`.
///
/// Invariant: a block is on the free stack exactly when its count is 0, so
/// `free_count() + live blocks == total()`.
#[derive(Debug)]
pub(crate) struct FreeList {
    /// Free block ids; the next allocation pops from the end.
    free: Vec<u32>,
    /// Reference count per block id; 0 means free.
    refcount: Vec<u32>,
}

impl FreeList {
    /// A list of `total` free blocks. Block 0 is handed out first.
    pub(crate) fn new(total: u32) -> FreeList {
        FreeList {
            free: (0..total).rev().collect(),
            refcount: vec![0; total as usize],
        }
    }

    /// Number of blocks, free or not.
    pub(crate) fn total(&self) -> usize {
        self.refcount.len()
    }

    /// Number of free blocks.
    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Reference count of `id` (0 when free or out of range).
    pub(crate) fn refcount(&self, id: u32) -> u32 {
        self.refcount.get(id as usize).copied().unwrap_or(0)
    }

    /// Allocates `n` blocks (count 1 each) and appends their ids to `out`, or allocates nothing
    /// and returns [`KvCacheError::OutOfBlocks`] when fewer than `n` are free.
    pub(crate) fn alloc_into(&mut self, n: usize, out: &mut Vec<u32>) -> Result<(), KvCacheError> {
        if n > self.free.len() {
            return Err(KvCacheError::OutOfBlocks {
                needed: n,
                free: self.free.len(),
            });
        }
        for _ in 0..n {
            // The length check above guarantees `n` pops succeed.
            let Some(id) = self.free.pop() else { break };
            self.refcount[id as usize] = 1;
            out.push(id);
        }
        Ok(())
    }

    /// Adds a reference to the live block `id` (sharing it, e.g. a forked prefix).
    pub(crate) fn retain(&mut self, id: u32) -> Result<(), KvCacheError> {
        match self.refcount.get_mut(id as usize) {
            Some(c) if *c > 0 => {
                *c = c.checked_add(1).ok_or(KvCacheError::BadBlock { id })?;
                Ok(())
            }
            _ => Err(KvCacheError::BadBlock { id }),
        }
    }

    /// Drops a reference to the live block `id`; returns true when that was the last one and the
    /// block went back on the free list. Releasing a free block is an error (double free) and
    /// changes nothing.
    pub(crate) fn release(&mut self, id: u32) -> Result<bool, KvCacheError> {
        match self.refcount.get_mut(id as usize) {
            Some(c) if *c > 0 => {
                *c -= 1;
                if *c == 0 {
                    // Capacity is `total` and a block is pushed only when its count reaches 0,
                    // which happens once per allocation: this push never reallocates.
                    self.free.push(id);
                    return Ok(true);
                }
                Ok(false)
            }
            _ => Err(KvCacheError::BadBlock { id }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn alloc_release_round_trip() {
        let mut fl = FreeList::new(4);
        let mut ids = Vec::new();
        fl.alloc_into(3, &mut ids).unwrap();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(fl.free_count(), 1);
        for &id in &ids {
            assert_eq!(fl.refcount(id), 1);
            assert!(fl.release(id).unwrap());
        }
        assert_eq!(fl.free_count(), 4);
    }

    #[test]
    fn out_of_blocks_allocates_nothing() {
        let mut fl = FreeList::new(2);
        let mut ids = vec![];
        let err = fl.alloc_into(3, &mut ids).unwrap_err();
        assert!(matches!(
            err,
            KvCacheError::OutOfBlocks { needed: 3, free: 2 }
        ));
        assert!(ids.is_empty());
        assert_eq!(fl.free_count(), 2);
    }

    #[test]
    fn shared_block_freed_on_last_release() {
        let mut fl = FreeList::new(1);
        let mut ids = vec![];
        fl.alloc_into(1, &mut ids).unwrap();
        fl.retain(0).unwrap();
        assert_eq!(fl.refcount(0), 2);
        assert!(!fl.release(0).unwrap());
        assert_eq!(fl.free_count(), 0);
        assert!(fl.release(0).unwrap());
        assert_eq!(fl.free_count(), 1);
    }

    #[test]
    fn double_free_and_bad_ids_are_errors() {
        let mut fl = FreeList::new(2);
        assert!(fl.release(0).is_err());
        assert!(fl.retain(1).is_err());
        assert!(fl.release(7).is_err());
        assert_eq!(fl.free_count(), 2);
    }

    /// One step of a random workload over a set of "tables" (lists of held block ids).
    #[derive(Debug, Clone)]
    enum Op {
        Alloc { table: usize, n: usize },
        Fork { table: usize },
        Drop { table: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8usize, 0..5usize).prop_map(|(table, n)| Op::Alloc { table, n }),
            (0..8usize).prop_map(|table| Op::Fork { table }),
            (0..8usize).prop_map(|table| Op::Drop { table }),
        ]
    }

    proptest! {
        /// Random alloc/fork/drop sequences: every release succeeds (no double free), refcounts
        /// always equal the number of holders, and dropping everything frees every block.
        #[test]
        fn no_leak_no_double_free(total in 1u32..24, ops in proptest::collection::vec(op(), 0..64)) {
            let mut fl = FreeList::new(total);
            let mut tables: Vec<Vec<u32>> = vec![Vec::new(); 8];
            for op in ops {
                match op {
                    Op::Alloc { table, n } => {
                        let before = fl.free_count();
                        match fl.alloc_into(n, &mut tables[table]) {
                            Ok(()) => prop_assert_eq!(fl.free_count(), before - n),
                            Err(_) => prop_assert_eq!(fl.free_count(), before),
                        }
                    }
                    Op::Fork { table } => {
                        let ids = tables[table].clone();
                        for &id in &ids {
                            fl.retain(id).unwrap();
                        }
                        if let Some(slot) = tables.iter().position(|t| t.is_empty()) {
                            tables[slot] = ids;
                        } else {
                            for id in ids {
                                fl.release(id).unwrap();
                            }
                        }
                    }
                    Op::Drop { table } => {
                        for id in std::mem::take(&mut tables[table]) {
                            fl.release(id).unwrap();
                        }
                    }
                }
                let live: usize = (0..total)
                    .map(|id| {
                        let holders = tables.iter().flatten().filter(|&&b| b == id).count();
                        prop_assert_eq!(fl.refcount(id) as usize, holders);
                        Ok(usize::from(holders > 0))
                    })
                    .sum::<Result<usize, TestCaseError>>()?;
                prop_assert_eq!(fl.free_count() + live, total as usize);
            }
            for t in tables.iter_mut() {
                for id in std::mem::take(t) {
                    fl.release(id).unwrap();
                }
            }
            prop_assert_eq!(fl.free_count(), total as usize);
        }
    }
}
