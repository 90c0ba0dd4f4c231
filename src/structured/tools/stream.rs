//! Tool calls while the reply streams: the text so far is re-read in its format after each
//! delta ([`super::parse_reply`] is prefix-monotone), and only what is new goes out: content,
//! then for each call a header (its index and name, once the name is complete) and argument
//! fragments.

use super::{parse_reply, PartialCall, Reply, ToolFormat};
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// What a delta adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDelta {
    Content(String),
    /// A call begins (index in the reply, function name).
    CallStart {
        index: usize,
        name: String,
    },
    /// More of call `index`'s arguments (raw JSON text).
    Arguments {
        index: usize,
        fragment: String,
    },
}

/// One choice's reader.
pub struct ToolStream {
    format: ToolFormat,
    tok: Arc<Tokenizer>,
    text: String,
    /// Control-token ids of the format's syntax, with their text.
    triggers: Vec<(u32, &'static str)>,
    sent_content: usize,
    /// Per call started: arguments bytes sent.
    sent_args: Vec<usize>,
}

impl ToolStream {
    pub fn new(format: ToolFormat, tok: Arc<Tokenizer>) -> ToolStream {
        let triggers = format
            .trigger_texts()
            .iter()
            .filter_map(|t| {
                let id = tok.vocab().id(t.as_bytes())?;
                tok.is_control(id).then_some((id, *t))
            })
            .collect();
        ToolStream {
            format,
            tok,
            text: String::new(),
            triggers,
            sent_content: 0,
            sent_args: Vec::new(),
        }
    }

    /// Adds a delta (its token ids and shown text) and returns what is new.
    pub fn push(&mut self, ids: &[u32], text: &str) -> Vec<ToolDelta> {
        let trigger = |id: u32| self.triggers.iter().find(|(t, _)| *t == id).map(|p| p.1);
        if ids.iter().all(|&id| trigger(id).is_none()) {
            self.text.push_str(text);
        } else {
            // The shown text drops control tokens: rebuild it with the syntax's tokens in
            // place.
            let mut run: Vec<u32> = Vec::new();
            let mut out = String::new();
            for &id in ids {
                match trigger(id) {
                    Some(t) => {
                        out.push_str(&self.tok.decode(&run));
                        run.clear();
                        out.push_str(t);
                    }
                    None => run.push(id),
                }
            }
            out.push_str(&self.tok.decode(&run));
            self.text.push_str(&out);
        }
        let reply = parse_reply(self.format, &self.text, false);
        self.diff(&reply)
    }

    /// The reply is complete: what is left to send, and the whole reply.
    pub fn finish(&mut self) -> (Vec<ToolDelta>, Reply) {
        let reply = parse_reply(self.format, &self.text, true);
        let out = self.diff(&reply);
        (out, reply)
    }

    pub fn format(&self) -> ToolFormat {
        self.format
    }

    /// Calls started so far.
    pub fn calls_started(&self) -> usize {
        self.sent_args.len()
    }

    fn diff(&mut self, reply: &Reply) -> Vec<ToolDelta> {
        let mut out = Vec::new();
        if reply.content.len() > self.sent_content
            && reply.content.is_char_boundary(self.sent_content)
        {
            out.push(ToolDelta::Content(
                reply.content[self.sent_content..].to_string(),
            ));
            self.sent_content = reply.content.len();
        }
        for (index, call) in reply.calls.iter().enumerate() {
            let PartialCall {
                name, arguments, ..
            } = call;
            if index == self.sent_args.len() {
                let Some(name) = name else { break };
                out.push(ToolDelta::CallStart {
                    index,
                    name: name.clone(),
                });
                self.sent_args.push(0);
            }
            let Some(sent) = self.sent_args.get_mut(index) else {
                break;
            };
            if arguments.len() > *sent && arguments.is_char_boundary(*sent) {
                out.push(ToolDelta::Arguments {
                    index,
                    fragment: arguments[*sent..].to_string(),
                });
                *sent = arguments.len();
            }
        }
        out
    }
}
