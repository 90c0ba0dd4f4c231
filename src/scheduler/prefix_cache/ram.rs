//! The RAM tier: blocks evicted from the KV pool, kept as bytes ([`crate::engine::kv_cache`]'s
//! `export_block` format) within a byte bound, least recently used dropped first.
//!
//! Contracts:
//! - An entry stores its parent key and tokens beside its bytes, and [`RamTier::get`]
//!   compares both, so a key collision never aliases two prefixes (as in the pool).
//! - Entries are independent: dropping a parent leaves its children, unreachable (a lookup
//!   walks from the root) until the parent comes back or the LRU drops them too.
//! - Bytes are shared (`Arc`): a restore in flight keeps its bytes even if the entry is
//!   dropped before the worker copies them.
//! - A block of a recurrent model may carry the recurrent state after it (a checkpoint's
//!   bytes, [`RamBlock::state`]), counted in the bound with its K/V. A block stored again with
//!   a state where the held one has none replaces it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the tier keeps of a block: its K/V (the pool's `export_block` bytes, or their Q8_0
/// form) and, for a recurrent model, maybe the recurrent state after it (`export_checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RamBlock {
    pub kv: Arc<[u8]>,
    pub state: Option<Arc<[u8]>>,
}

impl RamBlock {
    /// K/V only.
    pub fn kv(kv: Arc<[u8]>) -> RamBlock {
        RamBlock { kv, state: None }
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.kv.len() + self.state.as_ref().map_or(0, |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A block's bytes and what it follows.
struct Entry {
    parent: u64,
    tokens: Box<[u32]>,
    block: RamBlock,
    tick: u64,
}

/// See the module docs. Owned by the prefix cache (one scheduler).
pub struct RamTier {
    cap: usize,
    used: usize,
    entries: HashMap<u64, Entry>,
    /// tick -> key, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

impl RamTier {
    /// An empty tier holding at most `cap` bytes of blocks (0: the tier is off).
    pub fn new(cap: usize) -> RamTier {
        RamTier {
            cap,
            used: 0,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
        }
    }

    /// The bound in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the tier can hold anything.
    pub fn is_on(&self) -> bool {
        self.cap > 0
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of blocks held.
    pub fn bytes(&self) -> usize {
        self.used
    }

    /// Whether `key` is held (no LRU update).
    pub fn contains(&self, key: u64) -> bool {
        self.entries.contains_key(&key)
    }

    /// Marks `key` as just used.
    pub fn touch(&mut self, key: u64) {
        if let Some(e) = self.entries.get_mut(&key) {
            self.lru.remove(&e.tick);
            self.tick += 1;
            e.tick = self.tick;
            self.lru.insert(self.tick, key);
        }
    }

    /// The block keyed `key` if it follows `parent` and holds `tokens` (else `None`: absent,
    /// or another prefix under a colliding key). Does not touch it.
    pub fn get(&self, key: u64, parent: u64, tokens: &[u32]) -> Option<RamBlock> {
        let e = self.entries.get(&key)?;
        (e.parent == parent && *e.tokens == *tokens).then(|| e.block.clone())
    }

    /// Whether the block `key` is held with a recurrent state.
    pub fn has_state(&self, key: u64) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.block.state.is_some())
    }

    /// Keeps `block` as the block `key` (following `parent`, holding `tokens`), dropping the
    /// least recently used blocks to stay within the bound; returns the blocks dropped. A
    /// block larger than the whole bound, or a key already held (with a state, or without
    /// and `block` has none), is not stored (the held one is touched).
    pub fn put(&mut self, key: u64, parent: u64, tokens: &[u32], block: RamBlock) -> usize {
        if let Some(e) = self.entries.get(&key) {
            if e.block.state.is_some() || block.state.is_none() {
                self.touch(key);
                return 0;
            }
            let e = self.entries.remove(&key).expect("held");
            self.lru.remove(&e.tick);
            self.used -= e.block.len();
        }
        let bytes = block.len();
        if bytes > self.cap {
            return 0;
        }
        let mut dropped = 0;
        while self.used + bytes > self.cap {
            let Some((_, old)) = self.lru.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&old) {
                self.used -= e.block.len();
                dropped += 1;
            }
        }
        self.tick += 1;
        self.used += bytes;
        self.lru.insert(self.tick, key);
        self.entries.insert(
            key,
            Entry {
                parent,
                tokens: tokens.into(),
                block,
                tick: self.tick,
            },
        );
        dropped
    }

    /// Drops every block.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.lru.clear();
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: usize) -> RamBlock {
        RamBlock::kv(vec![7u8; n].into())
    }

    #[test]
    fn bounded_lru_verified_by_parent_and_tokens() {
        let mut t = RamTier::new(30);
        assert_eq!(t.put(1, 0, &[1, 2], b(10)), 0);
        assert_eq!(t.put(2, 1, &[3, 4], b(10)), 0);
        assert_eq!(t.put(3, 2, &[5, 6], b(10)), 0);
        assert_eq!(t.bytes(), 30);
        t.touch(1);
        // 2 is now the oldest: it goes.
        assert_eq!(t.put(4, 3, &[7, 8], b(10)), 1);
        assert!(!t.contains(2) && t.contains(1) && t.contains(4));
        // A colliding key with another parent or other tokens is a miss.
        assert!(t.get(1, 0, &[1, 2]).is_some());
        assert!(t.get(1, 9, &[1, 2]).is_none());
        assert!(t.get(1, 0, &[1, 3]).is_none());
        // Too big for the bound: refused, nothing dropped.
        assert_eq!(t.put(5, 0, &[0, 0], b(31)), 0);
        assert_eq!((t.len(), t.bytes()), (3, 30));
        // A state upgrades a held block without one (and counts), never the other way.
        let with_state = RamBlock {
            kv: vec![1u8; 5].into(),
            state: Some(vec![2u8; 3].into()),
        };
        assert!(!t.has_state(1));
        t.put(1, 0, &[1, 2], with_state.clone());
        assert!(t.has_state(1) && t.bytes() == 28);
        t.put(1, 0, &[1, 2], b(10));
        assert_eq!(t.get(1, 0, &[1, 2]), Some(with_state));
        t.clear();
        assert_eq!((t.len(), t.bytes()), (0, 0));
        assert!(!RamTier::new(0).is_on());
    }
}
