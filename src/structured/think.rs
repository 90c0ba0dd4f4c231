//! Thinking before structure: a reply of a thinking model (Qwen3, Qwen3.5, SmolLM3) under
//! `response_format` or a forced tool call reasons freely inside `<think>` ... `</think>`, and
//! only what follows `</think>` is constrained (as llama-server and vLLM do).
//!
//! - [`ThinkFrame::wrap`] / [`ThinkFrame::prefix`]: the grammar of the think part put in front
//!   of the structured part's grammar. When the prompt opened the block
//!   ([`ThinkStart::Open`]) the reply starts inside it; when the reply may open one
//!   ([`ThinkStart::Detect`]) the block is optional. Its text is free (any text without
//!   `</think>`), then `</think>`, up to two newlines, and the structured part.
//! - [`ThinkBudget`]: one sequence's watch over the think part. While the reply thinks, the
//!   JSON bounds and the closing steering of [`super::seq`] stand aside (the text is not
//!   JSON). Once the tokens left come within the answer's reserve ([`reserve`]: half the
//!   budget, at most [`RESERVE_MAX`] tokens) the masks write `</think>`, so the structured part
//!   always gets its share of `max_tokens`.

use super::bounds::TokenBytes;
use super::reasoning::{ThinkStart, CLOSE, OPEN};
use super::tools::native::Tag;
use crate::tokenizer::Tokenizer;
use llguidance::toktrie::{SimpleVob, TokTrie};
use std::sync::Arc;

/// The most tokens kept for the structured part after the think part.
pub const RESERVE_MAX: usize = 1024;

/// Tokens of a `max_tokens` budget kept for what follows `</think>`: half the budget, at
/// most [`RESERVE_MAX`].
pub fn reserve(max_tokens: usize) -> usize {
    (max_tokens / 2).min(RESERVE_MAX)
}

/// How a constrained reply may think first, in one model's vocabulary.
#[derive(Debug)]
pub struct ThinkFrame {
    /// The prompt opened the block (the reply starts inside it); otherwise the reply may
    /// open one.
    opened: bool,
    open: Tag,
    close: Tag,
    /// The tokens whose text is a piece of `</think>`, for forcing the close.
    pieces: Vec<(u32, Vec<u8>)>,
    /// The structured part is required (`response_format`, a forced call): the close is
    /// forced within the reserve. Otherwise (`tool_choice` "auto") thinking is bounded by
    /// `max_tokens` alone.
    forced: bool,
    table: Arc<TokenBytes>,
}

/// The grammar rule a structured part is renamed to behind the think part.
const AFTER: &str = "after_think";

impl ThinkFrame {
    /// The frame for a reply starting as `start` says: None when the reply cannot think
    /// (the prompt closed the block) or thinks in another syntax (harmony). `forced`: the
    /// structured part is required, so the close is forced within the reserve.
    pub fn new(
        start: ThinkStart,
        tok: &Tokenizer,
        table: Arc<TokenBytes>,
        forced: bool,
    ) -> Option<ThinkFrame> {
        let opened = match start {
            ThinkStart::Open => true,
            ThinkStart::Detect => false,
            ThinkStart::Closed | ThinkStart::Harmony => return None,
        };
        let close = CLOSE.as_bytes();
        let mut pieces = Vec::new();
        for from in 0..close.len() {
            for to in from + 1..=close.len() {
                if let Some(id) = tok.vocab().id(&close[from..to]) {
                    pieces.push((id, close[from..to].to_vec()));
                }
            }
        }
        Some(ThinkFrame {
            opened,
            open: Tag::of(tok, OPEN),
            close: Tag::of(tok, CLOSE),
            pieces,
            forced,
            table,
        })
    }

    /// The Lark rules of the think part, as the rule `think_part`.
    fn rules(&self) -> String {
        let (body, lexeme) = match &self.close {
            // A control token: free text cannot write it, so the text ends where it is drawn.
            Tag::Control(_) => (
                format!("THINK_TEXT? {}", self.close.item()),
                "THINK_TEXT: /(?s:.+)/\n".to_string(),
            ),
            // Text: a lazy lexeme ends at the first `</think>`.
            Tag::Text(t) => (
                "think_lead".to_string(),
                format!(
                    "think_lead[lazy]: /(?s:.*){}/\n",
                    super::regex_text::regex_literal(t)
                ),
            ),
        };
        let block = if self.opened {
            body
        } else {
            format!("({} {body})?", self.open.item())
        };
        format!("think_part: {block} \"\\n\"{{0,2}}\n{lexeme}")
    }

    /// Lark items and rules to put before a structured part: (`think_part`, its rules).
    pub fn prefix(&self) -> (String, String) {
        ("think_part".to_string(), self.rules())
    }

    /// A Lark grammar whose first rule is `start:` (kiln's call grammars), behind the think
    /// part.
    pub fn wrap(&self, grammar: &str) -> String {
        match grammar.strip_prefix("start:") {
            Some(rest) => format!("start: think_part {AFTER}\n{AFTER}:{rest}{}", self.rules()),
            None => grammar.to_string(),
        }
    }

    /// One sequence's watch over the think part, for a budget of `max_tokens`.
    pub fn budget(self: &Arc<Self>, max_tokens: usize) -> ThinkBudget {
        ThinkBudget {
            frame: Arc::clone(self),
            state: if self.opened {
                State::Inside
            } else {
                State::Leading(0)
            },
            tail: Vec::with_capacity(CLOSE.len()),
            left: max_tokens,
            reserve: if self.forced { reserve(max_tokens) } else { 0 },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the reply's first non-blank byte, or inside `<think>` (bytes matched so far).
    Leading(usize),
    Inside,
    /// The think part is over (or never began): the structured part.
    Done,
}

/// One sequence's think part: where it ends, and the close forced once the tokens left come
/// within the reserve.
#[derive(Debug, Clone)]
pub struct ThinkBudget {
    frame: Arc<ThinkFrame>,
    state: State,
    /// The last bytes inside the block (up to `</think>`'s length).
    tail: Vec<u8>,
    left: usize,
    reserve: usize,
}

impl ThinkBudget {
    /// The reply is still before or inside its think part.
    pub fn active(&self) -> bool {
        self.state != State::Done
    }

    /// Advances over a drawn token. While the think part goes on, None; once it is over,
    /// the offset in this token's bytes where the structured part begins (0 after it).
    pub fn commit(&mut self, id: u32) -> Option<usize> {
        self.left = self.left.saturating_sub(1);
        if self.state == State::Done {
            return Some(0);
        }
        let table = Arc::clone(&self.frame.table);
        let mut word = table.word(id);
        // A control token's text follows the marker byte.
        if word.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
            word = &word[1..];
        }
        for (i, &b) in word.iter().enumerate() {
            match self.state {
                State::Leading(0) if b.is_ascii_whitespace() => {}
                State::Leading(n) if OPEN.as_bytes()[n] == b => {
                    self.state = if n + 1 == OPEN.len() {
                        State::Inside
                    } else {
                        State::Leading(n + 1)
                    };
                }
                State::Leading(_) => {
                    self.state = State::Done;
                    return Some(i);
                }
                State::Inside => {
                    if self.tail.len() == CLOSE.len() {
                        self.tail.remove(0);
                    }
                    self.tail.push(b);
                    if self.tail == CLOSE.as_bytes() {
                        self.state = State::Done;
                        return Some(i + 1);
                    }
                }
                State::Done => return Some(i),
            }
        }
        (self.state == State::Done).then_some(word.len())
    }

    /// Inside the block with no more tokens left than the reserve: narrows `mask` to the
    /// longest allowed token that goes on writing `</think>` (if there is one).
    pub fn force_close(&self, mask: &mut SimpleVob) {
        if self.state != State::Inside || self.left > self.reserve || self.reserve == 0 {
            return;
        }
        let close = CLOSE.as_bytes();
        let matched = (1..close.len())
            .rev()
            .find(|&k| self.tail.ends_with(&close[..k]))
            .unwrap_or(0);
        let rest = &close[matched..];
        let best = self
            .frame
            .pieces
            .iter()
            .filter(|(id, w)| rest.starts_with(w) && mask.is_allowed(*id))
            .max_by_key(|(_, w)| w.len());
        if let Some(&(id, _)) = best {
            mask.set_all(false);
            mask.allow_token(id);
        }
    }
}
