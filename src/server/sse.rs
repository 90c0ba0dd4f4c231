//! Streaming responses as server-sent events, the same driver for every API family: an
//! endpoint's [`ChunkWriter`] shapes the events, this module drives them.
//!
//! Order: the writer's opening events (chat: the role; Anthropic: `message_start`), then the
//! events for each delta that carries text or logprobs, each choice's closing events, the
//! writer's closing events once every choice has ended (chat: the usage chunk when
//! `stream_options.include_usage` is set; Anthropic: `message_delta` and `message_stop`),
//! then the writer's terminator (`data: [DONE]` for OpenAI's chunk streams, nothing for the
//! typed-event APIs). A failure after the stream has begun (engine fault, request timeout)
//! is the writer's error event (OpenAI: `event: error` with the error envelope), then the
//! terminator. While nothing happens (queued, or a long prefill) a `: keep-alive` comment
//! goes out every `server.sse_keep_alive`.
//!
//! The driver owns the engine streams and the request's in-flight guard: when the client
//! disconnects, hyper drops the body, and with it the streams (aborting the requests).
//! Memory stays bounded for a slow reader: the engine aborts a request whose client leaves
//! `MAX_UNREAD_EVENTS` events unread.

use crate::scheduler::{Event, FinishReason, RequestStream, Timings, TokenLogprob, Usage};
use crate::server::access::{self, Note};
use crate::server::app_state::InFlight;
use crate::server::error::ApiError;
use crate::server::merged_events::{merge, next_event, Merged};
use crate::server::types::{TimingsBody, UsageBody};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;

/// Shapes one endpoint's events. `choice` is the response's choice index.
pub trait ChunkWriter: Send + 'static {
    /// Events sent before any token.
    fn opening(&mut self) -> Vec<SseEvent>;
    /// New text and logprobs of a choice as one event; None when there is nothing to send.
    /// The driver calls [`ChunkWriter::deltas`] only: a writer that overrides it (one delta
    /// may be several events) need not write this one, which by default sends nothing.
    fn delta(
        &mut self,
        _choice: usize,
        _text: String,
        _logprobs: &[TokenLogprob],
    ) -> Option<SseEvent> {
        None
    }
    /// The choice's last chunk.
    fn finished(&mut self, choice: usize, reason: FinishReason) -> SseEvent;
    /// The events for a delta, given its token ids too (a writer that reads tool calls may
    /// send several events, or none yet). By default [`ChunkWriter::delta`]'s.
    fn deltas(
        &mut self,
        choice: usize,
        _ids: &[u32],
        text: String,
        logprobs: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        self.delta(choice, text, logprobs).into_iter().collect()
    }
    /// The events ending a choice (text still held back first). By default
    /// [`ChunkWriter::finished`]'s.
    fn finish_chunks(&mut self, choice: usize, reason: FinishReason) -> Vec<SseEvent> {
        vec![self.finished(choice, reason)]
    }
    /// The events for prompt `prompt`'s logprobs (asked with the job's prompt output; they
    /// come before any delta). By default nothing.
    fn prompt_logprobs(&mut self, _prompt: usize, _scores: &[TokenLogprob]) -> Vec<SseEvent> {
        Vec::new()
    }
    /// Told, before the choice's closing events, which stop string ended it (Anthropic
    /// reports it). By default nothing.
    fn stopped_by(&mut self, _choice: usize, _stop: &str) {}
    /// The events once prompt `prompt`'s engine request is done, given its own counts and
    /// timings (llama-server's `/completion`: each prompt's final event). By default nothing.
    fn prompt_done(&mut self, _prompt: usize, _usage: Usage, _timings: &Timings) -> Vec<SseEvent> {
        Vec::new()
    }
    /// The events after every choice ended, given the request's usage and kiln's timings
    /// (OpenAI's chunk streams: the usage chunk, `choices: []`, when the client asked).
    fn closing(&mut self, usage: UsageBody, timings: TimingsBody) -> Vec<SseEvent>;
    /// The last event: OpenAI's chunk streams end with `data: [DONE]`.
    fn terminator(&mut self) -> Option<SseEvent> {
        Some(SseEvent::default().data("[DONE]"))
    }
    /// The event reporting a failure after the stream began (OpenAI: `event: error` whose
    /// data is the error envelope).
    fn error(&mut self, e: &ApiError) -> SseEvent {
        json_event(&e.envelope()).event("error")
    }
    /// Every event reporting such a failure (Responses: `error`, then `response.failed`). By
    /// default [`ChunkWriter::error`]'s.
    fn error_events(&mut self, e: &ApiError) -> Vec<SseEvent> {
        vec![self.error(e)]
    }
}

/// A JSON chunk (serialization of these plain structs cannot fail).
pub fn json_event<T: serde::Serialize>(value: &T) -> SseEvent {
    SseEvent::default()
        .json_data(value)
        .unwrap_or_else(|_| SseEvent::default().comment("unserializable chunk"))
}

enum State {
    Running,
    /// Only `[DONE]` is left.
    Closing,
    Ended,
}

struct Driver<W> {
    merged: Merged,
    n: usize,
    remaining: usize,
    writer: W,
    outbox: VecDeque<SseEvent>,
    usage: UsageBody,
    timings: TimingsBody,
    note: Note,
    deadline: Option<(Instant, Duration)>,
    state: State,
    _in_flight: InFlight,
}

impl<W: ChunkWriter> Driver<W> {
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.outbox.pop_front() {
                return Some(e);
            }
            match self.state {
                State::Ended => return None,
                State::Closing => {
                    self.state = State::Ended;
                    return self.writer.terminator();
                }
                State::Running => {}
            }
            if self.remaining == 0 {
                let timings = std::mem::take(&mut self.timings);
                let events = self.writer.closing(self.usage, timings);
                self.outbox.extend(events);
                self.state = State::Closing;
                continue;
            }
            let ev = match next_event(&mut self.merged, self.deadline).await {
                Ok(Some(ev)) => ev,
                Ok(None) => {
                    self.fail(ApiError::Internal(
                        "the engine stopped before the request finished".to_string(),
                    ));
                    continue;
                }
                Err(e) => {
                    self.fail(e);
                    continue;
                }
            };
            match ev {
                (
                    p,
                    Event::Delta {
                        choice,
                        ids,
                        text,
                        logprobs,
                    },
                ) => {
                    let chunks = self
                        .writer
                        .deltas(p * self.n + choice, &ids, text, &logprobs);
                    self.outbox.extend(chunks);
                }
                // A choice failed by the engine is reported once, by the error event.
                (
                    _,
                    Event::Finished {
                        reason: FinishReason::Error,
                        ..
                    },
                ) => {}
                (
                    p,
                    Event::Finished {
                        choice,
                        reason,
                        stop,
                    },
                ) => {
                    self.note.finished(reason);
                    if let Some(stop) = stop {
                        self.writer.stopped_by(p * self.n + choice, &stop);
                    }
                    let chunks = self.writer.finish_chunks(p * self.n + choice, reason);
                    self.outbox.extend(chunks);
                }
                (p, Event::Done { usage, timings }) => {
                    self.note.done(usage, &timings);
                    let events = self.writer.prompt_done(p, usage, &timings);
                    self.outbox.extend(events);
                    self.timings.add(&timings);
                    self.usage.add(usage);
                    self.remaining -= 1;
                }
                (p, Event::PromptLogprobs { logprobs }) => {
                    let events = self.writer.prompt_logprobs(p, &logprobs);
                    self.outbox.extend(events);
                }
                // No streamed route asks for an embedding.
                (_, Event::Embedding { .. }) => {}
                (_, Event::Error { message }) => self.fail(ApiError::Internal(message)),
            }
        }
    }

    /// Ends the stream with an error event; the other engine requests are aborted.
    fn fail(&mut self, e: ApiError) {
        self.merged = merge(Vec::new());
        let events = self.writer.error_events(&e);
        self.outbox.extend(events);
        self.state = State::Closing;
    }
}

/// How a stream is run.
pub struct StreamSettings {
    /// Choices per engine request.
    pub n: usize,
    /// When the request is aborted, and the limit to report.
    pub deadline: Option<(Instant, Duration)>,
    pub keep_alive: Duration,
}

/// The SSE response for `streams`; see the module docs.
pub fn respond<W: ChunkWriter>(
    streams: Vec<RequestStream>,
    writer: W,
    settings: StreamSettings,
    in_flight: InFlight,
) -> Response {
    let mut driver = Driver {
        remaining: streams.len(),
        merged: merge(streams),
        n: settings.n,
        writer,
        outbox: VecDeque::new(),
        usage: UsageBody::default(),
        timings: TimingsBody::default(),
        note: access::current(),
        deadline: settings.deadline,
        state: State::Running,
        _in_flight: in_flight,
    };
    driver.outbox.extend(driver.writer.opening());
    let events = futures_util::stream::unfold(driver, |mut d| async move {
        d.next().await.map(|e| (Ok::<_, Infallible>(e), d))
    });
    let mut resp = Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(settings.keep_alive)
                .text("keep-alive"),
        )
        .into_response();
    // Proxies (nginx) must not buffer the stream.
    resp.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    resp
}
