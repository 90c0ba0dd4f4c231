//! Verifying a step's guesses (speculative decoding, see [`crate::scheduler::speculative`]):
//! a verify item's rows are sampled in order, each exactly as the plain run would sample its
//! token, while the drawn token equals the guess.

use super::output::req_of;
use super::Worker;
use crate::scheduler::state::PlanItem;

/// Guesses a step verified, and how many of them it kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Guesses {
    pub drafted: usize,
    pub accepted: usize,
}

impl Worker {
    /// Runs verify item `it` over its rows (`1 + it.draft` of them, `n_vocab` each): for row
    /// `j`, one more position is computed (the last token, then guess `j`), the sequence's
    /// sampler draws from the row under its grammar's mask for that point (row 0's was
    /// computed beside the forward pass, the next ones here, after the previous token's
    /// commit), and output processing takes the token (stop strings, length, grammar,
    /// logprobs, the client's presence). The run goes on only while the drawn token is the
    /// guess and the sequence lives. Returns the guesses kept.
    pub(super) fn verify(&mut self, it: &PlanItem, rows: &[f32], n_vocab: usize) -> usize {
        let sid = it.seq;
        let Some(s) = self.sched.seq(sid) else {
            return 0;
        };
        let draft = s.draft().to_vec();
        let mut kept = 0;
        for (j, row) in rows.chunks_exact(n_vocab).enumerate() {
            self.sched.advance(sid, 1);
            if j > 0 {
                if let Some(c) = self
                    .sched
                    .seq_mut(sid)
                    .and_then(|s| s.payload.constraint.as_mut())
                {
                    c.compute_mask();
                }
            }
            let Some(drawn) = self.sample_one(sid, row) else {
                break;
            };
            let token = drawn.as_ref().ok().map(|d| d.id);
            self.outputs.emit(&mut self.sched, sid, drawn);
            if j >= draft.len() || token != Some(draft[j]) {
                break;
            }
            kept += 1;
            if self.sched.seq(sid).is_none() {
                break;
            }
        }
        self.sched.verified(sid, draft.len(), kept);
        self.outputs.add_guesses(req_of(sid), draft.len(), kept);
        kept
    }
}
