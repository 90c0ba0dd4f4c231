//! The part of a lookup past the pool: blocks restored from the RAM tier, and where a
//! recurrent model's state comes from (see the module docs of [`super`]).

use super::{block_key, PrefixCache, Restore};
use crate::engine::kv_cache::{BlockTable, Checkpoint};
use std::sync::Arc;

impl PrefixCache {
    /// Continues a lookup whose pool blocks end at `parent` (and fill `table`) with blocks of
    /// the RAM tier, each in fresh pages (evicting unused pool blocks for them when short);
    /// returns how many, and for a recurrent model the state after the last one (its run then
    /// ends at the deepest block the tier holds with a state, and is empty without one).
    pub(super) fn restore_from_ram(
        &mut self,
        tokens: &[u32],
        table: &mut BlockTable,
        restores: &mut Vec<Restore>,
        mut parent: u64,
        max_blocks: usize,
    ) -> (usize, Option<Arc<[u8]>>) {
        let bs = self.block_size;
        let first = table.n_blocks();
        let mut found = Vec::new();
        for chunk in tokens.chunks_exact(bs).take(max_blocks).skip(first) {
            let key = block_key(parent, chunk);
            let Some(block) = self.ram.get(key, parent, chunk) else {
                break;
            };
            found.push((key, block));
            parent = key;
        }
        if self.state_checkpoints {
            let n = found
                .iter()
                .rposition(|(_, b)| b.state.is_some())
                .map_or(0, |i| i + 1);
            found.truncate(n);
        }
        let restores_before = restores.len();
        let mut n = 0;
        for (_, block) in &found {
            let b = table.n_blocks();
            let need = table.pages_to_reserve((b + 1) * bs);
            let free = self.alloc.free_blocks();
            if need > free {
                self.evict(need - free);
            }
            if table.reserve((b + 1) * bs).is_err() {
                break;
            }
            restores.push(Restore {
                pages: table.block_pages(b),
                bytes: Arc::clone(&block.kv),
            });
            n += 1;
        }
        let mut state = None;
        if self.state_checkpoints && n > 0 {
            // Short of pages: the run still has to end at a block with a state.
            let keep = found[..n]
                .iter()
                .rposition(|(_, b)| b.state.is_some())
                .map_or(0, |i| i + 1);
            if keep < n {
                table.truncate(first + keep);
                restores.truncate(restores_before + keep);
                n = keep;
            }
            state = n.checked_sub(1).and_then(|i| found[i].1.state.clone());
        }
        for (k, _) in found[..n].iter().rev() {
            self.ram.touch(*k);
        }
        (n, state)
    }

    /// For a recurrent model whose hit ends in the pool (`keys`, the usable blocks matched
    /// from `root` by `tokens`): how many of them it keeps, up to the deepest with a state, and
    /// that state: the block's checkpoint slot, else the RAM tier's copy.
    pub(super) fn pool_state(
        &self,
        root: u64,
        tokens: &[u32],
        keys: &[u64],
    ) -> (usize, Option<u32>, Option<Arc<[u8]>>) {
        let bs = self.block_size;
        for i in (0..keys.len()).rev() {
            let key = keys[i];
            if let Some(c) = self.entries[&key].checkpoint.as_ref() {
                return (i + 1, Some(Checkpoint::slot(c)), None);
            }
            let parent = i.checked_sub(1).map_or(root, |j| keys[j]);
            let chunk = &tokens[i * bs..(i + 1) * bs];
            if let Some(state) = self.ram.get(key, parent, chunk).and_then(|b| b.state) {
                return (i + 1, None, Some(state));
            }
        }
        (0, None, None)
    }
}
