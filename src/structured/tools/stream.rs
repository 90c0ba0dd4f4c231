//! Tool calls while the reply streams: each delta's text (with the format's control tokens put
//! back, since shown text drops them) goes to a [`Reader`], which reads on from where it
//! stopped and returns what became final: content, then for each call a header (its index and
//! name, once the name is complete) and argument fragments.

use super::{Reader, Reply, ToolDelta, ToolFormat};
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// One choice's reader over token deltas.
pub struct ToolStream {
    reader: Reader,
    tok: Arc<Tokenizer>,
    /// Control-token ids of the format's syntax, with their text.
    triggers: Vec<(u32, &'static str)>,
}

impl ToolStream {
    /// `forced`: the reply can only be calls (`tool_choice` "required" or a named function).
    pub fn new(format: ToolFormat, forced: bool, tok: Arc<Tokenizer>) -> ToolStream {
        let triggers = format
            .trigger_texts()
            .iter()
            .filter_map(|t| {
                let id = tok.vocab().id(t.as_bytes())?;
                tok.is_control(id).then_some((id, *t))
            })
            .collect();
        ToolStream {
            reader: Reader::new(format, forced),
            tok,
            triggers,
        }
    }

    /// Adds a delta (its token ids and shown text) and returns what is new.
    pub fn push(&mut self, ids: &[u32], text: &str) -> Vec<ToolDelta> {
        let trigger = |id: u32| self.triggers.iter().find(|(t, _)| *t == id).map(|p| p.1);
        if ids.iter().all(|&id| trigger(id).is_none()) {
            return self.reader.push(text);
        }
        // The shown text drops control tokens: rebuild it with the syntax's tokens in place.
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
        self.reader.push(&out)
    }

    /// The reply ended (or was cut short): what is left to send, and the whole reply (exactly
    /// what all the deltas sent).
    pub fn finish(&mut self) -> (Vec<ToolDelta>, Reply) {
        let out = self.reader.finish();
        (out, self.reader.reply())
    }

    pub fn format(&self) -> ToolFormat {
        self.reader.format()
    }

    /// Calls started so far.
    pub fn calls_started(&self) -> usize {
        self.reader.calls_started()
    }
}
