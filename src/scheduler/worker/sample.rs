//! Sampling a step's rows: each sequence with its own seeded sampler, under its grammar's
//! mask when it has one; several sequences in parallel on the worker team.

use super::Worker;
use crate::scheduler::fault::FaultStage;
use crate::scheduler::sampling::{SampleScratch, Sampled, Sampler};
use crate::scheduler::state::SeqId;
use crate::structured::SeqConstraint;
use std::sync::Mutex;

/// Why a sequence got no token: an error for its request, never a made-up token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoToken {
    /// The grammar's mask (with the bias and penalties) left no candidate.
    Masked,
    /// The sequence had no sampler (an internal error).
    NoSampler,
}

impl NoToken {
    pub fn message(self) -> &'static str {
        match self {
            NoToken::Masked => {
                "no token could be sampled: the output constraint and logit_bias leave none"
            }
            NoToken::NoSampler => "internal error: the sequence has no sampler",
        }
    }
}

/// A sequence's draw.
pub(super) type Draw = Result<Sampled, NoToken>;

/// Draws one token from `row` under `constraint`'s mask.
fn draw(
    sampler: Option<&mut Sampler>,
    constraint: Option<&SeqConstraint>,
    row: &[f32],
    sc: &mut SampleScratch,
) -> Draw {
    let sampler = sampler.ok_or(NoToken::NoSampler)?;
    let allowed = constraint.and_then(SeqConstraint::allowed);
    sampler
        .sample_masked(row, allowed, sc)
        .ok_or(NoToken::Masked)
}

impl Worker {
    /// Samples each `(sequence, row)` of `batch` from `rows`, in parallel on the worker team
    /// when there are several. Each sequence's sampler is its own (seeded per sequence), so
    /// the result does not depend on which thread ran it.
    pub(super) fn sample_many(
        &mut self,
        batch: &[(SeqId, usize)],
        rows: &[f32],
        n_vocab: usize,
    ) -> Vec<Draw> {
        type Job = (Option<Sampler>, Option<SeqConstraint>, Option<Draw>);
        let mut jobs: Vec<Mutex<Job>> = batch
            .iter()
            .map(|&(sid, _)| match self.sched.seq_mut(sid) {
                Some(s) => {
                    Mutex::new((s.payload.sampler.take(), s.payload.constraint.take(), None))
                }
                None => Mutex::new((None, None, None)),
            })
            .collect();
        let scratch = &self.sample_scratch;
        let faults = &self.faults;
        let job = |t: usize, w: usize| {
            faults.check(FaultStage::Sample);
            let k = batch[t].1;
            let mut j = jobs[t].lock().unwrap_or_else(|e| e.into_inner());
            let mut sc = scratch[w].lock().unwrap_or_else(|e| e.into_inner());
            let (sampler, constraint, out) = &mut *j;
            let row = &rows[k * n_vocab..(k + 1) * n_vocab];
            *out = Some(draw(sampler.as_mut(), constraint.as_ref(), row, &mut sc));
        };
        if batch.len() >= 4 {
            self.model.team().run(batch.len(), &job);
        } else {
            (0..batch.len()).for_each(|t| job(t, 0));
        }
        let mut out = Vec::with_capacity(batch.len());
        for (&(sid, _), j) in batch.iter().zip(jobs.iter_mut()) {
            let (sampler, constraint, drawn) =
                std::mem::take(j.get_mut().unwrap_or_else(|e| e.into_inner()));
            if let Some(s) = self.sched.seq_mut(sid) {
                s.payload.sampler = sampler;
                s.payload.constraint = constraint;
            }
            out.push(drawn.unwrap_or(Err(NoToken::NoSampler)));
        }
        out
    }

    /// Samples sequence `sid` from `row` (None when the sequence is gone).
    pub(super) fn sample_one(&mut self, sid: SeqId, row: &[f32]) -> Option<Draw> {
        self.faults.check(FaultStage::Sample);
        let s = self.sched.seq_mut(sid)?;
        let mut sc = self.sample_scratch[0]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let p = &mut s.payload;
        Some(draw(
            p.sampler.as_mut(),
            p.constraint.as_ref(),
            row,
            &mut sc,
        ))
    }
}
