//! A reply's text with its syntax tokens in place: the shown text of a delta drops control
//! tokens, but a reader of tool calls or reasoning tags needs the ones that are its syntax
//! (`<|tool_call|>`, `<think>` when the vocabulary makes them control tokens).

use crate::tokenizer::Tokenizer;
use std::borrow::Cow;
use std::sync::Arc;

/// The control tokens among some syntax texts, and how to put them back.
#[derive(Clone)]
pub struct SyntaxTokens {
    tok: Arc<Tokenizer>,
    /// Control-token ids with their text.
    ids: Vec<(u32, &'static str)>,
}

impl SyntaxTokens {
    /// The texts of `syntax` that are single control tokens of `tok`'s vocabulary.
    pub fn new(tok: Arc<Tokenizer>, syntax: &[&'static str]) -> SyntaxTokens {
        let ids = syntax
            .iter()
            .filter_map(|t| {
                let id = tok.vocab().id(t.as_bytes())?;
                tok.is_control(id).then_some((id, *t))
            })
            .collect();
        SyntaxTokens { tok, ids }
    }

    fn text_of(&self, id: u32) -> Option<&'static str> {
        self.ids.iter().find(|(t, _)| *t == id).map(|p| p.1)
    }

    /// The delta's text (`ids` shown as `text`) with the syntax tokens in place.
    pub fn text<'a>(&self, ids: &[u32], text: &'a str) -> Cow<'a, str> {
        if ids.iter().all(|&id| self.text_of(id).is_none()) {
            return Cow::Borrowed(text);
        }
        let mut run: Vec<u32> = Vec::new();
        let mut out = String::new();
        for &id in ids {
            match self.text_of(id) {
                Some(t) => {
                    out.push_str(&self.tok.decode(&run));
                    run.clear();
                    out.push_str(t);
                }
                None => run.push(id),
            }
        }
        out.push_str(&self.tok.decode(&run));
        Cow::Owned(out)
    }
}
