//! Sampling a step's rows: each sequence with its own seeded sampler, under its grammar's
//! mask when it has one; several sequences in parallel on the worker team.

use super::Worker;
use crate::scheduler::sampling::{Sampled, Sampler};
use crate::scheduler::state::SeqId;
use crate::structured::SeqConstraint;
use std::sync::Mutex;

impl Worker {
    /// Samples each `(sequence, row)` of `batch` from `rows`, in parallel on the worker team
    /// when there are several. Each sequence's sampler is its own (seeded per sequence), so
    /// the result does not depend on which thread ran it.
    pub(super) fn sample_many(
        &mut self,
        batch: &[(SeqId, usize)],
        rows: &[f32],
        n_vocab: usize,
    ) -> Vec<Sampled> {
        type Job = (Option<Sampler>, Option<SeqConstraint>, Option<Sampled>);
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
        let job = |t: usize, w: usize| {
            let k = batch[t].1;
            let mut j = jobs[t].lock().unwrap_or_else(|e| e.into_inner());
            let mut sc = scratch[w].lock().unwrap_or_else(|e| e.into_inner());
            let (sampler, constraint, out) = &mut *j;
            if let Some(sp) = sampler.as_mut() {
                let allowed = constraint.as_ref().and_then(SeqConstraint::allowed);
                *out =
                    Some(sp.sample_masked(&rows[k * n_vocab..(k + 1) * n_vocab], allowed, &mut sc));
            }
        };
        if batch.len() >= 4 {
            self.model.pool().run(batch.len(), &job);
        } else {
            (0..batch.len()).for_each(|t| job(t, 0));
        }
        let mut out = Vec::with_capacity(batch.len());
        for (&(sid, _), j) in batch.iter().zip(jobs.iter_mut()) {
            let (sampler, constraint, sampled) =
                std::mem::take(j.get_mut().unwrap_or_else(|e| e.into_inner()));
            if let Some(s) = self.sched.seq_mut(sid) {
                s.payload.sampler = sampler;
                s.payload.constraint = constraint;
            }
            out.push(sampled.unwrap_or(Sampled {
                id: 0,
                logprob: 0.0,
                top: Vec::new(),
            }));
        }
        out
    }

    pub(super) fn sample_one(&mut self, sid: SeqId, row: &[f32]) -> Option<Sampled> {
        let s = self.sched.seq_mut(sid)?;
        let mut sc = self.sample_scratch[0]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let allowed = s
            .payload
            .constraint
            .as_ref()
            .and_then(SeqConstraint::allowed);
        Some(
            s.payload
                .sampler
                .as_mut()?
                .sample_masked(row, allowed, &mut sc),
        )
    }
}
