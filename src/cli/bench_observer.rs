//! What recording costs, measured where it happens: an observer that times the observers it
//! wraps (`kiln bench --concurrency --metrics`). Robust to a busy machine in a way an A/B of
//! tokens/s is not: it counts only the engine thread's time inside the callbacks, against the
//! time of the steps they report.

use kiln::scheduler::{Observer, RequestStats, StepStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Times `inner`'s callbacks.
pub struct TimedObserver {
    inner: Arc<dyn Observer>,
    callback_ns: AtomicU64,
    calls: AtomicU64,
    steps: AtomicU64,
    step_ns: AtomicU64,
}

impl TimedObserver {
    pub fn new(inner: Arc<dyn Observer>) -> TimedObserver {
        TimedObserver {
            inner,
            callback_ns: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            step_ns: AtomicU64::new(0),
        }
    }

    fn timed(&self, f: impl FnOnce()) {
        let t0 = Instant::now();
        f();
        self.callback_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// `{calls, ns_per_call, ns_per_step, share_of_step_time}` so far.
    pub fn report(&self) -> serde_json::Value {
        let ns = self.callback_ns.load(Ordering::Relaxed) as f64;
        let calls = self.calls.load(Ordering::Relaxed).max(1) as f64;
        let steps = self.steps.load(Ordering::Relaxed).max(1) as f64;
        let step_ns = self.step_ns.load(Ordering::Relaxed).max(1) as f64;
        serde_json::json!({
            "calls": self.calls.load(Ordering::Relaxed),
            "ns_per_call": ns / calls,
            "ns_per_step": ns / steps,
            "share_of_step_time": ns / step_ns,
        })
    }
}

impl Observer for TimedObserver {
    fn on_step(&self, s: &StepStats) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.step_ns
            .fetch_add(s.duration.as_nanos() as u64, Ordering::Relaxed);
        self.timed(|| self.inner.on_step(s));
    }

    fn on_request(&self, r: &RequestStats) {
        self.timed(|| self.inner.on_request(r));
    }
}
