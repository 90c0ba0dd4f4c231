//! Requests waiting for the disk tier: a prompt whose prefix the pool and the RAM tier do not
//! hold is parked here while the tier's reader thread reads the missing blocks, and queued in
//! the scheduler once the answer comes (its blocks then in the RAM tier, so its lookup restores
//! them). The worker keeps stepping the other sequences meanwhile: a slow disk delays only
//! the requests that wait for it. The scheduler never sees a parked request; the reader's
//! answer is an input like a command.

use super::{Submission, Worker, WorkerState};
use crate::scheduler::prefix_cache::namespace_root;
use crate::scheduler::request::FinishReason;

/// A request waiting for its disk read.
pub(super) struct Parked {
    pub(super) sub: Submission,
    /// Aborted while waiting: ended as soon as it is admitted.
    pub(super) aborted: bool,
}

impl Worker {
    /// Admits `sub`, or parks it while the disk tier reads blocks of its prompt (not for a
    /// request that wants every prompt row: it computes them all anyway).
    pub(super) fn admit_or_park(&mut self, sub: Submission) {
        if self.shared.state() != WorkerState::Failed && !sub.req.prompt_output.wants_rows() {
            let ns = sub
                .req
                .api_key_id
                .filter(|_| self.cfg.tiers.namespace_by_key);
            if self.request_from_disk(sub.id, namespace_root(ns), &sub.req.prompt) {
                self.parked.push(Parked {
                    sub,
                    aborted: false,
                });
                // Monitoring sees it waiting even while no step runs.
                self.observer.on_tiers(&self.tier_stats());
                return;
            }
        }
        self.admit(sub);
    }

    /// Admits the parked requests whose disk reads finished (an aborted one is ended right
    /// away, as an abort of a queued request is).
    pub(super) fn admit_loaded(&mut self) {
        let ids = self.finished_disk_reads();
        for &id in &ids {
            let Some(i) = self.parked.iter().position(|p| p.sub.id == id) else {
                continue;
            };
            let p = self.parked.remove(i);
            self.admit(p.sub);
            if p.aborted {
                self.outputs
                    .abort_request(&mut self.sched, id, FinishReason::Abort);
            }
        }
        if !ids.is_empty() {
            // Monitoring sees the wait end even while no step runs.
            self.observer.on_tiers(&self.tier_stats());
        }
    }

    /// Marks parked request `id` (every one, with None) aborted; false when `id` is not
    /// parked.
    pub(super) fn abort_parked(&mut self, id: Option<u64>) -> bool {
        let mut found = false;
        for p in &mut self.parked {
            if id.is_none_or(|id| id == p.sub.id) {
                p.aborted = true;
                found = true;
            }
        }
        found
    }

    /// Whether requests wait for the disk.
    pub(super) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Admits every parked request without its disk blocks (the worker is stopping: they are
    /// then aborted with the rest).
    pub(super) fn admit_parked_now(&mut self) {
        for p in std::mem::take(&mut self.parked) {
            self.admit(p.sub);
        }
    }
}
