//! Faults inside an engine step (issue 21 §1): a panic at any stage of a step (forward pass,
//! sampling, output processing) ends the requests in flight with an error, is counted, and
//! the worker is rebuilt over the same weights so the engine serves again; a failed rebuild
//! leaves it unhealthy. Faults are injected with the engine's test hook (`STAGE@STEP`).

use crate::scheduler::{chat, collect, greedy, small_engine_with, wait_for, QUESTIONS};
use kiln::scheduler::{Event, FinishReason, Observer, RequestStream, SubmitError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts faults and the requests that ended with an error.
#[derive(Default)]
struct Faults {
    faults: AtomicUsize,
    errors: AtomicUsize,
}

impl Observer for Faults {
    fn on_fault(&self, _worker: usize) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    fn on_request(&self, r: &kiln::scheduler::RequestStats) {
        if r.finish_reasons.contains(&FinishReason::Error) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn last_event(mut s: RequestStream) -> Option<Event> {
    std::iter::from_fn(|| s.blocking_recv()).last()
}

#[test]
fn a_panic_at_any_stage_fails_the_requests_in_flight_and_the_worker_heals() {
    for stage in ["forward", "sample", "emit"] {
        let seen = Arc::new(Faults::default());
        let fault = format!("{stage}@3");
        let (e, tok) = small_engine_with(&[&fault], 4096, Arc::clone(&seen) as Arc<dyn Observer>);
        // Four requests in flight (four sample on the worker team together) when step 3
        // faults: every one ends with an error, none hangs.
        let streams: Vec<RequestStream> = (0..4)
            .map(|i| e.submit(greedy(chat(&tok, QUESTIONS[i]), 50)).unwrap())
            .collect();
        for s in streams {
            let last = last_event(s);
            assert!(
                matches!(last, Some(Event::Error { .. })),
                "{stage}: {last:?}"
            );
        }
        assert_eq!(seen.faults.load(Ordering::Relaxed), 1, "{stage}");
        assert_eq!(seen.errors.load(Ordering::Relaxed), 4, "{stage}");
        // Rebuilt: healthy and ready again, and a new request runs to its end.
        assert!(e.is_healthy(), "{stage}");
        wait_for("the rebuilt worker to be ready", || e.is_ready());
        let (outs, usage) = collect(e.submit(greedy(chat(&tok, "hi"), 4)).unwrap(), 1);
        assert!(
            matches!(
                outs[0].finish,
                Some(FinishReason::Stop | FinishReason::Length)
            ),
            "{stage}: {outs:?}"
        );
        assert!(usage.completion_tokens >= 1);
        // Nothing is left counted as waiting or running.
        wait_for("idle", || {
            let l = e.load();
            l.waiting == 0 && l.running == 0 && l.kv_blocks_used == 0
        });
        e.shutdown();
    }
}

#[test]
fn a_failed_rebuild_leaves_the_engine_unhealthy_and_refusing() {
    let seen = Arc::new(Faults::default());
    let (e, tok) = small_engine_with(
        &["forward@2", "rebuild@1"],
        4096,
        Arc::clone(&seen) as Arc<dyn Observer>,
    );
    let last = last_event(e.submit(greedy(chat(&tok, QUESTIONS[0]), 20)).unwrap());
    assert!(matches!(last, Some(Event::Error { .. })), "{last:?}");
    wait_for("the failed rebuild", || !e.is_healthy());
    assert!(!e.is_ready());
    assert!(matches!(
        e.submit(greedy(chat(&tok, "hi"), 4)),
        Err(SubmitError::Unavailable(_))
    ));
    assert_eq!(seen.faults.load(Ordering::Relaxed), 1);
    e.shutdown();
}
