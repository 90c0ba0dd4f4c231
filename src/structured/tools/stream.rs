//! Tool calls while the reply streams: each delta's text (with the format's control tokens put
//! back, since shown text drops them) goes to a [`Reader`], which reads on from where it
//! stopped and returns what became final: content, then for each call a header (its index and
//! name, once the name is complete) and argument fragments.

use super::{Reader, Reply, ToolDelta, ToolFormat};
use crate::structured::syntax::SyntaxTokens;
use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// One choice's reader over token deltas.
pub struct ToolStream {
    reader: Reader,
    syntax: SyntaxTokens,
}

impl ToolStream {
    /// `forced`: the reply can only be calls (`tool_choice` "required" or a named function).
    pub fn new(format: ToolFormat, forced: bool, tok: Arc<Tokenizer>) -> ToolStream {
        ToolStream {
            reader: Reader::new(format, forced),
            syntax: SyntaxTokens::new(tok, format.trigger_texts()),
        }
    }

    /// Adds a delta (its token ids and shown text) and returns what is new.
    pub fn push(&mut self, ids: &[u32], text: &str) -> Vec<ToolDelta> {
        let text = self.syntax.text(ids, text);
        self.reader.push(&text)
    }

    /// Adds a delta whose text already has the format's control tokens in place (see
    /// [`SyntaxTokens`]).
    pub fn push_text(&mut self, text: &str) -> Vec<ToolDelta> {
        self.reader.push(text)
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
