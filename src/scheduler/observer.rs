//! What the scheduler reports for monitoring: plain numbers handed to an [`Observer`]. No
//! metrics library types live here; the metrics layer implements the trait.

use crate::scheduler::request::FinishReason;
use crate::scheduler::speculative::SpecMethod;
use std::time::Duration;

/// The kind of work a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// Prompt tokens only.
    Prefill,
    /// One token per sequence only.
    Decode,
    /// Both.
    Mixed,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Prefill => "prefill",
            StepKind::Decode => "decode",
            StepKind::Mixed => "mixed",
        }
    }
}

/// One engine step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Which engine worker ran it.
    pub worker: usize,
    pub phase: StepKind,
    /// Sequences and new tokens in the batch.
    pub seqs: usize,
    pub tokens: usize,
    /// Of `tokens`, prompt (or recomputed) tokens and decode tokens.
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    /// The forward pass plus sampling.
    pub duration: Duration,
    /// After the step: sequences running and waiting on this worker.
    pub running: usize,
    pub waiting: usize,
    /// After the step: KV blocks held by sequences, blocks only the prefix cache holds (free
    /// to evict, so not counted as used), and the pool's size.
    pub kv_blocks_used: usize,
    pub kv_blocks_cached: usize,
    pub kv_blocks_total: usize,
    /// Preemptions while planning this step.
    pub preemptions: usize,
    /// Prefix-cache lookups and hits (lookups that reused blocks) in this step.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    /// Grammar masks computed for this step (constrained sequences), the time computing them
    /// (overlapped with the forward pass), and how long the step waited for them after it.
    pub masks: usize,
    pub mask_time: Duration,
    pub mask_wait: Duration,
    /// Speculative decoding: where the step's guesses came from, how many were verified
    /// (`drafted`) and how many of those were kept (`accepted`: tokens the model produced
    /// without a step of their own).
    pub spec_method: SpecMethod,
    pub drafted: usize,
    pub accepted: usize,
}

/// One finished request (all its choices).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestStats {
    /// From submission to its first scheduled step.
    pub queue: Duration,
    /// From submission to its first generated token (None if none was generated).
    pub ttft: Option<Duration>,
    /// Every gap between two consecutive tokens of a choice.
    pub itl: Vec<Duration>,
    /// From submission to the end.
    pub duration: Duration,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    /// One per choice.
    pub finish_reasons: Vec<FinishReason>,
    pub preemptions: u32,
}

/// Receives the scheduler's numbers. Called on the engine thread: keep it cheap and
/// non-blocking.
pub trait Observer: Send + Sync {
    fn on_step(&self, _step: &StepStats) {}
    fn on_request(&self, _req: &RequestStats) {}
    /// Engine worker `worker` caught a fault (a panic or an error in a step); it ended the
    /// requests it held with an error and is rebuilding.
    fn on_fault(&self, _worker: usize) {}
    /// The prefix cache's tiers after a step of `worker` (sizes now, counters since start).
    fn on_tiers(&self, _tiers: &TierStats) {}
    /// `blocks` were copied from `tier` into the KV pool (RAM) or into RAM (disk) in `took`.
    fn on_tier_restore(&self, _tier: CacheTier, _blocks: usize, _took: Duration) {}
    /// The disk tier wrote a block in `took`, `since_queued` after the step queued it.
    fn on_disk_write(&self, _took: Duration, _since_queued: Duration) {}
}

/// A tier of the prefix cache below the KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheTier {
    Ram,
    Disk,
}

impl CacheTier {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTier::Ram => "ram",
            CacheTier::Disk => "disk",
        }
    }
}

/// One worker's prefix-cache tiers: the KV pool's cached blocks (`pool_*`), the RAM tier and
/// the disk tier. Lookup counters are since start: a tier "hits" when it served at least one
/// block of a lookup that reached it, and "misses" when it served none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierStats {
    pub worker: usize,
    pub pool_hits: u64,
    pub pool_misses: u64,
    pub ram_hits: u64,
    pub ram_misses: u64,
    pub disk_hits: u64,
    pub disk_misses: u64,
    pub ram_blocks: u64,
    pub ram_bytes: u64,
    pub disk_blocks: u64,
    pub disk_bytes: u64,
    /// Blocks moved from the pool to RAM, written to disk, not written (queue full or
    /// degraded), disk files refused by a check, failed writes.
    pub spilled: u64,
    pub disk_written: u64,
    pub disk_skipped: u64,
    pub disk_rejected: u64,
    pub disk_write_errors: u64,
    /// The disk tier is configured but cannot write (RAM only for now).
    pub disk_degraded: bool,
    /// Requests waiting for the disk tier's reader before they are queued.
    pub disk_waiting: u64,
}

/// An observer that records nothing.
pub struct NoopObserver;

impl Observer for NoopObserver {}

/// Hands every report to each of several observers, in order.
pub struct Fanout(pub Vec<std::sync::Arc<dyn Observer>>);

impl Observer for Fanout {
    fn on_step(&self, step: &StepStats) {
        for o in &self.0 {
            o.on_step(step);
        }
    }

    fn on_request(&self, req: &RequestStats) {
        for o in &self.0 {
            o.on_request(req);
        }
    }

    fn on_fault(&self, worker: usize) {
        for o in &self.0 {
            o.on_fault(worker);
        }
    }

    fn on_tiers(&self, tiers: &TierStats) {
        for o in &self.0 {
            o.on_tiers(tiers);
        }
    }

    fn on_tier_restore(&self, tier: CacheTier, blocks: usize, took: Duration) {
        for o in &self.0 {
            o.on_tier_restore(tier, blocks, took);
        }
    }

    fn on_disk_write(&self, took: Duration, since_queued: Duration) {
        for o in &self.0 {
            o.on_disk_write(took, since_queued);
        }
    }
}
