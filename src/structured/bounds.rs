//! Bounds on what JSON allows but no client wants: a number with more digits than an f64
//! round-trips, an exponent of more than three digits, a run of whitespace that never ends.
//! A grammar engine allows all of these (JSON does), and a model sampling at temperature 1.0
//! can spend its whole token budget inside one number. [`JsonBounds`] follows the JSON text
//! a sequence writes and narrows the grammar's mask to tokens that keep within [`LIMITS`].
//!
//! The bounds never make a reply impossible: where no allowed token keeps within them (a
//! schema that needs a 20-digit number), the grammar's own mask stands. String lengths are
//! the grammar's business (`maxLength` compiles into it).
//!
//! Closing: a reply that nears its `max_tokens` would be cut mid-value (a string a small model
//! at temperature 1.0 never closes, an object it keeps adding keys to) and fail to parse.
//! Within [`Limits::close_within`] tokens of the budget, [`JsonBounds::close`] narrows the mask
//! to the tokens that only close (in a string `"`, maybe followed by `}`/`]`; elsewhere `}`,
//! `]` and the end of generation) wherever the grammar allows one, so the value ends valid.
//! Where none is allowed inside a string (a `pattern` that wants more text first),
//! [`super::lookahead`] steers toward the shortest way to a quote; where more is required
//! than the margin holds (keys still to write), [`super::completion`] steers along the
//! shortest completion from further out. Only constraints built with
//! [`super::Constraint::closing`] (`response_format`) close; tool calls cut short stay partial.

use llguidance::toktrie::{SimpleVob, TokTrie};
use std::collections::HashSet;
use std::sync::Arc;

/// The byte a control token's word starts with.
const SPECIAL_MARKER: u8 = TokTrie::SPECIAL_TOKEN_MARKER;

/// What the bounds allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Significant digits of a number's mantissa (what an f64 round-trips: 17).
    pub sig_digits: u32,
    /// Zeros before the first significant digit (`0.000001`).
    pub lead_zeros: u32,
    /// Digits of an exponent (an f64's is at most 3).
    pub exp_digits: u32,
    /// The largest decimal exponent of the number's value (the exponent written plus the
    /// integer part's digits beyond the first), or of its inverse: past f64's range (about
    /// 1e308), a client reads infinity or an error.
    pub max_magnitude: u32,
    /// Whitespace bytes in a row between JSON tokens.
    pub ws_between: u32,
    /// Whitespace characters in a row inside a string (raw or escaped `\n`, `\t`, `\r`).
    pub ws_in_string: u32,
    /// Tokens before `max_tokens` from which a reply is steered to close (at most a quarter
    /// of the budget).
    pub close_within: u32,
}

/// kiln's bounds.
pub const LIMITS: Limits = Limits {
    sig_digits: 17,
    lead_zeros: 8,
    exp_digits: 3,
    max_magnitude: 300,
    ws_between: 4,
    ws_in_string: 32,
    close_within: 64,
};

/// Each token's bytes as the bounds read them, and the longest digit and whitespace runs any
/// token holds (a token that cannot reach a bound is never checked). Built once per model.
#[derive(Debug)]
pub struct TokenBytes {
    words: Vec<Vec<u8>>,
    max_digits: u32,
    max_ws: u32,
    /// Tokens that only close, between JSON tokens: their bytes are all `}` or `]`, or they
    /// are control tokens (the end of generation is one).
    closers: Vec<u32>,
    /// Tokens that close a string: `"` and then only `}` or `]` (inside a string those two
    /// are plain characters, so they close nothing there).
    string_closers: Vec<u32>,
    /// The token whose bytes are exactly one byte, for each byte (the lowest such id).
    byte_tokens: Vec<Option<u32>>,
    /// The words of plain tokens up to [`COST_WORD_MAX`] bytes, for [`TokenBytes::cost`].
    plain: HashSet<Vec<u8>>,
}

/// The longest word [`TokenBytes::cost`] looks for.
const COST_WORD_MAX: usize = 32;

impl TokenBytes {
    /// From the token trie's words (control tokens start with the special marker byte).
    pub fn new(words: Vec<Vec<u8>>) -> TokenBytes {
        let run = |w: &[u8], f: fn(u8) -> bool| {
            w.split(|&b| !f(b))
                .map(|r| r.len() as u32)
                .max()
                .unwrap_or(0)
        };
        let max_digits = words.iter().map(|w| run(w, |b| b.is_ascii_digit())).max();
        // Escaped whitespace (`\n`) is two bytes per character: count bytes, an upper bound.
        let max_ws = words
            .iter()
            .map(|w| {
                run(w, |b| {
                    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b'\\' | b'n' | b't' | b'r')
                })
            })
            .max();
        let brackets = |w: &[u8]| w.iter().all(|b| matches!(b, b'}' | b']'));
        let ids = |keep: &dyn Fn(&[u8]) -> bool| -> Vec<u32> {
            let kept = words.iter().enumerate().filter(|(_, w)| keep(w));
            kept.map(|(i, _)| i as u32).collect()
        };
        let closers =
            ids(&|w| w.first() == Some(&SPECIAL_MARKER) || (!w.is_empty() && brackets(w)));
        let string_closers = ids(&|w| w.first() == Some(&b'"') && brackets(&w[1..]));
        let mut byte_tokens = vec![None; 256];
        for (i, w) in words.iter().enumerate() {
            if let [b] = w.as_slice() {
                byte_tokens[*b as usize].get_or_insert(i as u32);
            }
        }
        let plain = words
            .iter()
            .filter(|w| !w.is_empty() && w.len() <= COST_WORD_MAX && w[0] != SPECIAL_MARKER)
            .cloned()
            .collect();
        TokenBytes {
            plain,
            closers,
            string_closers,
            byte_tokens,
            max_digits: max_digits.unwrap_or(0),
            max_ws: max_ws.unwrap_or(0),
            words,
        }
    }

    pub fn word(&self, id: u32) -> &[u8] {
        self.words.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Tokens writing `text` takes when each is the longest word that starts what is left
    /// (what following a plan with the longest allowed token costs); a byte no word starts
    /// counts one token.
    pub fn cost(&self, text: &[u8]) -> usize {
        let mut at = 0;
        let mut n = 0;
        while at < text.len() {
            let most = (text.len() - at).min(COST_WORD_MAX);
            let len = (1..=most)
                .rev()
                .find(|&l| self.plain.contains(&text[at..at + l]))
                .unwrap_or(1);
            at += len;
            n += 1;
        }
        n
    }

    /// Whether `mask` allows a token that only closes between JSON tokens (`}`, `]`, the end
    /// of generation).
    pub fn closers_allowed(&self, mask: &SimpleVob) -> bool {
        self.closers.iter().any(|&id| mask.is_allowed(id))
    }

    /// The token that is exactly the byte `b`, if the vocabulary has one (the special
    /// marker byte is never one: it starts control tokens).
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        if b == SPECIAL_MARKER {
            return None;
        }
        self.byte_tokens[b as usize]
    }
}

/// Where a JSON number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Sign,
    Int,
    Frac,
    ExpSign,
    Exp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Outside JSON (embedded values only): until `{` or `[` opens one.
    Text,
    /// Between JSON tokens, after `ws` whitespace bytes.
    Between { ws: u32 },
    /// In a string: `esc` after a backslash, `ws` whitespace characters in a row.
    Str { esc: bool, ws: u32 },
    Num {
        part: Part,
        sig: u32,
        zeros: u32,
        /// Significant digits before the point.
        int_sig: u32,
        exp: u32,
        exp_neg: bool,
        exp_val: u32,
    },
    /// `true`, `false`, `null`.
    Literal,
}

/// A bound the text would cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossed;

/// The JSON lexical state of one sequence's output.
#[derive(Debug, Clone)]
pub struct JsonBounds {
    lex: Lex,
    depth: u32,
    /// The output holds JSON values amid other text (tool-call tags): outside a value
    /// nothing is bounded.
    embedded: bool,
    limits: Limits,
    table: Arc<TokenBytes>,
}

impl JsonBounds {
    /// Bounds for output that is one JSON value (`embedded` false) or JSON values amid other
    /// text, such as tool calls between tags (`embedded` true).
    pub fn new(table: Arc<TokenBytes>, embedded: bool, limits: Limits) -> JsonBounds {
        JsonBounds {
            lex: if embedded {
                Lex::Text
            } else {
                Lex::Between { ws: 0 }
            },
            depth: 0,
            embedded,
            limits,
            table,
        }
    }

    /// Advances over a token the sequence drew.
    pub fn commit(&mut self, id: u32) {
        let table = Arc::clone(&self.table);
        self.commit_bytes(table.word(id));
    }

    /// Advances over the bytes of a drawn token that belong to the bounded output (the end
    /// of a token that closed a think part, see [`super::think`]).
    pub fn commit_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            // A crossed bound was allowed on purpose (nothing else was): follow the text.
            let _ = self.step(b);
        }
    }

    /// Narrows `mask` to the tokens that keep within the bounds, unless none would (then the
    /// mask stays as the grammar made it). Returns how many tokens it removed.
    pub fn narrow(&self, mask: &mut SimpleVob) -> usize {
        if !self.near() {
            return 0;
        }
        let mut over = Vec::new();
        mask.iter_set_entries(|id| {
            let mut probe = self.clone_lex();
            if self
                .table
                .word(id as u32)
                .iter()
                .any(|&b| probe.step(b).is_err())
            {
                over.push(id as u32);
            }
        });
        if over.is_empty() || over.len() == mask.num_set() {
            return 0;
        }
        for &id in &over {
            mask.disallow_token(id);
        }
        over.len()
    }

    /// How many tokens before the end of a `max_tokens` budget closing starts.
    pub fn close_margin(&self, max_tokens: usize) -> usize {
        (self.limits.close_within as usize).min(max_tokens / 4)
    }

    /// Narrows `mask` to the closing tokens it allows (see the module docs) and returns how
    /// many tokens it removed; None (the mask untouched) when it allows no closer or the
    /// output is outside JSON (embedded text).
    pub fn close(&self, mask: &mut SimpleVob) -> Option<usize> {
        let closers = match self.lex {
            Lex::Between { .. } | Lex::Num { .. } => &self.table.closers,
            Lex::Str { esc: false, .. } => &self.table.string_closers,
            Lex::Str { esc: true, .. } | Lex::Text | Lex::Literal => return None,
        };
        if !closers.iter().any(|&id| mask.is_allowed(id)) {
            return None;
        }
        let keep: Vec<u32> = closers
            .iter()
            .copied()
            .filter(|&id| mask.is_allowed(id))
            .collect();
        let removed = mask.num_set() - keep.len();
        mask.set_all(false);
        keep.into_iter().for_each(|id| mask.allow_token(id));
        Some(removed)
    }

    /// Whether the output is inside a JSON string, past any escape (where a `"` would close).
    pub fn in_string(&self) -> bool {
        matches!(self.lex, Lex::Str { esc: false, .. })
    }

    /// Whether the output is right after a backslash inside a string.
    pub fn escaped(&self) -> bool {
        matches!(self.lex, Lex::Str { esc: true, .. })
    }

    /// Advances over the byte `b` if it keeps within the bounds (true); else stays (false).
    pub fn try_byte(&mut self, b: u8) -> bool {
        let mut p = self.clone_lex();
        if p.step(b).is_err() {
            return false;
        }
        self.lex = p.lex;
        self.depth = p.depth;
        true
    }

    /// The token bytes these bounds read.
    pub fn table(&self) -> &Arc<TokenBytes> {
        &self.table
    }

    /// Whether some token could cross a bound from here.
    fn near(&self) -> bool {
        let (l, t) = (&self.limits, &self.table);
        match self.lex {
            Lex::Text | Lex::Literal => false,
            Lex::Between { ws } => {
                ws + t.max_ws > l.ws_between || t.max_digits > l.sig_digits.min(l.lead_zeros)
            }
            Lex::Str { ws, .. } => ws + t.max_ws > l.ws_in_string,
            Lex::Num {
                part, sig, zeros, ..
            } => match part {
                Part::Sign | Part::Int | Part::Frac => {
                    sig + t.max_digits > l.sig_digits || zeros + t.max_digits > l.lead_zeros
                }
                // The exponent's value is bounded too, and its masks are small: always check.
                Part::ExpSign | Part::Exp => true,
            },
        }
    }

    fn clone_lex(&self) -> Probe {
        Probe {
            lex: self.lex,
            depth: self.depth,
            embedded: self.embedded,
            limits: self.limits,
        }
    }

    /// Advances over the byte `b`, reporting a bound it crosses (the text is followed anyway).
    pub fn step(&mut self, b: u8) -> Result<(), Crossed> {
        let mut p = self.clone_lex();
        let r = p.step(b);
        self.lex = p.lex;
        self.depth = p.depth;
        r
    }
}

/// The lexical state alone (cheap to copy for probing a token).
#[derive(Debug, Clone, Copy)]
struct Probe {
    lex: Lex,
    depth: u32,
    embedded: bool,
    limits: Limits,
}

impl Probe {
    fn step(&mut self, b: u8) -> Result<(), Crossed> {
        let l = self.limits;
        match &mut self.lex {
            Lex::Text => {
                if matches!(b, b'{' | b'[') {
                    self.depth = 1;
                    self.lex = Lex::Between { ws: 0 };
                }
                Ok(())
            }
            Lex::Str { esc, ws } => {
                let white = if *esc {
                    *esc = false;
                    matches!(b, b'n' | b't' | b'r')
                } else if b == b'\\' {
                    *esc = true;
                    return Ok(());
                } else if b == b'"' {
                    self.lex = Lex::Between { ws: 0 };
                    return Ok(());
                } else {
                    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
                };
                *ws = if white { *ws + 1 } else { 0 };
                if *ws > l.ws_in_string {
                    return Err(Crossed);
                }
                Ok(())
            }
            Lex::Num {
                part,
                sig,
                zeros,
                int_sig,
                exp,
                exp_neg,
                exp_val,
            } => {
                match (b, *part) {
                    (b'0'..=b'9', Part::Sign | Part::Int | Part::Frac) => {
                        if *part == Part::Sign {
                            *part = Part::Int;
                        }
                        if b != b'0' || *sig > 0 {
                            *sig += 1;
                            if *part == Part::Int {
                                *int_sig += 1;
                            }
                            if *sig > l.sig_digits || *int_sig > l.max_magnitude {
                                return Err(Crossed);
                            }
                        } else if *part == Part::Frac {
                            // Zeros after the point, before any significant digit.
                            *zeros += 1;
                            if *zeros > l.lead_zeros {
                                return Err(Crossed);
                            }
                        }
                    }
                    (b'.', Part::Int) => *part = Part::Frac,
                    (b'e' | b'E', Part::Int | Part::Frac) => *part = Part::ExpSign,
                    (b'+' | b'-', Part::ExpSign) => {
                        *part = Part::Exp;
                        *exp_neg = b == b'-';
                    }
                    (b'0'..=b'9', Part::ExpSign | Part::Exp) => {
                        *part = Part::Exp;
                        *exp += 1;
                        *exp_val = *exp_val * 10 + u32::from(b - b'0');
                        let magnitude = if *exp_neg {
                            *exp_val
                        } else {
                            *exp_val + int_sig.saturating_sub(1)
                        };
                        if *exp > l.exp_digits || magnitude > l.max_magnitude {
                            return Err(Crossed);
                        }
                    }
                    _ => {
                        // The number ended: the byte is read between tokens.
                        self.lex = Lex::Between { ws: 0 };
                        return self.step(b);
                    }
                }
                Ok(())
            }
            Lex::Literal => {
                if b.is_ascii_lowercase() {
                    return Ok(());
                }
                self.lex = Lex::Between { ws: 0 };
                self.step(b)
            }
            Lex::Between { ws } => {
                match b {
                    b' ' | b'\n' | b'\r' | b'\t' => {
                        *ws += 1;
                        if *ws > l.ws_between {
                            return Err(Crossed);
                        }
                        return Ok(());
                    }
                    b'"' => self.lex = Lex::Str { esc: false, ws: 0 },
                    b'-' | b'0'..=b'9' => {
                        self.lex = Lex::Num {
                            part: Part::Sign,
                            sig: 0,
                            zeros: 0,
                            int_sig: 0,
                            exp: 0,
                            exp_neg: false,
                            exp_val: 0,
                        };
                        if b != b'-' {
                            return self.step(b);
                        }
                    }
                    b't' | b'f' | b'n' => self.lex = Lex::Literal,
                    b'{' | b'[' => {
                        self.depth += 1;
                        *ws = 0;
                    }
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        *ws = 0;
                        if self.embedded && self.depth == 0 {
                            self.lex = Lex::Text;
                        }
                    }
                    _ if self.embedded && (b >= 0x80 || b.is_ascii_alphabetic() || b == b'<') => {
                        // Not JSON after all (text or a tag): nothing to bound here.
                        self.lex = Lex::Text;
                        self.depth = 0;
                    }
                    _ => *ws = 0,
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<TokenBytes> {
        let words: Vec<Vec<u8>> = [
            "0", "1", "12", "9", ".", "e", "-", ",", "}", "{", "\"", " ", "\\n", "a", "123, ",
            "e+", "b", "\"}", ":",
        ]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
        Arc::new(TokenBytes::new(words))
    }

    fn id(t: &TokenBytes, w: &str) -> u32 {
        (0..t.words.len() as u32)
            .find(|&i| t.word(i) == w.as_bytes())
            .unwrap()
    }

    fn feed(b: &mut JsonBounds, text: &[&str]) {
        let t = Arc::clone(&b.table);
        for w in text {
            b.commit(id(&t, w));
        }
    }

    fn allowed(b: &JsonBounds) -> Vec<String> {
        let n = b.table.words.len();
        let mut mask = SimpleVob::alloc(n);
        mask.set_all(true);
        b.narrow(&mut mask);
        (0..n as u32)
            .filter(|&i| mask.is_allowed(i))
            .map(|i| String::from_utf8_lossy(b.table.word(i)).into_owned())
            .collect()
    }

    #[test]
    fn a_number_stops_at_seventeen_significant_digits() {
        let mut b = JsonBounds::new(table(), false, LIMITS);
        feed(&mut b, &["{", "\"", "a", "\"", "-"]);
        for _ in 0..8 {
            feed(&mut b, &["12"]);
        }
        // 16 digits: one more is fine, two are not.
        let ok = allowed(&b);
        assert!(
            ok.contains(&"1".to_string()) && !ok.contains(&"12".to_string()),
            "{ok:?}"
        );
        assert!(!ok.contains(&"123, ".to_string()));
        feed(&mut b, &["1"]);
        let ok = allowed(&b);
        assert!(
            !ok.iter()
                .any(|w| w.bytes().next().is_some_and(|c| c.is_ascii_digit())),
            "{ok:?}"
        );
        assert!(ok.contains(&",".to_string()) && ok.contains(&"e".to_string()));
        feed(&mut b, &["e", "1", "1", "1"]);
        let ok = allowed(&b);
        assert!(
            !ok.contains(&"1".to_string()) && ok.contains(&"}".to_string()),
            "{ok:?}"
        );
        // A third exponent digit after e99 would be past the range kiln allows (1e300).
        let mut b = JsonBounds::new(table(), false, LIMITS);
        feed(&mut b, &["1", "e", "9", "9"]);
        let ok = allowed(&b);
        assert!(
            !ok.contains(&"0".to_string()) && ok.contains(&"}".to_string()),
            "{ok:?}"
        );
    }

    #[test]
    fn leading_zeros_and_whitespace_runs_are_bounded() {
        let mut b = JsonBounds::new(table(), false, LIMITS);
        feed(&mut b, &["0", "."]);
        for _ in 0..8 {
            assert!(allowed(&b).contains(&"0".to_string()));
            feed(&mut b, &["0"]);
        }
        assert!(!allowed(&b).contains(&"0".to_string()));
        assert!(allowed(&b).contains(&"9".to_string()));
        let mut b = JsonBounds::new(table(), false, LIMITS);
        feed(&mut b, &["\""]);
        for _ in 0..16 {
            feed(&mut b, &["\\n", " "]);
        }
        assert!(!allowed(&b).contains(&" ".to_string()));
        assert!(allowed(&b).contains(&"a".to_string()));
        feed(&mut b, &["a"]);
        assert!(allowed(&b).contains(&" ".to_string()));
    }

    #[test]
    fn when_nothing_keeps_within_the_bounds_the_grammar_stands() {
        let t = table();
        let mut b = JsonBounds::new(Arc::clone(&t), false, LIMITS);
        feed(&mut b, &["1"; 17]);
        let mut mask = SimpleVob::alloc(t.words.len());
        mask.allow_token(id(&t, "1"));
        mask.allow_token(id(&t, "9"));
        assert_eq!(b.narrow(&mut mask), 0);
        assert_eq!(mask.num_set(), 2);
    }

    #[test]
    fn closing_keeps_only_the_closers_the_grammar_allows() {
        let t = table();
        let mut b = JsonBounds::new(Arc::clone(&t), false, LIMITS);
        feed(&mut b, &["{", "\"", "a"]);
        let mut mask = SimpleVob::alloc(t.words.len());
        for w in ["b", "\"", "\"}", "1"] {
            mask.allow_token(id(&t, w));
        }
        assert_eq!(b.close(&mut mask), Some(2));
        assert!(mask.is_allowed(id(&t, "\"")) && mask.is_allowed(id(&t, "\"}")));
        // In a string `}` is a character: it closes nothing, so it is no closer there.
        let mut mask = SimpleVob::alloc(t.words.len());
        for w in ["}", "\""] {
            mask.allow_token(id(&t, w));
        }
        assert_eq!(b.close(&mut mask), Some(1));
        assert!(mask.is_allowed(id(&t, "\"")));
        // Between tokens it is the closer, and `"` (which would open a string) is not.
        let mut between = JsonBounds::new(Arc::clone(&t), false, LIMITS);
        feed(&mut between, &["{", "\"", "a", "\"", ":", "1"]);
        let mut mask = SimpleVob::alloc(t.words.len());
        for w in ["}", "\"", ","] {
            mask.allow_token(id(&t, w));
        }
        assert_eq!(between.close(&mut mask), Some(2));
        assert!(mask.is_allowed(id(&t, "}")));
        // No closer allowed: the grammar's mask stands.
        let mut mask = SimpleVob::alloc(t.words.len());
        mask.allow_token(id(&t, "b"));
        assert_eq!(b.close(&mut mask), None);
        assert_eq!(mask.num_set(), 1);
        // A quarter of a small budget, at most `close_within` of a large one.
        assert_eq!(b.close_margin(40), 10);
        assert_eq!(b.close_margin(4096), LIMITS.close_within as usize);
    }

    #[test]
    fn embedded_values_are_bounded_and_text_is_not() {
        let mut b = JsonBounds::new(table(), true, LIMITS);
        feed(&mut b, &["a"; 3]);
        feed(&mut b, &["1"; 20]);
        assert!(allowed(&b).contains(&"1".to_string()));
        feed(&mut b, &["{", "\"", "a", "\""]);
        feed(&mut b, &["1"; 17]);
        assert!(!allowed(&b).contains(&"1".to_string()));
        feed(&mut b, &["}"]);
        feed(&mut b, &["1"; 20]);
        assert!(allowed(&b).contains(&"1".to_string()));
    }
}
