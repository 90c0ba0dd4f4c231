//! Reasoning replies: the `<think>...</think>` part of a reply goes to `reasoning_content`, the
//! rest to `content` (as vLLM's and llama-server's reasoning parsers split Qwen3, SmolLM3 and
//! DeepSeek-R1 replies).
//!
//! Where the reply starts depends on the rendered prompt ([`ThinkStart::after_prompt`]): a
//! prompt that ends inside an open `<think>` (DeepSeek-R1 distills, Qwen3 with thinking on in
//! some templates) makes the reply reasoning from its first byte; a prompt that closed the
//! block already (Qwen3 with `enable_thinking: false`) makes it all content; otherwise a reply
//! that opens with `<think>` (after blanks) reasons until `</think>`. A reasoning part that
//! never closes (cut by `max_tokens`) stays reasoning. Blanks right after `</think>` are
//! dropped from the content.
//!
//! [`ReasoningSplit`] reads a reply delta by delta and holds back only what may still turn
//! out to be a tag, so the pieces it returns, joined, equal the split of the whole reply.
//!
//! gpt-oss's harmony replies ([`ThinkStart::Harmony`]) go through
//! [`super::harmony::HarmonyReader`] first, which writes their analysis channel as a block
//! between these tags: every API that splits reasoning splits harmony alike.

use super::harmony::HarmonyReader;

/// The tags, as the templates and models write them.
pub const OPEN: &str = "<think>";
pub const CLOSE: &str = "</think>";

/// How a reply starts, from the prompt that precedes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkStart {
    /// The prompt opened the block: the reply is reasoning until `</think>`.
    Open,
    /// The reply may open a block with its first non-blank bytes.
    Detect,
    /// The prompt closed the block (thinking turned off): the reply is all content.
    Closed,
    /// gpt-oss's harmony format: the reply is read by [`HarmonyReader`] first (its analysis
    /// channel becomes the block), then as [`ThinkStart::Detect`].
    Harmony,
}

impl ThinkStart {
    /// From the rendered prompt's end.
    pub fn after_prompt(rendered: &str) -> ThinkStart {
        let end = rendered.trim_end();
        if end.ends_with(OPEN) {
            ThinkStart::Open
        } else if end.ends_with(CLOSE) {
            ThinkStart::Closed
        } else {
            ThinkStart::Detect
        }
    }
}

/// What a delta adds to each part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    pub reasoning: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first non-blank byte (Detect): blanks held.
    Leading,
    /// Inside the block.
    Thinking,
    /// Right after `</think>`: blanks dropped.
    AfterClose,
    Content,
}

/// One reply's splitter; see the module docs.
#[derive(Debug, Clone)]
pub struct ReasoningSplit {
    /// The harmony reader in front (gpt-oss).
    harmony: Option<HarmonyReader>,
    state: State,
    /// Text not yet given out: a possible tag prefix (or leading blanks).
    held: String,
    whole: Parts,
}

impl ReasoningSplit {
    pub fn new(start: ThinkStart) -> ReasoningSplit {
        let state = match start {
            ThinkStart::Open => State::Thinking,
            ThinkStart::Detect | ThinkStart::Harmony => State::Leading,
            ThinkStart::Closed => State::Content,
        };
        ReasoningSplit {
            harmony: (start == ThinkStart::Harmony).then(|| HarmonyReader::new(OPEN, CLOSE)),
            state,
            held: String::new(),
            whole: Parts::default(),
        }
    }

    /// Adds a delta of the reply's text; returns what became final.
    pub fn push(&mut self, text: &str) -> Parts {
        match self.harmony.as_mut() {
            Some(h) => {
                let text = h.push(text);
                self.push_read(&text)
            }
            None => self.push_read(text),
        }
    }

    /// [`ReasoningSplit::push`] after the harmony reader.
    fn push_read(&mut self, text: &str) -> Parts {
        self.held.push_str(text);
        let mut out = Parts::default();
        loop {
            match self.state {
                State::Content => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    break;
                }
                State::Leading => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        break;
                    }
                    if rest.starts_with(OPEN) {
                        let skip = self.held.len() - rest.len() + OPEN.len();
                        self.held.drain(..skip);
                        self.state = State::Thinking;
                    } else if OPEN.starts_with(rest) {
                        break; // maybe the tag, not complete yet
                    } else {
                        self.state = State::Content;
                    }
                }
                State::AfterClose => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        self.held.clear();
                        break;
                    }
                    let skip = self.held.len() - rest.len();
                    self.held.drain(..skip);
                    self.state = State::Content;
                }
                State::Thinking => match self.held.find(CLOSE) {
                    Some(at) => {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held.drain(..at + CLOSE.len());
                        self.state = State::AfterClose;
                    }
                    None => {
                        let keep = partial_tag_len(&self.held, CLOSE);
                        let give = self.held.len() - keep;
                        out.reasoning.push_str(&self.held[..give]);
                        self.held.drain(..give);
                        break;
                    }
                },
            }
        }
        self.record(&out);
        out
    }

    /// The reply ended: what is still held, in its part.
    pub fn finish(&mut self) -> Parts {
        // The harmony reader's rest is read (and recorded) first.
        let mut out = match self.harmony.as_mut().map(HarmonyReader::finish) {
            Some(rest) => self.push_read(&rest),
            None => Parts::default(),
        };
        let held = std::mem::take(&mut self.held);
        let mut tail = Parts::default();
        match self.state {
            State::Thinking => tail.reasoning = held,
            State::Leading | State::Content => tail.content = held,
            State::AfterClose => {}
        }
        self.state = State::Content;
        self.record(&tail);
        out.reasoning.push_str(&tail.reasoning);
        out.content.push_str(&tail.content);
        out
    }

    /// Everything given out so far.
    pub fn whole(&self) -> &Parts {
        &self.whole
    }

    fn record(&mut self, p: &Parts) {
        self.whole.reasoning.push_str(&p.reasoning);
        self.whole.content.push_str(&p.content);
    }
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag` (on a char
/// boundary: the tags are ASCII).
fn partial_tag_len(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && tag.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

/// Splits a whole reply.
pub fn split(start: ThinkStart, text: &str) -> Parts {
    let mut s = ReasoningSplit::new(start);
    s.push(text);
    s.finish();
    s.whole().clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(r: &str, c: &str) -> Parts {
        Parts {
            reasoning: r.to_string(),
            content: c.to_string(),
        }
    }

    #[test]
    fn the_prompt_end_decides_the_start() {
        let p = "<|im_start|>assistant\n";
        assert_eq!(ThinkStart::after_prompt(p), ThinkStart::Detect);
        assert_eq!(
            ThinkStart::after_prompt(&format!("{p}<think>\n")),
            ThinkStart::Open
        );
        assert_eq!(
            ThinkStart::after_prompt(&format!("{p}<think>\n\n</think>\n\n")),
            ThinkStart::Closed
        );
    }

    #[test]
    fn whole_replies_split_as_the_reasoning_parsers_do() {
        use ThinkStart::*;
        assert_eq!(
            split(Detect, "<think>a plan</think>\n\nThe answer."),
            parts("a plan", "The answer.")
        );
        assert_eq!(split(Detect, "\n <think>x</think>y"), parts("x", "y"));
        assert_eq!(
            split(Detect, "No thinking <think>here</think>"),
            parts("", "No thinking <think>here</think>")
        );
        assert_eq!(split(Detect, "<thin"), parts("", "<thin"));
        assert_eq!(split(Detect, "  "), parts("", "  "));
        assert_eq!(
            split(Open, "step 1\nstep 2</think>\nDone"),
            parts("step 1\nstep 2", "Done")
        );
        assert_eq!(split(Open, "cut short </thi"), parts("cut short </thi", ""));
        assert_eq!(split(Open, "a</think>b</think>c"), parts("a", "b</think>c"));
        assert_eq!(
            split(Closed, "<think>kept</think>as content"),
            parts("", "<think>kept</think>as content")
        );
        assert_eq!(split(Open, "é</think>ü"), parts("é", "ü"));
    }

    #[test]
    fn a_tag_split_over_deltas_is_held_back_not_shown() {
        let mut s = ReasoningSplit::new(ThinkStart::Detect);
        assert_eq!(s.push("<th"), parts("", ""));
        assert_eq!(s.push("ink>I"), parts("I", ""));
        assert_eq!(s.push(" think</"), parts(" think", ""));
        assert_eq!(s.push("think>"), parts("", ""));
        assert_eq!(s.push("\n\n"), parts("", ""));
        assert_eq!(s.push("Hi"), parts("", "Hi"));
        assert_eq!(s.finish(), parts("", ""));
        assert_eq!(s.whole(), &parts("I think", "Hi"));
    }

    proptest! {
        /// However the reply is cut into deltas, the pieces join to the whole reply's split.
        #[test]
        fn deltas_join_to_the_whole_split(
            text in "(<think>|</think>|<th|</thi|\n| |a|é|think>|<){0,24}",
            cuts in proptest::collection::vec(0usize..64, 0..8),
            start in prop_oneof![Just(ThinkStart::Open), Just(ThinkStart::Detect), Just(ThinkStart::Closed)],
        ) {
            let want = split(start, &text);
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).filter(|&c| text.is_char_boundary(c)).collect();
            bounds.push(0);
            bounds.push(text.len());
            bounds.sort_unstable();
            bounds.dedup();
            let mut s = ReasoningSplit::new(start);
            let mut got = Parts::default();
            for w in bounds.windows(2) {
                let p = s.push(&text[w[0]..w[1]]);
                got.reasoning.push_str(&p.reasoning);
                got.content.push_str(&p.content);
            }
            let p = s.finish();
            got.reasoning.push_str(&p.reasoning);
            got.content.push_str(&p.content);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(s.whole(), &want);
        }
    }
}
