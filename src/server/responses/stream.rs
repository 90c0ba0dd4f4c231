//! A response streamed as the Responses API's typed events, each `event: <type>` with a JSON
//! `data` carrying the same `type` and a `sequence_number` counting from 0:
//!
//! `response.created`, `response.in_progress`; per output item in order
//! `response.output_item.added`, then for a reasoning item `response.content_part.added`,
//! `response.reasoning_text.delta`..., `response.reasoning_text.done`,
//! `response.content_part.done`; for a message the same with `response.output_text.*`; for a
//! function call `response.function_call_arguments.delta`... and `.done`; then
//! `response.output_item.done`. Last `response.completed`, or `response.incomplete` (with
//! `incomplete_details`) when `max_output_tokens` cut the reply. A failure after the start is
//! an `error` event then `response.failed`. No `[DONE]`.
//!
//! The reply is read as chat reads it (the same reasoning splitter and tool-call reader), so a
//! streamed response's output equals the whole one's.

use super::{item_status, stored_turn, usage_of, Finish, Keep};
use crate::random::random_id;
use crate::scheduler::{FinishReason, TokenLogprob};
use crate::server::app_state::{AppState, Runtime};
use crate::server::error::ApiError;
use crate::server::logprobs::chat_entries;
use crate::server::reply::reply_syntax;
use crate::server::response_store::Stored;
use crate::server::sse::{json_event, ChunkWriter};
use crate::server::types::responses::*;
use crate::server::types::{ChatTokenLogprob, TimingsBody, UsageBody};
use crate::structured::reasoning::{ReasoningSplit, ThinkStart};
use crate::structured::syntax::SyntaxTokens;
use crate::structured::tools::{CallReading, ToolDelta, ToolStream};
use axum::response::sse::Event as SseEvent;
use serde_json::{json, Value};
use std::sync::Arc;

/// The item being streamed.
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
        logprobs: Vec<ChatTokenLogprob>,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// The writer of one response's events (Responses has no `n`: one choice).
pub struct ResponsesWriter {
    state: AppState,
    rt: Arc<Runtime>,
    /// The response as it was created (`in_progress`, no output).
    template: ResponseObject,
    thinker: Option<ReasoningSplit>,
    reader: Option<ToolStream>,
    syntax: SyntaxTokens,
    /// Where it is stored when done (None: `store: false`).
    keep: Option<Keep>,
    seq: u64,
    open: Option<Open>,
    /// The items done, in order.
    output: Vec<OutputItem>,
    /// All reasoning text so far (its tokens are counted at the end).
    reasoning: String,
    finish: Finish,
    /// Report the tokens' logprobs (on the text events and the text part).
    logprobs: bool,
    /// Logprobs of tokens whose text has not gone out yet.
    pending: Vec<TokenLogprob>,
}

impl ResponsesWriter {
    /// The writer for a reply read as `read_calls` and `think` say (as chat reads it).
    pub fn new(
        state: AppState,
        rt: Arc<Runtime>,
        template: ResponseObject,
        read_calls: Option<CallReading>,
        think: Option<ThinkStart>,
        keep: Option<Keep>,
        logprobs: bool,
    ) -> ResponsesWriter {
        let reader =
            read_calls.map(|r| ToolStream::new(r.format, r.forced, Arc::clone(&rt.tokenizer)));
        let syntax = reply_syntax(&rt, read_calls);
        ResponsesWriter {
            state,
            rt,
            template,
            thinker: think.map(ReasoningSplit::new),
            reader,
            syntax,
            keep,
            seq: 0,
            open: None,
            output: Vec::new(),
            reasoning: String::new(),
            finish: Finish::Completed,
            logprobs,
            pending: Vec::new(),
        }
    }

    /// An event of type `kind` with `fields` and the next sequence number.
    fn event(&mut self, kind: &'static str, mut fields: Value) -> SseEvent {
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.seq);
        self.seq += 1;
        json_event(&fields).event(kind)
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Closes the open item (its status from `incomplete`).
    fn close(&mut self, incomplete: bool, out: &mut Vec<SseEvent>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let i = self.index();
        let status = if incomplete {
            "incomplete"
        } else {
            "completed"
        }
        .to_string();
        let item = match open {
            Open::Reasoning { id, text } => {
                let part = OutputContent::ReasoningText { text: text.clone() };
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                ));
                OutputItem::Reasoning {
                    id,
                    summary: Vec::new(),
                    content: vec![part],
                    status,
                }
            }
            Open::Message {
                id,
                text,
                mut logprobs,
            } => {
                // Tokens after the last text (an end of turn) count too.
                let rest = std::mem::take(&mut self.pending);
                logprobs.extend(chat_entries(&self.rt.tokenizer, &rest));
                let part = OutputContent::OutputText {
                    text: text.clone(),
                    annotations: Vec::new(),
                    logprobs: logprobs.clone(),
                };
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0,
                           "text": text, "logprobs": logprobs}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                ));
                OutputItem::Message {
                    id,
                    role: "assistant".to_string(),
                    content: vec![part],
                    status,
                }
            }
            Open::Call {
                id,
                call_id,
                name,
                arguments,
            } => {
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": i, "name": name,
                           "arguments": arguments}),
                ));
                OutputItem::FunctionCall {
                    id,
                    call_id,
                    name,
                    arguments,
                    status,
                }
            }
        };
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        ));
        self.output.push(item);
    }

    fn reasoning_text(&mut self, text: String, out: &mut Vec<SseEvent>) {
        if text.is_empty() {
            return;
        }
        self.reasoning.push_str(&text);
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close(false, out);
            let id = random_id("rs_");
            let i = self.index();
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": i, "item": {"type": "reasoning", "id": id,
                       "summary": [], "content": [], "status": "in_progress"}}),
            ));
            out.push(self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": i, "content_index": 0,
                       "part": {"type": "reasoning_text", "text": ""}}),
            ));
            self.open = Some(Open::Reasoning {
                id,
                text: String::new(),
            });
        }
        let i = self.index();
        let Some(Open::Reasoning { id, text: all }) = self.open.as_mut() else {
            return;
        };
        all.push_str(&text);
        let id = id.clone();
        out.push(self.event(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": i, "content_index": 0, "delta": text}),
        ));
    }

    /// Opens a message item (its text starts empty).
    fn open_message(&mut self, out: &mut Vec<SseEvent>) {
        self.close(false, out);
        let id = random_id("msg_");
        let i = self.index();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": i, "item": {"type": "message", "id": id,
                   "role": "assistant", "content": [], "status": "in_progress"}}),
        ));
        out.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": i, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": [],
                            "logprobs": []}}),
        ));
        self.open = Some(Open::Message {
            id,
            text: String::new(),
            logprobs: Vec::new(),
        });
    }

    fn text(&mut self, text: String, out: &mut Vec<SseEvent>) {
        if text.is_empty() {
            return;
        }
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.open_message(out);
        }
        let i = self.index();
        let lps = chat_entries(&self.rt.tokenizer, &std::mem::take(&mut self.pending));
        let Some(Open::Message {
            id,
            text: all,
            logprobs,
        }) = self.open.as_mut()
        else {
            return;
        };
        all.push_str(&text);
        logprobs.extend(lps.iter().cloned());
        let id = id.clone();
        out.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": i, "content_index": 0, "delta": text,
                   "logprobs": lps}),
        ));
    }

    fn tool(&mut self, d: ToolDelta, out: &mut Vec<SseEvent>) {
        match d {
            ToolDelta::Content(t) => self.text(t, out),
            ToolDelta::CallStart { name, .. } => {
                self.close(false, out);
                let (id, call_id) = (random_id("fc_"), random_id("call_"));
                let i = self.index();
                out.push(self.event(
                    "response.output_item.added",
                    json!({"output_index": i, "item": {"type": "function_call", "id": id,
                           "call_id": call_id, "name": name, "arguments": "",
                           "status": "in_progress"}}),
                ));
                self.open = Some(Open::Call {
                    id,
                    call_id,
                    name,
                    arguments: String::new(),
                });
            }
            ToolDelta::Arguments { fragment, .. } => {
                let i = self.index();
                let Some(Open::Call { id, arguments, .. }) = self.open.as_mut() else {
                    return;
                };
                arguments.push_str(&fragment);
                let id = id.clone();
                out.push(self.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": i, "delta": fragment}),
                ));
            }
        }
    }

    /// Content (after the reasoning split): read for calls when tools are offered.
    fn content(&mut self, text: String, out: &mut Vec<SseEvent>) {
        if text.is_empty() {
            return;
        }
        match self.reader.as_mut() {
            None => self.text(text, out),
            Some(r) => {
                for d in r.push_text(&text) {
                    self.tool(d, out);
                }
            }
        }
    }

    /// The response with the output so far, in `status`.
    fn response(&self, status: &str, usage: Option<ResponseUsage>) -> ResponseObject {
        let mut r = self.template.clone();
        r.status = status.to_string();
        r.output = self.output.clone();
        r.usage = usage;
        r
    }
}

impl ChunkWriter for ResponsesWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        let created = self.response("in_progress", None);
        vec![
            self.event("response.created", json!({"response": created})),
            self.event("response.in_progress", json!({"response": created})),
        ]
    }

    fn deltas(
        &mut self,
        _choice: usize,
        ids: &[u32],
        text: String,
        lps: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        if self.logprobs {
            self.pending.extend_from_slice(lps);
        }
        let mut out = Vec::new();
        let full = self.syntax.text(ids, &text).into_owned();
        match self.thinker.as_mut() {
            None => self.content(full, &mut out),
            Some(t) => {
                let parts = t.push(&full);
                self.reasoning_text(parts.reasoning, &mut out);
                self.content(parts.content, &mut out);
            }
        }
        out
    }

    fn finished(&mut self, _choice: usize, _reason: FinishReason) -> SseEvent {
        // Unused: `finish_chunks` is overridden.
        SseEvent::default().comment("finished")
    }

    fn finish_chunks(&mut self, _choice: usize, reason: FinishReason) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if let Some(t) = self.thinker.as_mut() {
            let rest = t.finish();
            self.reasoning_text(rest.reasoning, &mut out);
            self.content(rest.content, &mut out);
        }
        if let Some(mut r) = self.reader.take() {
            let (rest, _) = r.finish();
            for d in rest {
                self.tool(d, &mut out);
            }
        }
        self.finish = Finish::of(reason);
        // A reply with nothing in it is still one (empty) message.
        if self.open.is_none() && self.output.is_empty() {
            self.open_message(&mut out);
        }
        let incomplete = item_status(self.finish) != "completed";
        self.close(incomplete, &mut out);
        out
    }

    fn closing(&mut self, usage: UsageBody, _timings: TimingsBody) -> Vec<SseEvent> {
        let usage = usage_of(usage, &self.rt, &self.reasoning);
        let mut done = self.response(self.finish.status(), Some(usage));
        done.incomplete_details = self.finish.details();
        if let Some(keep) = self.keep.take() {
            let turn = stored_turn(keep, &done.output);
            self.state.responses().put(Stored {
                response: done.clone(),
                turn,
            });
        }
        let kind = match self.finish {
            Finish::Completed => "response.completed",
            _ => "response.incomplete",
        };
        vec![self.event(kind, json!({"response": done}))]
    }

    fn terminator(&mut self) -> Option<SseEvent> {
        None
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        let env = e.envelope().error;
        self.event(
            "error",
            json!({"code": env.code, "message": env.message, "param": env.param}),
        )
    }

    fn error_events(&mut self, e: &ApiError) -> Vec<SseEvent> {
        let first = self.error(e);
        let mut failed = self.response("failed", None);
        failed.error = Some(ResponseError {
            code: match e {
                ApiError::Overloaded { .. } => "rate_limit_exceeded",
                _ => "server_error",
            }
            .to_string(),
            message: e.to_string(),
        });
        vec![
            first,
            self.event("response.failed", json!({"response": failed})),
        ]
    }
}
