//! llama-server's stream: one `data: {...}` event per delta (`content`, `tokens`, `stop:
//! false`, and `completion_probabilities` with `n_probs`), then per result a last event with
//! `stop: true` and the totals (`stop_type`, `timings`, `generation_settings`...). No
//! `[DONE]`; a failure after the start is `data: {"error": {...}}`.

use super::Shared;
use crate::scheduler::{FinishReason, Timings, TokenLogprob, Usage};
use crate::server::error::ApiError;
use crate::server::sse::{json_event, ChunkWriter};
use crate::server::types::llama::LlamaCompletionResult;
use crate::server::types::{TimingsBody, UsageBody};
use axum::response::sse::Event as SseEvent;

/// Per result: how it ended, what it generated.
#[derive(Default, Clone)]
struct Progress {
    finish: Option<FinishReason>,
    stop: Option<String>,
    predicted: usize,
    new_line: bool,
}

pub(crate) struct LlamaWriter {
    shared: Shared,
    progress: Vec<Progress>,
}

impl LlamaWriter {
    pub fn new(shared: Shared) -> LlamaWriter {
        let results = shared.prompt_lens.len() * shared.n;
        LlamaWriter {
            shared,
            progress: vec![Progress::default(); results],
        }
    }
}

impl ChunkWriter for LlamaWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        Vec::new()
    }

    fn delta(&mut self, choice: usize, text: String, lps: &[TokenLogprob]) -> Option<SseEvent> {
        self.deltas(choice, &[], text, lps).into_iter().next()
    }

    fn deltas(
        &mut self,
        choice: usize,
        ids: &[u32],
        text: String,
        lps: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        if text.is_empty() && ids.is_empty() {
            return Vec::new();
        }
        if let Some(p) = self.progress.get_mut(choice) {
            p.predicted += ids.len();
            p.new_line |= text.contains('\n');
        }
        vec![json_event(&LlamaCompletionResult {
            index: choice,
            content: text,
            tokens: ids.to_vec(),
            id_slot: -1,
            stop: false,
            completion_probabilities: self.shared.probs(lps),
            ..LlamaCompletionResult::default()
        })]
    }

    fn finished(&mut self, choice: usize, reason: FinishReason) -> SseEvent {
        if let Some(p) = self.progress.get_mut(choice) {
            p.finish = Some(reason);
        }
        SseEvent::default().comment("finished")
    }

    // The last event of a result goes out with its prompt's totals (`prompt_done`).
    fn finish_chunks(&mut self, choice: usize, reason: FinishReason) -> Vec<SseEvent> {
        if let Some(p) = self.progress.get_mut(choice) {
            p.finish = Some(reason);
        }
        Vec::new()
    }

    fn stopped_by(&mut self, choice: usize, stop: &str) {
        if let Some(p) = self.progress.get_mut(choice) {
            p.stop = Some(stop.to_string());
        }
    }

    fn prompt_done(&mut self, prompt: usize, usage: Usage, timings: &Timings) -> Vec<SseEvent> {
        let n = self.shared.n;
        let mut body = TimingsBody::default();
        body.add(timings);
        (prompt * n..(prompt + 1) * n)
            .filter_map(|i| {
                let p = self.progress.get(i)?.clone();
                let mut r = self
                    .shared
                    .last(i, p.finish, p.stop, p.predicted, usage, &body);
                r.has_new_line = Some(p.new_line);
                Some(json_event(&r))
            })
            .collect()
    }

    fn closing(&mut self, _usage: UsageBody, _timings: TimingsBody) -> Vec<SseEvent> {
        Vec::new()
    }

    fn terminator(&mut self) -> Option<SseEvent> {
        None
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        json_event(&e.envelope())
    }
}
