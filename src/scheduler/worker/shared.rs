//! What a worker publishes for the handles (routing, load, health) without a round trip.

use crate::scheduler::state::Scheduler;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// Where a worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Running steps (or idle, waiting for work).
    Serving,
    /// A fault ended every request it held; it is building a new KV cache, scratch and
    /// worker team over the same weights. Requests sent meanwhile wait in its channel.
    Rebuilding,
    /// It stopped: the rebuild failed, or the thread ended. It refuses everything.
    Failed,
}

/// Numbers a worker publishes for handles (routing, load, health) without a round trip.
pub(crate) struct WorkerShared {
    /// Requests on this worker (queued or running): the router's load measure.
    pub active: AtomicUsize,
    /// Sequences running.
    pub running: AtomicUsize,
    /// KV blocks held by sequences (blocks only the prefix cache holds count as free: they are
    /// evicted on demand), and blocks only the prefix cache holds.
    pub kv_used: AtomicUsize,
    pub kv_cached: AtomicUsize,
    pub kv_total: usize,
    state: AtomicU8,
    stopping: AtomicBool,
}

impl WorkerShared {
    pub fn new(kv_total: usize) -> WorkerShared {
        WorkerShared {
            active: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            kv_used: AtomicUsize::new(0),
            kv_cached: AtomicUsize::new(0),
            kv_total,
            state: AtomicU8::new(WorkerState::Serving as u8),
            stopping: AtomicBool::new(false),
        }
    }

    pub fn state(&self) -> WorkerState {
        match self.state.load(Ordering::Acquire) {
            0 => WorkerState::Serving,
            1 => WorkerState::Rebuilding,
            _ => WorkerState::Failed,
        }
    }

    pub fn set_state(&self, s: WorkerState) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// Not failed: serving, or rebuilding after a fault.
    pub fn is_healthy(&self) -> bool {
        self.state() != WorkerState::Failed
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Publishes `sched`'s load; returns (used by sequences, cached only, total) blocks so a
    /// step's stats reuse them.
    pub(super) fn publish_load<T>(&self, sched: &Scheduler<T>) -> (usize, usize, usize) {
        let (used, total) = sched.kv_blocks();
        let cached = sched.kv_cached_evictable();
        self.running.store(sched.n_running(), Ordering::Relaxed);
        self.kv_used.store(used - cached, Ordering::Relaxed);
        self.kv_cached.store(cached, Ordering::Relaxed);
        (used - cached, cached, total)
    }
}
