//! gpt-oss's harmony reply format, read into the syntax kiln's reasoning and tool readers
//! already take. A harmony reply (after the prompt's `<|start|>assistant`) is a run of
//! messages, each `[to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]
//! <|message|>BODY` ended by `<|end|>` (the next one then opens with `<|start|>assistant`),
//! `<|call|>` or `<|return|>`:
//!
//! - the `analysis` channel is reasoning: it becomes a block between the reasoning splitter's
//!   tags (`<think>...</think>`, given by `structured::reasoning`, which runs this reader in
//!   front of its own; consecutive analysis messages join in one), sent to `reasoning_content`;
//! - a message to `functions.NAME` (the `commentary` channel) is a tool call: it becomes
//!   `<tool_call>{"name": "NAME", "arguments": BODY}</tool_call>`, which the tool reader of the
//!   `Harmony` tool format reads as it reads Hermes calls (BODY is the call's JSON arguments,
//!   as the template renders past calls);
//! - the `final` channel, and `commentary` without a recipient (a preamble the user sees), are
//!   content.
//!
//! A reply that does not open with a harmony header (`<|channel|>`, `<|start|>`, `to=`) is
//! passed through as it is. [`HarmonyReader`] reads delta by delta, holding back only what may
//! still be a tag or an unfinished header, so its pieces joined equal the whole reply's.
//! The control tokens must be in the text (decoded text drops them: see
//! [`super::syntax::SyntaxTokens`] with [`CONTROL`]).

/// The harmony control tokens a reply is read for.
pub const CONTROL: [&str; 7] = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
];

/// What opens a reply in harmony (after blanks).
const HEADER_OPENERS: [&str; 3] = ["<|channel|>", "<|start|>", "to="];
/// What ends a message's body.
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
/// The tag between a header and its body.
const MESSAGE: &str = "<|message|>";
/// A header longer than this without `<|message|>` is not harmony: the rest is content.
const MAX_HEADER: usize = 512;

/// What a message's body becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Inside the `<think>` block.
    Analysis,
    Content,
    /// A call's arguments (closed with `}</tool_call>`).
    Call,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the reply's first non-blank bytes.
    Start,
    /// In a message header (up to `<|message|>`).
    Header,
    Body(Body),
    /// Not harmony: everything is content.
    Plain,
}

/// One reply's reader; see the module docs.
#[derive(Debug, Clone)]
pub struct HarmonyReader {
    state: State,
    /// Text not yet given out.
    held: String,
    /// The reasoning block's tags.
    open: &'static str,
    close: &'static str,
    /// A reasoning block is open.
    thinking: bool,
    /// The current call's arguments so far (to tell, at the end, a call its stop token
    /// `<|call|>` ended from one cut short).
    call_body: String,
}

impl HarmonyReader {
    /// A reader writing the analysis channel between the tags `open` and `close`.
    pub fn new(open: &'static str, close: &'static str) -> HarmonyReader {
        HarmonyReader {
            state: State::Start,
            held: String::new(),
            open,
            close,
            thinking: false,
            call_body: String::new(),
        }
    }

    /// Adds a delta of the reply's text (control tokens in place); returns the canonical text
    /// that became final.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let mut out = String::new();
        loop {
            match self.state {
                State::Plain => {
                    out.push_str(&self.held);
                    self.held.clear();
                    break;
                }
                State::Start => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        break;
                    }
                    if HEADER_OPENERS.iter().any(|o| rest.starts_with(o)) {
                        self.state = State::Header;
                    } else if HEADER_OPENERS.iter().any(|o| o.starts_with(rest)) {
                        break; // maybe an opener, not complete yet
                    } else {
                        self.state = State::Plain;
                    }
                }
                State::Header => match self.held.find(MESSAGE) {
                    Some(at) => {
                        let header = self.held[..at].to_string();
                        self.held.drain(..at + MESSAGE.len());
                        let body = self.open(&header, &mut out);
                        self.state = State::Body(body);
                    }
                    None if self.held.len() > MAX_HEADER => {
                        self.close_think(&mut out);
                        self.state = State::Plain;
                    }
                    None => break,
                },
                State::Body(body) => {
                    let end = ENDS
                        .iter()
                        .filter_map(|e| self.held.find(e).map(|at| (at, e.len())))
                        .min();
                    match end {
                        Some((at, len)) => {
                            out.push_str(&self.held[..at]);
                            self.call_body.clear();
                            self.held.drain(..at + len);
                            if body == Body::Call {
                                out.push_str("}</tool_call>");
                            }
                            // The next message's header (`<|start|>assistant...`).
                            self.state = State::Header;
                        }
                        None => {
                            let keep = ENDS
                                .iter()
                                .map(|e| partial_tag_len(&self.held, e))
                                .max()
                                .unwrap_or(0);
                            let give = self.held.len() - keep;
                            out.push_str(&self.held[..give]);
                            if body == Body::Call {
                                self.call_body.push_str(&self.held[..give]);
                            }
                            self.held.drain(..give);
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// The reply ended (or was cut short): what is still held. A call whose arguments are
    /// complete JSON is closed (its `<|call|>` is a stop token, which the reply's text does
    /// not hold); one cut short stays open (the tool reader keeps it as a partial call). An
    /// unfinished header is dropped; an unfinished analysis stays reasoning.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.held);
        match self.state {
            State::Header => out.clear(),
            State::Body(Body::Call) => {
                self.call_body.push_str(&out);
                if serde_json::from_str::<serde_json::Value>(&self.call_body).is_ok() {
                    out.push_str("}</tool_call>");
                }
            }
            State::Start | State::Plain | State::Body(_) => {}
        }
        self.call_body.clear();
        self.state = State::Plain;
        out
    }

    /// Starts the message whose header is `header`: writes what opens it; returns what its
    /// body becomes.
    fn open(&mut self, header: &str, out: &mut String) -> Body {
        let recipient = word_after(header, "to=");
        let channel = word_after(header, "<|channel|>");
        if let Some(name) = recipient.and_then(|r| r.strip_prefix("functions.")) {
            self.close_think(out);
            let name = serde_json::to_string(name).unwrap_or_default();
            out.push_str(&format!("<tool_call>{{\"name\": {name}, \"arguments\": "));
            return Body::Call;
        }
        if channel == Some("analysis") {
            if !self.thinking {
                out.push_str(self.open);
                self.thinking = true;
            }
            return Body::Analysis;
        }
        self.close_think(out);
        Body::Content
    }

    fn close_think(&mut self, out: &mut String) {
        if self.thinking {
            out.push_str(self.close);
            self.thinking = false;
        }
    }
}

/// The word after `tag` in `header`: up to a blank or the next `<|`.
fn word_after<'a>(header: &'a str, tag: &str) -> Option<&'a str> {
    let at = header.find(tag)? + tag.len();
    let rest = &header[at..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag` (on a char
/// boundary: the tags are ASCII).
fn partial_tag_len(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && tag.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

/// Whether a chat template writes the harmony format (its messages' channels).
pub fn is_harmony_template(template: &str) -> bool {
    template.contains("<|channel|>") && template.contains("<|message|>")
}

/// Reads a whole reply (the analysis channel between `open` and `close`).
pub fn normalize(text: &str, open: &'static str, close: &'static str) -> String {
    let mut r = HarmonyReader::new(open, close);
    let mut out = r.push(text);
    out.push_str(&r.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads a whole reply with `<think>` tags.
    fn normalize(text: &str) -> String {
        super::normalize(text, "<think>", "</think>")
    }

    const THINK_THEN_ANSWER: &str = "<|channel|>analysis<|message|>The user greets.<|end|>\
        <|start|>assistant<|channel|>final<|message|>Hello!";

    #[test]
    fn analysis_is_a_think_block_and_final_is_content() {
        assert_eq!(
            normalize(THINK_THEN_ANSWER),
            "<think>The user greets.</think>Hello!"
        );
        // A final answer alone, ended by <|return|> (when a stop token's text is kept).
        assert_eq!(normalize("<|channel|>final<|message|>Hi<|return|>"), "Hi");
    }

    #[test]
    fn a_message_to_a_function_is_a_tool_call() {
        let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant \
            to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}<|call|>";
        assert_eq!(
            normalize(reply),
            "<think>Need weather.</think><tool_call>{\"name\": \"get_weather\", \"arguments\": \
             {\"city\":\"Paris\"}}</tool_call>"
        );
        // The recipient after the channel, with <|constrain|>.
        let reply = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>";
        assert_eq!(
            normalize(reply),
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
        );
    }

    #[test]
    fn a_preamble_is_content_and_analysis_messages_join() {
        let reply = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis\
            <|message|>b<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>";
        assert_eq!(normalize(reply), "<think>ab</think>Checking.");
    }

    #[test]
    fn text_that_is_not_harmony_passes_through() {
        assert_eq!(normalize("just text <|end|>"), "just text <|end|>");
        assert_eq!(normalize("  "), "  ");
        // A header that never reaches <|message|> is not harmony past its bound.
        let long = format!("<|channel|>{}", "x".repeat(600));
        assert_eq!(normalize(&long), long);
    }

    #[test]
    fn cut_short_replies_keep_what_they_have() {
        // Reasoning cut by max_tokens: the block stays open (ReasoningSplit keeps it as
        // reasoning); a call cut short stays an open call; an unfinished header is dropped.
        assert_eq!(normalize("<|channel|>analysis<|message|>hmm"), "<think>hmm");
        assert_eq!(
            normalize("<|channel|>commentary to=functions.f json<|message|>{\"a\":"),
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\":"
        );
        assert_eq!(
            normalize("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|chan"),
            "<think>x"
        );
    }

    #[test]
    fn a_call_ended_by_its_stop_token_is_complete() {
        // <|call|> is a stop token: the reply's text ends with the arguments.
        let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant \
            to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}";
        assert!(normalize(reply).ends_with("\"Paris\"}}</tool_call>"));
    }

    proptest! {
        /// Fed in any pieces, the reader gives the whole reply's reading.
        #[test]
        fn deltas_join_to_the_whole(cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let reply = format!(
                "{THINK_THEN_ANSWER}<|end|><|start|>assistant to=functions.g<|channel|>\
                 commentary json<|message|>{{\"q\": \"<|x\"}}<|call|>"
            );
            let whole = normalize(&reply);
            let mut cuts: Vec<usize> = cuts
                .into_iter()
                .map(|c| c % (reply.len() + 1))
                .filter(|&c| reply.is_char_boundary(c))
                .collect();
            cuts.sort_unstable();
            let mut r = HarmonyReader::new("<think>", "</think>");
            let (mut out, mut last) = (String::new(), 0);
            for c in cuts {
                out.push_str(&r.push(&reply[last..c]));
                last = c;
            }
            out.push_str(&r.push(&reply[last..]));
            out.push_str(&r.finish());
            prop_assert_eq!(out, whole);
        }
    }
}
