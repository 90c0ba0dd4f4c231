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

/// `v` as a JSON number with the same digits serde writes for an `f32` field (the shortest that
/// reads back as `v`), not `v` widened to `f64`: a client comparing a token's logprob with
/// the best of its top logprobs (lm-evaluation-harness's `is_greedy`) must see equal numbers.
fn json_f32(v: f32) -> serde_json::Value {
    v.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
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
            let mut top = serde_json::Map::new();
            for &(id, l) in &lp.top {
                let (t, _) = token(tok, id);
                top.entry(t).or_insert(json_f32(finite(l)));
            }
            self.push_entry(tok, lp.id, Some(finite(lp.logprob)), Some(top));
        }
    }

    /// An echoed prompt: its first token without a logprob, then the scores of the others
    /// (`scores[i]` is the prompt's token `i + 1`'s).
    pub fn push_prompt(&mut self, tok: &Tokenizer, first: Option<u32>, scores: &[TokenLogprob]) {
        if let Some(first) = first {
            self.push_entry(tok, first, None, None);
        }
        self.push(tok, scores);
    }

    /// The next token starts at character `offset` (after an echoed prompt, whose text may
    /// not be the exact concatenation of its tokens').
    pub fn continue_at(&mut self, offset: usize) {
        self.offset = offset;
    }

    fn push_entry(
        &mut self,
        tok: &Tokenizer,
        id: u32,
        logprob: Option<f32>,
        top: Option<serde_json::Map<String, serde_json::Value>>,
    ) {
        let (text, _) = token(tok, id);
        self.out.text_offset.push(self.offset);
        self.offset += text.chars().count();
        self.out.tokens.push(text);
        self.out.token_logprobs.push(logprob);
        self.out.top_logprobs.push(top);
    }

    /// The entries pushed since the last call (for a stream chunk).
    pub fn take(&mut self) -> CompletionLogprobs {
        std::mem::take(&mut self.out)
    }
}
