//! Anthropic's event stream for one `/v1/messages` reply: `message_start`, `ping`, per block
//! `content_block_start` / `content_block_delta` (`thinking_delta`, `text_delta`,
//! `input_json_delta`) / `content_block_stop`, then `message_delta` and `message_stop`.

use super::{stop_reason, tool_use_id};
use crate::scheduler::{FinishReason, TokenLogprob};
use crate::server::error::ApiError;
use crate::server::session::Meta;
use crate::server::sse::{json_event, ChunkWriter};
use crate::server::types::messages::*;
use crate::server::types::{TimingsBody, UsageBody};
use crate::structured::reasoning::ReasoningSplit;
use crate::structured::syntax::SyntaxTokens;
use crate::structured::tools::{ToolDelta, ToolStream};
use axum::response::sse::Event as SseEvent;
use serde_json::{json, Value};

/// The block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking(usize),
    Text(usize),
    ToolUse(usize),
}

/// Anthropic's events for one reply (Messages has no `n`: one choice).
pub(super) struct MessagesWriter {
    meta: Meta,
    input_tokens: usize,
    /// The tool-call reader when the request offers tools.
    reader: Option<ToolStream>,
    /// The reasoning splitter when the template writes `<think>` blocks, and the syntax
    /// tokens its text is read with.
    thinker: Option<(ReasoningSplit, SyntaxTokens)>,
    block: Option<Open>,
    /// Blocks started so far (the next block's index).
    blocks: usize,
    stop_reason: &'static str,
    stop_sequence: Option<String>,
}

fn event<T: serde::Serialize>(name: &'static str, data: &T) -> SseEvent {
    json_event(data).event(name)
}

impl MessagesWriter {
    /// The writer of a reply to a prompt of `input_tokens`; `reader` reads tool calls,
    /// `thinker` splits reasoning off (see [`super::messages`]).
    pub(super) fn new(
        meta: Meta,
        input_tokens: usize,
        reader: Option<ToolStream>,
        thinker: Option<(ReasoningSplit, SyntaxTokens)>,
    ) -> MessagesWriter {
        MessagesWriter {
            meta,
            input_tokens,
            reader,
            thinker,
            block: None,
            blocks: 0,
            stop_reason: "end_turn",
            stop_sequence: None,
        }
    }

    fn close_block(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(Open::Thinking(i) | Open::Text(i) | Open::ToolUse(i)) = self.block.take() {
            out.push(event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    /// Closes the open block and starts the next one (`open` of its index) as `block` says;
    /// returns its index.
    fn start_block(
        &mut self,
        open: fn(usize) -> Open,
        block: Value,
        out: &mut Vec<SseEvent>,
    ) -> usize {
        self.close_block(out);
        let i = self.blocks;
        self.blocks += 1;
        self.block = Some(open(i));
        out.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": i, "content_block": block}),
        ));
        i
    }

    fn thinking(&mut self, text: String, out: &mut Vec<SseEvent>) {
        if text.is_empty() {
            return;
        }
        let i = match self.block {
            Some(Open::Thinking(i)) => i,
            _ => self.start_block(
                Open::Thinking,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                out,
            ),
        };
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "thinking_delta", "thinking": text}}),
        ));
    }

    /// Content after the reasoning split: read for tool calls when the request offers tools.
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

    fn text(&mut self, text: String, out: &mut Vec<SseEvent>) {
        if text.is_empty() {
            return;
        }
        let i = match self.block {
            Some(Open::Text(i)) => i,
            _ => self.start_block(Open::Text, json!({"type": "text", "text": ""}), out),
        };
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": text}}),
        ));
    }

    fn tool(&mut self, d: ToolDelta, out: &mut Vec<SseEvent>) {
        match d {
            ToolDelta::Content(t) => self.text(t, out),
            ToolDelta::CallStart { name, .. } => {
                let block = json!({"type": "tool_use", "id": tool_use_id(), "name": name,
                                   "input": {}});
                self.start_block(Open::ToolUse, block, out);
            }
            ToolDelta::Arguments { fragment, .. } => {
                if let Some(Open::ToolUse(i)) = self.block {
                    out.push(event(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": i,
                                "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                    ));
                }
            }
        }
    }
}

impl ChunkWriter for MessagesWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        let message = MessagesResponse {
            id: self.meta.id.clone(),
            kind: "message".to_string(),
            role: "assistant".to_string(),
            model: self.meta.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: AnthropicUsage {
                input_tokens: self.input_tokens,
                output_tokens: 0,
                ..AnthropicUsage::default()
            },
        };
        vec![
            event(
                "message_start",
                &json!({"type": "message_start", "message": message}),
            ),
            event("ping", &json!({"type": "ping"})),
        ]
    }

    fn deltas(
        &mut self,
        _choice: usize,
        ids: &[u32],
        text: String,
        _lps: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if let Some((thinker, syntax)) = self.thinker.as_mut() {
            let parts = thinker.push(&syntax.text(ids, &text));
            self.thinking(parts.reasoning, &mut out);
            self.content(parts.content, &mut out);
            return out;
        }
        match self.reader.as_mut() {
            None => self.text(text, &mut out),
            Some(r) => {
                for d in r.push(ids, &text) {
                    self.tool(d, &mut out);
                }
            }
        }
        out
    }

    fn finished(&mut self, _choice: usize, _reason: FinishReason) -> SseEvent {
        // Unused: `finish_chunks` is overridden.
        event("ping", &json!({"type": "ping"}))
    }

    fn finish_chunks(&mut self, _choice: usize, reason: FinishReason) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if let Some((mut thinker, _)) = self.thinker.take() {
            let rest = thinker.finish();
            self.thinking(rest.reasoning, &mut out);
            self.content(rest.content, &mut out);
        }
        let mut called = false;
        if let Some(mut r) = self.reader.take() {
            let (rest, _) = r.finish();
            for d in rest {
                self.tool(d, &mut out);
            }
            called = r.calls_started() > 0;
        }
        self.close_block(&mut out);
        self.stop_reason = stop_reason(reason, called, self.stop_sequence.is_some());
        out
    }

    fn stopped_by(&mut self, _choice: usize, stop: &str) {
        self.stop_sequence = Some(stop.to_string());
    }

    fn closing(&mut self, usage: UsageBody, _timings: TimingsBody) -> Vec<SseEvent> {
        vec![
            event(
                "message_delta",
                &json!({"type": "message_delta",
                        "delta": {"stop_reason": self.stop_reason,
                                  "stop_sequence": self.stop_sequence},
                        "usage": {"output_tokens": usage.completion_tokens,
                                  "input_tokens": usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens,
                                  "cache_read_input_tokens": usage.prompt_tokens_details.cached_tokens}}),
            ),
            event("message_stop", &json!({"type": "message_stop"})),
        ]
    }

    fn terminator(&mut self) -> Option<SseEvent> {
        None
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        event("error", &e.anthropic_envelope())
    }
}
