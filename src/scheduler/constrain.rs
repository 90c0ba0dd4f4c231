//! Grammar masks in a step: the constrained sequences' masks are computed on a helper thread
//! while the forward pass runs on the worker team (a mask needs the tokens so far, never the
//! logits), so constrained and free sequences share one batch and a free sequence's step time
//! grows only by what mask work outlasts the forward pass.

use crate::scheduler::state::SeqId;
use crate::structured::SeqConstraint;
use std::time::{Duration, Instant};

/// Masks a step computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskWork {
    /// Masks computed, and the helper thread's time computing them.
    pub masks: usize,
    pub compute: Duration,
    /// How long the step waited for masks after its forward pass ended.
    pub wait: Duration,
}

/// The constraints taken out of their sequences for the step.
pub type Pending = Vec<(SeqId, SeqConstraint)>;

/// Runs `forward` on this thread while a helper thread computes every pending mask; returns
/// `forward`'s result and the mask work (the constraints are updated in place). With nothing
/// pending no thread is started.
pub fn overlapped<R>(pending: &mut Pending, forward: impl FnOnce() -> R) -> (R, MaskWork) {
    if pending.is_empty() {
        return (forward(), MaskWork::default());
    }
    let masks = pending.len();
    std::thread::scope(|s| {
        let helper = s.spawn(|| {
            let t0 = Instant::now();
            for (_, c) in pending.iter_mut() {
                c.compute_mask();
            }
            t0.elapsed()
        });
        let r = forward();
        let t1 = Instant::now();
        // A panic inside the matcher is caught by llguidance and recorded as a failure; a
        // panic escaping the helper leaves the masks missing, which ends those sequences.
        let compute = helper.join().unwrap_or_default();
        let work = MaskWork {
            masks,
            compute,
            wait: t1.elapsed(),
        };
        (r, work)
    })
}
