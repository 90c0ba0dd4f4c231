//! Engine logprobs in OpenAI's two shapes: chat's list of `{token, logprob, bytes,
//! top_logprobs}` and completions' parallel lists (`tokens`, `token_logprobs`, `top_logprobs`,
//! `text_offset`). A token's text is its bytes, decoded lossily (a token may hold part of a
//! character; `bytes` has the exact bytes). JSON has no infinity: a logprob of `-inf` (a
//! banned token among the alternatives) is sent as -9999, as OpenAI does.

use crate::scheduler::TokenLogprob;
use crate::server::types::{ChatTokenLogprob, CompletionLogprobs, TopLogprob};
use crate::tokenizer::Tokenizer;

/// The lowest logprob sent.
pub const FLOOR: f32 = -9999.0;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp.max(FLOOR)
    } else {
        FLOOR
    }
}

fn token(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_to_piece(id).to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat entries for `lps`.
pub fn chat_entries(tok: &Tokenizer, lps: &[TokenLogprob]) -> Vec<ChatTokenLogprob> {
    lps.iter()
        .map(|lp| {
            let (text, bytes) = token(tok, lp.id);
            ChatTokenLogprob {
                token: text,
                logprob: finite(lp.logprob),
                bytes,
                top_logprobs: lp
                    .top
                    .iter()
                    .map(|&(id, l)| {
                        let (token, bytes) = token(tok, id);
                        TopLogprob {
                            token,
                            logprob: finite(l),
                            bytes,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Builds completions logprobs token by token, tracking each token's character offset in
/// the choice's text (which starts after `start` characters, e.g. an echoed prompt).
#[derive(Debug, Clone, Default)]
pub struct CompletionLogprobBuilder {
    offset: usize,
    pub out: CompletionLogprobs,
}

impl CompletionLogprobBuilder {
    pub fn new(start: usize) -> Self {
        CompletionLogprobBuilder {
            offset: start,
            out: CompletionLogprobs::default(),
        }
    }

    pub fn push(&mut self, tok: &Tokenizer, lps: &[TokenLogprob]) {
        for lp in lps {
            let (text, _) = token(tok, lp.id);
            let mut top = serde_json::Map::new();
            for &(id, l) in &lp.top {
                let (t, _) = token(tok, id);
                top.entry(t).or_insert(serde_json::Value::from(finite(l)));
            }
            self.out.text_offset.push(self.offset);
            self.offset += text.chars().count();
            self.out.tokens.push(text);
            self.out.token_logprobs.push(finite(lp.logprob));
            self.out.top_logprobs.push(top);
        }
    }

    /// The entries pushed since the last call (for a stream chunk).
    pub fn take(&mut self) -> CompletionLogprobs {
        std::mem::take(&mut self.out)
    }
}
