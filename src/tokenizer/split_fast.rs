//! Hand-written splitters for the pre-tokenizer regexes on the hot path. Each one gives
//! exactly the pieces of its regex (tested against the regex engine in `pretok.rs`):
//!
//! - [`gpt2`] matches `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
//! - [`llama3`] matches `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//!   with K = 3 (llama3) or 1 (qwen2 writes `\p{N}`)
//! - [`digits`] matches `\p{N}` (every number character alone)
//!
//! Like llama.cpp's regex split, text between two matches becomes a piece of its own.
//! All functions append byte ranges of `text` (offset by `base`) to `out`.

use super::unicode::{class, LETTER, NUMBER, SPACE};
use std::ops::Range;

/// The characters of one segment with their classes and byte offsets (`off` has n + 1 entries).
struct Chars {
    ch: Vec<char>,
    cls: Vec<u8>,
    off: Vec<usize>,
}

impl Chars {
    fn new(text: &str, base: usize) -> Chars {
        let n = text.len();
        let mut ch = Vec::with_capacity(n);
        let mut cls = Vec::with_capacity(n);
        let mut off = Vec::with_capacity(n + 1);
        for (i, c) in text.char_indices() {
            ch.push(c);
            cls.push(class(c));
            off.push(base + i);
        }
        off.push(base + n);
        Chars { ch, cls, off }
    }

    fn len(&self) -> usize {
        self.ch.len()
    }

    fn is_other(&self, i: usize) -> bool {
        self.cls[i] == 0
    }

    /// First index >= `i` whose class does not satisfy `keep`.
    fn run_end(&self, mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
        while i < self.len() && keep(self.cls[i]) {
            i += 1;
        }
        i
    }
}

/// Collects matches and the unmatched gaps between them as pieces.
struct Emitter<'a> {
    chars: &'a Chars,
    out: &'a mut Vec<Range<usize>>,
    gap: Option<usize>,
}

impl Emitter<'_> {
    fn flush_gap(&mut self, upto: usize) {
        if let Some(g) = self.gap.take() {
            self.out.push(self.chars.off[g]..self.chars.off[upto]);
        }
    }
    fn emit(&mut self, a: usize, b: usize) {
        self.flush_gap(a);
        self.out.push(self.chars.off[a]..self.chars.off[b]);
    }
    fn skip(&mut self, a: usize) {
        if self.gap.is_none() {
            self.gap = Some(a);
        }
    }
    fn finish(&mut self) {
        let n = self.chars.len();
        self.flush_gap(n);
    }
}

fn is_newline(c: char) -> bool {
    c == '\r' || c == '\n'
}

/// Length of an English contraction at `i` (`'s`, `'re`, ...), 0 if none. `fold` allows
/// upper-case letters (llama3's `'[sS]` form).
fn contraction(c: &Chars, i: usize, fold: bool) -> usize {
    if c.ch[i] != '\'' || i + 1 >= c.len() {
        return 0;
    }
    let norm = |x: char| if fold { x.to_ascii_lowercase() } else { x };
    let c1 = norm(c.ch[i + 1]);
    if matches!(c1, 's' | 't' | 'm' | 'd') {
        return 2;
    }
    if i + 2 < c.len() {
        let c2 = norm(c.ch[i + 2]);
        if matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return 3;
        }
    }
    0
}

/// Splits `text` with the GPT-2 pattern (see the module doc).
pub fn gpt2(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let c = Chars::new(text, base);
    let n = c.len();
    let mut e = Emitter {
        chars: &c,
        out,
        gap: None,
    };
    let mut i = 0;
    while i < n {
        let k = contraction(&c, i, false);
        if k > 0 {
            e.emit(i, i + k);
            i += k;
            continue;
        }
        // ` ?X+` for X in letters, numbers, other (not space/letter/number).
        let j = if c.ch[i] == ' ' && i + 1 < n && c.cls[i + 1] & SPACE == 0 {
            i + 1
        } else {
            i
        };
        if c.cls[j] & SPACE == 0 {
            let kind = c.cls[j];
            let end = c.run_end(j + 1, |x| x == kind);
            e.emit(i, end);
            i = end;
            continue;
        }
        // `\s+(?!\S)`: a whitespace run, less its last char when a non-space follows.
        let r = c.run_end(i, |x| x & SPACE != 0);
        if r == n {
            e.emit(i, n);
            i = n;
        } else if r - i >= 2 {
            e.emit(i, r - 1);
            i = r - 1;
        } else {
            e.skip(i);
            i += 1;
        }
    }
    e.finish();
}

/// Splits `text` with the llama3 pattern, numbers in groups of at most `max_digits`.
pub fn llama3(text: &str, base: usize, max_digits: usize, out: &mut Vec<Range<usize>>) {
    let c = Chars::new(text, base);
    let n = c.len();
    let mut e = Emitter {
        chars: &c,
        out,
        gap: None,
    };
    let mut i = 0;
    while i < n {
        let k = contraction(&c, i, true);
        if k > 0 {
            e.emit(i, i + k);
            i += k;
            continue;
        }
        let ch = c.ch[i];
        let cls = c.cls[i];
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if cls & LETTER != 0 {
            let end = c.run_end(i + 1, |x| x & LETTER != 0);
            e.emit(i, end);
            i = end;
            continue;
        }
        if !is_newline(ch) && cls & NUMBER == 0 && i + 1 < n && c.cls[i + 1] & LETTER != 0 {
            let end = c.run_end(i + 2, |x| x & LETTER != 0);
            e.emit(i, end);
            i = end;
            continue;
        }
        // `\p{N}{1,K}`
        if cls & NUMBER != 0 {
            let mut end = i + 1;
            while end < n && end - i < max_digits && c.cls[end] & NUMBER != 0 {
                end += 1;
            }
            e.emit(i, end);
            i = end;
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let j = if ch == ' ' && i + 1 < n && c.is_other(i + 1) {
            i + 1
        } else {
            i
        };
        if c.is_other(j) {
            let mut end = c.run_end(j + 1, |x| x == 0);
            while end < n && is_newline(c.ch[end]) {
                end += 1;
            }
            e.emit(i, end);
            i = end;
            continue;
        }
        // Whitespace: `\s*[\r\n]+`, then `\s+(?!\S)`, then `\s+`.
        let r = c.run_end(i, |x| x & SPACE != 0);
        let end = match (i..r).rev().find(|&p| is_newline(c.ch[p])) {
            Some(p) => p + 1,
            None if r == n => n,
            None if r - i >= 2 => r - 1,
            None => i + 1,
        };
        e.emit(i, end);
        i = end;
    }
    e.finish();
}

/// Splits `text` with `\p{N}`: each number character is a piece, the text between them too.
pub fn digits(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let mut gap: Option<usize> = None;
    for (i, ch) in text.char_indices() {
        if class(ch) & NUMBER != 0 {
            if let Some(g) = gap.take() {
                out.push(base + g..base + i);
            }
            out.push(base + i..base + i + ch.len_utf8());
        } else if gap.is_none() {
            gap = Some(i);
        }
    }
    if let Some(g) = gap {
        out.push(base + g..base + text.len());
    }
}
