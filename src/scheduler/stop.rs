//! Stop strings over streamed text, and the finish reasons.
//!
//! Generated text arrives in deltas of whole characters (the tokenizer's incremental decoder).
//! [`StopMatcher::push`] returns the part of the text that can be shown now: everything except
//! a tail that might still become the start of a stop string. When a stop string appears,
//! possibly spread across many tokens, the text before it is released and the stop string
//! itself never is (OpenAI's behaviour). Every cut falls on a character boundary: a suffix
//! that equals the start of a (valid UTF-8) stop string begins with a leading byte.

/// Why a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the context limit.
    Length,
    /// Cancelled: the client left, an explicit abort, or shutdown past the drain deadline.
    Abort,
    /// The engine failed while running the request.
    Error,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string ("stop", "length", "abort", "error").
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }
}

/// Holds back text that could be the start of a stop string; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released.
    held: String,
    /// The stop string that ended the choice, once one did.
    matched: Option<String>,
}

/// What a [`StopMatcher::push`] released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// Text safe to show now.
    pub text: String,
    /// A stop string was found: `text` ends right before it and the choice is finished.
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// Adds `text`; returns what can be released and whether a stop string ended the choice.
    /// After a stop, the matcher holds nothing and further text should not be pushed.
    pub fn push(&mut self, text: &str) -> Released {
        if self.stops.is_empty() {
            return Released {
                text: text.to_string(),
                stopped: false,
            };
        }
        self.held.push_str(text);
        // The earliest stop string in the held text ends the choice (on a tie, the longest).
        let found = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at, s.len(), i)))
            .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
        if let Some((at, _, i)) = found {
            self.matched = Some(self.stops[i].clone());
            let mut text = std::mem::take(&mut self.held);
            text.truncate(at);
            return Released {
                text,
                stopped: true,
            };
        }
        let keep = self.partial_tail();
        let text = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        Released {
            text,
            stopped: false,
        }
    }

    /// The stop string that ended the choice (None while none has).
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Releases the held text at the end of the choice (no stop string followed it).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop string.
    fn partial_tail(&self) -> usize {
        let h = self.held.as_bytes();
        self.stops
            .iter()
            .map(|s| {
                let s = s.as_bytes();
                (1..s.len().min(h.len() + 1))
                    .rev()
                    .find(|&l| h.ends_with(&s[..l]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for d in deltas {
            let r = m.push(d);
            out.push_str(&r.text);
            if r.stopped {
                assert!(m.matched().is_some_and(|s| stops.iter().any(|t| t == s)));
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stop_split_across_deltas_is_not_returned() {
        assert_eq!(
            run(&["</answer>"], &["The ", "answer</", "ans", "wer> tail"]),
            ("The answer".to_string(), true)
        );
    }

    #[test]
    fn partial_match_that_fails_is_released() {
        let stops = vec!["STOP".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("a ST").text, "a ");
        assert_eq!(m.push("x").text, "STx");
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(
            run(&["world", "lo w"], &["hello world"]),
            ("hel".to_string(), true)
        );
    }

    #[test]
    fn no_stops_passes_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".to_string(), false));
        assert_eq!(run(&[""], &["a"]), ("a".to_string(), false));
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        // The stop starts with the same lead byte as the text's last character.
        let (out, stopped) = run(&["é!"], &["café", " ok"]);
        assert_eq!((out.as_str(), stopped), ("café ok", false));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".to_string(), true));
    }

    proptest! {
        /// However the text is split into deltas, the released text is the text up to the first
        /// stop string (or all of it), and every release is a valid string (char boundaries).
        #[test]
        fn release_equals_reference(
            text in "[ab\u{e9}\u{1F600}]{0,40}",
            stop in "[ab\u{e9}\u{1F600}]{1,4}",
            cuts in proptest::collection::vec(0usize..40, 0..8),
        ) {
            let chars: Vec<char> = text.chars().collect();
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c.min(chars.len())).collect();
            bounds.push(0);
            bounds.push(chars.len());
            bounds.sort_unstable();
            let deltas: Vec<String> = bounds.windows(2).map(|w| chars[w[0]..w[1]].iter().collect()).collect();
            let refs: Vec<&str> = deltas.iter().map(String::as_str).collect();
            let (out, stopped) = run(&[stop.as_str()], &refs);
            match text.find(&stop) {
                Some(at) => {
                    prop_assert!(stopped);
                    prop_assert_eq!(out, &text[..at]);
                }
                None => {
                    prop_assert!(!stopped);
                    prop_assert_eq!(out, text);
                }
            }
        }
    }
}
