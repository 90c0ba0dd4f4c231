//! What a generation request adds to its access-log line. The request-id middleware opens a
//! [`Note`] for every request and keeps it for the request's task (a task-local); the code
//! that reads the engine's events (`merged_events::collect`, the SSE driver) takes it with [`current`]
//! while the handler runs and records into it; the access line reads it when the response
//! body ends. Requests that generate nothing leave it empty.

use crate::scheduler::{FinishReason, Timings, Usage};
use crate::server::types::{TimingsBody, UsageBody};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// The generation side of one request: token counts, timings and finish reasons.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generation {
    pub usage: UsageBody,
    pub timings: TimingsBody,
    /// Each distinct finish reason, in the order first seen.
    pub finish: Vec<FinishReason>,
}

impl Generation {
    /// `stop`, or the distinct reasons joined by commas (`stop,length`).
    pub fn finish_str(&self) -> String {
        let names: Vec<&str> = self.finish.iter().map(|f| f.as_str()).collect();
        names.join(",")
    }
}

/// A request's shared record; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Note(Arc<Mutex<Option<Generation>>>);

impl Note {
    fn with(&self, f: impl FnOnce(&mut Generation)) {
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(g.get_or_insert_with(Generation::default));
    }

    /// One engine request ended.
    pub fn done(&self, usage: Usage, timings: &Timings) {
        self.with(|g| {
            g.usage.add(usage);
            g.timings.add(timings);
        });
    }

    /// A choice ended.
    pub fn finished(&self, reason: FinishReason) {
        self.with(|g| {
            if !g.finish.contains(&reason) {
                g.finish.push(reason);
            }
        });
    }

    /// What was recorded; None when the request generated nothing.
    pub fn take(&self) -> Option<Generation> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

tokio::task_local! {
    static NOTE: Note;
}

/// Runs `fut` (a request's handling) with `note` as its [`current`] note.
pub async fn scope<F: Future>(note: Note, fut: F) -> F::Output {
    NOTE.scope(note, fut).await
}

/// The note of the request being handled, or a detached one outside the middleware (tests,
/// other callers): recording into it is then harmless.
pub fn current() -> Note {
    NOTE.try_with(Note::clone).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn timings(queue_ms: u64, ttft_ms: Option<u64>, gaps: &[u64]) -> Timings {
        Timings {
            queue: Duration::from_millis(queue_ms),
            ttft: ttft_ms.map(Duration::from_millis),
            itl: gaps.iter().copied().map(Duration::from_millis).collect(),
            duration: Duration::from_millis(100),
        }
    }

    #[tokio::test]
    async fn records_reach_the_middleware_and_combine_over_prompts() {
        let note = Note::default();
        scope(note.clone(), async {
            let n = current();
            let u = Usage {
                prompt_tokens: 5,
                cached_tokens: 2,
                completion_tokens: 3,
                ..Usage::default()
            };
            n.finished(FinishReason::Stop);
            n.done(u, &timings(4, Some(30), &[10, 12]));
            n.finished(FinishReason::Length);
            n.finished(FinishReason::Stop);
            n.done(u, &timings(9, Some(20), &[11]));
        })
        .await;
        let g = note.take().expect("recorded");
        assert_eq!(g.usage.prompt_tokens, 10);
        assert_eq!(g.usage.completion_tokens, 6);
        assert_eq!(g.usage.prompt_tokens_details.cached_tokens, 4);
        assert_eq!(g.timings.queue_ms, 9.0);
        assert_eq!(g.timings.ttft_ms, Some(20.0));
        assert_eq!(g.timings.itl_ms, vec![10.0, 12.0, 11.0]);
        assert_eq!(g.finish_str(), "stop,length");
        assert!(note.take().is_none(), "taken once");
    }

    #[tokio::test]
    async fn outside_a_request_recording_is_harmless() {
        // Outside the middleware's scope, `current` hands out a detached note: what is
        // recorded stays in it and reaches no request's access line.
        let detached = current();
        detached.finished(FinishReason::Stop);
        assert!(current().take().is_none(), "a later note is fresh");
        let request = Note::default();
        scope(request.clone(), async {}).await;
        detached.finished(FinishReason::Length);
        assert!(request.take().is_none(), "a request's note stays empty");
        let g = detached.take().expect("the detached note kept its record");
        assert_eq!(g.finish, vec![FinishReason::Stop, FinishReason::Length]);
    }
}
