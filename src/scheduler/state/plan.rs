//! What the scheduler hands the worker for one step.

use super::SeqId;
use crate::scheduler::prefix_cache::{Restore, Spill, StateCopy};

/// One sequence in a step: run `tokens[start..start + len]` at positions `start..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanItem {
    pub seq: SeqId,
    pub start: usize,
    pub len: usize,
    /// The last of these tokens is the sequence's last: its logits give the next token.
    pub logits: bool,
    /// Every one of these tokens needs its logits row (prompt logprobs); with `logits`, the
    /// last of them is also the row sampled from.
    pub rows: bool,
    /// Guessed tokens to verify (speculative decoding): the item runs the sequence's last
    /// token and then its [`super::Seq::draft`], `len = 1 + draft`, at positions `start..`, with a
    /// logits row at each (see [`crate::scheduler::speculative`]); 0 for every other item.
    pub draft: usize,
}

impl PlanItem {
    /// Logits rows this item produces.
    pub fn logit_rows(&self) -> usize {
        if self.rows || self.draft > 0 {
            self.len
        } else {
            usize::from(self.logits)
        }
    }
}

/// One step to execute, in this order: the spills (evicted prefix-cache blocks copied out to
/// the RAM tier, before anything writes their freed pages), the restores (RAM-tier blocks
/// written into fresh pages), the block copies (copy on write, `(src, dst)`), the state
/// restores, then one forward call over `items`, then the state saves. Spills are in the plan
/// even when it has no items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    pub items: Vec<PlanItem>,
    pub spills: Vec<Spill>,
    pub restores: Vec<Restore>,
    pub copies: Vec<(u32, u32)>,
    /// Recurrent-state copies (see `super::checkpoints`): restores before the forward pass, saves
    /// after it.
    pub state_copies: Vec<StateCopy>,
    /// Sequences preempted while planning (back in the queue, blocks freed).
    pub preempted: Vec<SeqId>,
}

impl StepPlan {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// New tokens in the step.
    pub fn tokens(&self) -> usize {
        self.items.iter().map(|i| i.len).sum()
    }
}
