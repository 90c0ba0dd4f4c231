//! A whole reply read into its parts, as every chat-shaped API family answers it: the syntax
//! tokens a reply is read for ([`reply_syntax`]), its reasoning, content and tool calls
//! ([`reply_parts`], in chat's shape; [`read_reply`] for the APIs that answer with calls in
//! their own shape: Messages' `tool_use` blocks, Responses' `function_call` items), and new
//! call ids. The streamed readers send the same parts, so a whole reply and a stream agree.

use crate::random::random_id;
use crate::server::app_state::Runtime;
use crate::server::types::{FunctionCall, ToolCall};
use crate::structured::harmony;
use crate::structured::reasoning::{self, ThinkStart};
use crate::structured::syntax::SyntaxTokens;
use crate::structured::tools::{CallReading, ToolFormat, ToolStream};
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// A complete call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCall {
    pub name: String,
    /// The arguments' JSON text.
    pub arguments: String,
}

/// A reply's content and calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReply {
    pub content: String,
    pub calls: Vec<ReadCall>,
}

/// Reads the reply `ids` / `text` as `reading` says (None: all content). Calls cut short (by
/// `max_tokens`) are left out.
pub fn read_reply(
    reading: Option<CallReading>,
    tok: &Arc<Tokenizer>,
    ids: &[u32],
    text: &str,
) -> ReadReply {
    read(reading, tok, text, |r| {
        r.push(ids, text);
    })
}

/// [`read_reply`] for text that has the format's control tokens in place already (the
/// content a reasoning split left, see [`reply_syntax`]).
pub fn read_reply_text(
    reading: Option<CallReading>,
    tok: &Arc<Tokenizer>,
    text: &str,
) -> ReadReply {
    read(reading, tok, text, |r| {
        r.push_text(text);
    })
}

fn read(
    reading: Option<CallReading>,
    tok: &Arc<Tokenizer>,
    text: &str,
    push: impl FnOnce(&mut ToolStream),
) -> ReadReply {
    let Some(reading) = reading else {
        return ReadReply {
            content: text.to_string(),
            calls: Vec::new(),
        };
    };
    let mut reader = ToolStream::new(reading.format, reading.forced, Arc::clone(tok));
    push(&mut reader);
    let (_, reply) = reader.finish();
    let calls: Vec<ReadCall> = reply
        .calls
        .into_iter()
        .filter(|c| c.complete)
        .filter_map(|c| {
            Some(ReadCall {
                name: c.name?,
                arguments: c.arguments,
            })
        })
        .collect();
    ReadReply {
        content: reply.content,
        calls,
    }
}

/// A new tool call id: `call_` and 24 hex digits, or for Mistral templates (which check)
/// 9 alphanumeric characters.
pub(crate) fn call_id(format: ToolFormat) -> String {
    match format {
        ToolFormat::Mistral => random_id("").chars().take(9).collect(),
        _ => random_id("call_"),
    }
}

/// The syntax tokens a reply is read for: the reasoning tags (when the template writes them)
/// and the tool-call format's.
pub(crate) fn reply_syntax(rt: &Runtime, read_calls: Option<CallReading>) -> SyntaxTokens {
    let mut texts: Vec<&'static str> = Vec::new();
    if rt.reasoning {
        texts.extend([reasoning::OPEN, reasoning::CLOSE]);
    }
    if rt.harmony {
        texts.extend(harmony::CONTROL);
    }
    if let Some(r) = read_calls {
        texts.extend_from_slice(r.format.trigger_texts());
    }
    SyntaxTokens::new(Arc::clone(&rt.tokenizer), &texts)
}

/// A whole reply's reasoning, content and calls: what the streamed readers send, so the two
/// agree.
pub(crate) fn reply_parts(
    rt: &Runtime,
    read_calls: Option<CallReading>,
    think: Option<ThinkStart>,
    ids: &[u32],
    text: String,
) -> (Option<String>, Option<String>, Option<Vec<ToolCall>>) {
    let Some(start) = think else {
        return match read_calls {
            Some(f) => {
                let (content, calls) = reply_calls(f, rt, ToolInput::Tokens(ids, &text));
                (None, content, calls)
            }
            None => (None, Some(text), None),
        };
    };
    let full = reply_syntax(rt, read_calls).text(ids, &text).into_owned();
    let parts = reasoning::split(start, &full);
    let (content, calls) = match read_calls {
        Some(f) => reply_calls(f, rt, ToolInput::Text(&parts.content)),
        None => (Some(parts.content), None),
    };
    let reasoning = (!parts.reasoning.is_empty()).then_some(parts.reasoning);
    (reasoning, content, calls)
}

/// A reply as the tool reader takes it: token ids with their shown text, or text that has
/// the format's control tokens in place already.
enum ToolInput<'a> {
    Tokens(&'a [u32], &'a str),
    Text(&'a str),
}

/// The content and calls of a whole reply: what the streamed reader sends, so the two agree.
/// A call cut short (`finish_reason: "length"`) is returned as far as it got.
fn reply_calls(
    reading: CallReading,
    rt: &Runtime,
    input: ToolInput<'_>,
) -> (Option<String>, Option<Vec<ToolCall>>) {
    let format = reading.format;
    let mut reader = ToolStream::new(format, reading.forced, Arc::clone(&rt.tokenizer));
    match input {
        ToolInput::Tokens(ids, text) => reader.push(ids, text),
        ToolInput::Text(text) => reader.push_text(text),
    };
    let (_, reply) = reader.finish();
    let calls: Vec<ToolCall> = reply
        .calls
        .into_iter()
        .filter_map(|c| {
            Some(ToolCall {
                id: call_id(format),
                kind: "function".to_string(),
                function: FunctionCall {
                    name: c.name?,
                    arguments: c.arguments,
                },
            })
        })
        .collect();
    if calls.is_empty() {
        return (Some(reply.content), None);
    }
    let content = (!reply.content.is_empty()).then_some(reply.content);
    (content, Some(calls))
}
