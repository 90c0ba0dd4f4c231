//! A whole reply read for tool calls, for the APIs that answer with calls in their own shape
//! (Messages' `tool_use` blocks, Responses' `function_call` items): the content and the
//! complete calls, in the model's tool-call format.

use crate::structured::tools::{CallReading, ToolStream};
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
/// content a reasoning split left, see [`crate::server::chat::reply_syntax`]).
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
