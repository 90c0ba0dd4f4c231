//! Recurrent-state checkpoints in the schedule: how a model with recurrent layers (short
//! convolutions, DeltaNet, Mamba2) uses the prefix cache.
//!
//! Such a sequence resumes from a cached prefix only with its recurrent state at the
//! prefix's end, so the scheduler (prefix cache on):
//! - ends every prefill chunk that crosses a block boundary at its last boundary (the rest of
//!   the prompt, less than a block, follows in the next step), so that after the step the
//!   sequence's state stands exactly for whole blocks;
//! - asks the worker to copy that state into a checkpoint slot after the step
//!   ([`StateCopy::Save`]), and attaches the checkpoint to the cached block when the step's
//!   blocks enter the prefix cache ([`Scheduler::advance`]); a block already carrying one is
//!   not saved again;
//! - on a hit (which the prefix cache ends at the deepest block with a checkpoint), asks the
//!   worker to copy the checkpoint into the sequence's own slot before the step
//!   ([`StateCopy::Restore`]), or to load it from the RAM tier's copy of the state
//!   ([`StateCopy::Load`]: a block spilled with its checkpoint, or read from the disk tier).
//!
//! Checkpoints are bounded by the pool's checkpoint slots ([`checkpoint_slots`]); when none is
//! free, the least recently used cached block gives up its own. The worker runs every
//! `Restore` of a step before its forward pass and every `Save` after it, so a slot given up
//! and saved into in one step was read by that step's restores first.

use super::{key_of, Limits, Scheduler, SeqId, StepPlan};
use crate::engine::kv_cache::Checkpoint;
use crate::scheduler::prefix_cache::{Hit, StateCopy};

/// Checkpoint slots a worker's pool keeps for a model with recurrent layers under `limits`:
/// half a slot per sequence it runs at once (at least 2), none without the prefix cache. They
/// come out of the KV budget like the sequences' own slots.
pub fn checkpoint_slots(limits: &Limits) -> usize {
    if limits.prefix_cache {
        (limits.max_num_seqs / 2).max(2)
    } else {
        0
    }
}

/// Checkpoints taken for this step's saves, attached when their blocks enter the cache.
#[derive(Debug, Default)]
pub(super) struct PendingCheckpoints {
    /// (sequence, the position the state will stand for, the slot).
    list: Vec<(SeqId, usize, Checkpoint)>,
}

impl<T> Scheduler<T> {
    /// Resumes sequences from recurrent-state checkpoints (a model with recurrent layers): see
    /// the module docs. Without the prefix cache, nothing changes.
    pub fn keep_state_checkpoints(&mut self) {
        self.prefix.keep_state_checkpoints();
    }

    fn checkpointing(&self) -> bool {
        self.limits.prefix_cache && self.prefix.keeps_state_checkpoints()
    }

    /// Cached blocks carrying a recurrent-state checkpoint.
    pub fn state_checkpoints(&self) -> usize {
        self.prefix.checkpoints()
    }

    /// A prefill chunk of `n` tokens from `start`, ended at its last block boundary when it
    /// crosses one (with checkpoints on).
    pub(super) fn checkpoint_chunk(&self, start: usize, n: usize) -> usize {
        if !self.checkpointing() {
            return n;
        }
        let bs = self.block_size();
        let end = start + n;
        let boundary = end / bs * bs;
        if boundary > start && boundary < end {
            boundary - start
        } else {
            n
        }
    }

    /// Forgets the checkpoints of a step that never advanced (their slots are free again).
    pub(super) fn drop_pending_checkpoints(&mut self) {
        self.pending.list.clear();
    }

    /// After planning sequence `id`'s prefill chunk ending at `end`: a save of its state into
    /// a checkpoint when `end` is a block boundary whose block has none yet.
    pub(super) fn plan_checkpoint(&mut self, id: SeqId, end: usize, plan: &mut StepPlan) {
        let bs = self.block_size();
        if !self.checkpointing() || end == 0 || !end.is_multiple_of(bs) {
            return;
        }
        let Some(s) = self.seqs.get(&id) else {
            return;
        };
        let Some(tokens) = s.tokens.get(..end) else {
            return;
        };
        if self.prefix.has_checkpoint(key_of(s.root, tokens, bs)) {
            return;
        }
        let taken = self.alloc.take_checkpoint();
        let Some(c) = taken.or_else(|| self.prefix.steal_checkpoint()) else {
            return;
        };
        plan.state_copies.push(StateCopy::Save {
            seq: id,
            slot: c.slot(),
        });
        self.pending.list.push((id, end, c));
    }

    /// After admitting sequence `id` with `hit`: the restore of its state from the hit's
    /// checkpoint.
    pub(super) fn plan_restore(id: SeqId, hit: Option<Hit>, plan: &mut StepPlan) {
        let Some(hit) = hit else {
            return;
        };
        if let Some(slot) = hit.state_from {
            plan.state_copies.push(StateCopy::Restore {
                seq: id,
                slot,
                covered: hit.tokens,
            });
        } else if let Some(bytes) = hit.state_bytes {
            plan.state_copies.push(StateCopy::Load {
                seq: id,
                bytes,
                covered: hit.tokens,
            });
        }
    }

    /// After sequence `id`'s blocks up to `registered` whole blocks entered the cache (the
    /// last keyed `last_key`): attaches its pending checkpoint for that boundary.
    pub(super) fn attach_checkpoints(&mut self, id: SeqId, registered: usize, last_key: u64) {
        let bs = self.block_size();
        let mut i = 0;
        while i < self.pending.list.len() {
            if self.pending.list[i].0 != id {
                i += 1;
                continue;
            }
            let (_, at, c) = self.pending.list.swap_remove(i);
            if at == registered * bs {
                self.prefix.attach_checkpoint(last_key, c);
            }
        }
    }
}
