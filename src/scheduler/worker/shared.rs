//! What a worker publishes for the handles (routing, load, health) without a round trip.

use crate::scheduler::state::Scheduler;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    healthy: AtomicBool,
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
            healthy: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    pub fn set_unhealthy(&self) {
        self.healthy.store(false, Ordering::Release);
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
