//! Reading JSON while it arrives, resumably: each reader keeps where it stopped and, when more
//! text has been appended to the buffer, goes on from there, so a reply of n bytes costs O(n)
//! however it is cut into deltas. Positions are byte offsets into the caller's buffer, which
//! only ever grows. Nothing here panics on any input: malformed JSON ends a walk with
//! [`Walk::Bad`].

use std::cell::Cell;

thread_local! {
    static SCANNED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes the readers of this thread have looked at so far: the work measure that shows a
/// reply is read once, however it is cut into deltas (each reader adds how far it moved).
pub fn bytes_scanned() -> u64 {
    SCANNED.with(Cell::get)
}

/// Adds `n` bytes to this thread's [`bytes_scanned`].
pub(super) fn count(n: usize) {
    SCANNED.with(|c| c.set(c.get() + n as u64));
}

/// JSON whitespace.
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// The first non-whitespace position at or after `i` (`s.len()` if none has arrived).
pub fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_ws(s[i]) {
        i += 1;
    }
    i
}

/// Finds the end of one JSON value. A bare number or literal ends at the first byte that
/// cannot continue it, so it is complete only once something follows it.
#[derive(Debug, Clone)]
pub struct ValueScan {
    start: usize,
    pos: usize,
    depth: u32,
    in_str: bool,
    esc: bool,
    end: Option<usize>,
}

impl ValueScan {
    pub fn new(start: usize) -> ValueScan {
        ValueScan {
            start,
            pos: start,
            depth: 0,
            in_str: false,
            esc: false,
            end: None,
        }
    }

    /// How far the text has been read (the value's end once it is complete).
    pub fn pos(&self) -> usize {
        self.end.unwrap_or(self.pos)
    }

    /// Reads what has arrived; the end (exclusive) once the value is complete.
    pub fn advance(&mut self, s: &[u8]) -> Option<usize> {
        let from = self.pos;
        let end = self.scan(s);
        count(self.pos.saturating_sub(from));
        end
    }

    fn scan(&mut self, s: &[u8]) -> Option<usize> {
        if self.end.is_some() {
            return self.end;
        }
        let scalar = s
            .get(self.start)
            .is_some_and(|&b| !matches!(b, b'"' | b'{' | b'['));
        while self.pos < s.len() {
            let b = s[self.pos];
            let at = self.pos;
            self.pos += 1;
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                    if self.depth == 0 {
                        self.end = Some(self.pos);
                        return self.end;
                    }
                }
                continue;
            }
            if scalar {
                if at > self.start && (is_ws(b) || matches!(b, b',' | b'}' | b']' | b'"')) {
                    self.pos = at;
                    self.end = Some(at);
                    return self.end;
                }
                continue;
            }
            match b {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        self.end = Some(self.pos);
                        return self.end;
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// Decodes a JSON string as it arrives: the text decoded so far is appended to `out`; an
/// escape not yet complete waits for its end.
#[derive(Debug, Clone)]
pub struct StrDecode {
    /// The next byte to decode (after the opening quote).
    pos: usize,
    end: Option<usize>,
}

impl StrDecode {
    /// A decoder for the string whose opening quote is at `quote`.
    pub fn new(quote: usize) -> StrDecode {
        StrDecode {
            pos: quote + 1,
            end: None,
        }
    }

    /// Decodes what has arrived into `out`; the index after the closing quote once it came.
    pub fn advance(&mut self, s: &[u8], out: &mut String) -> Option<usize> {
        let from = self.pos;
        let end = self.decode(s, out);
        count(self.pos.saturating_sub(from));
        end
    }

    fn decode(&mut self, s: &[u8], out: &mut String) -> Option<usize> {
        if self.end.is_some() || self.pos >= s.len() {
            return self.end;
        }
        let mut j = self.pos;
        while j < s.len() {
            match s[j] {
                b'"' => {
                    push_bytes(out, &s[self.pos..j]);
                    self.pos = j + 1;
                    self.end = Some(j + 1);
                    return self.end;
                }
                b'\\' => {
                    push_bytes(out, &s[self.pos..j]);
                    self.pos = j;
                    match escape(s, j) {
                        Some((c, used)) => {
                            out.push(c);
                            j += used;
                            self.pos = j;
                        }
                        None => return None,
                    }
                }
                _ => j += 1,
            }
        }
        // Plain bytes up to the end; the buffer is text, so they end on a character boundary
        // unless the caller's delta split one (then the rest waits).
        let valid = match std::str::from_utf8(&s[self.pos..j]) {
            Ok(_) => j,
            Err(e) => self.pos + e.valid_up_to(),
        };
        push_bytes(out, &s[self.pos..valid]);
        self.pos = valid;
        None
    }
}

fn push_bytes(out: &mut String, b: &[u8]) {
    out.push_str(&String::from_utf8_lossy(b));
}

/// The escape at `s[j] == '\\'`: the character and the bytes it takes, or None while it is
/// incomplete. Invalid escapes and lone surrogates decode to U+FFFD.
fn escape(s: &[u8], j: usize) -> Option<(char, usize)> {
    let e = *s.get(j + 1)?;
    let simple = match e {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let hi = hex4(s, j + 2)?;
            if (0xD800..0xDC00).contains(&hi) {
                // A high surrogate needs its low half before it means anything.
                if s.len() < j + 12 {
                    let tail = &s[j + 6..];
                    let could_pair = b"\\u".iter().zip(tail).all(|(a, b)| a == b);
                    if could_pair {
                        return None;
                    }
                    return Some((char::REPLACEMENT_CHARACTER, 6));
                }
                return match (s.get(j + 6..j + 8), hex4(s, j + 8)) {
                    (Some(b"\\u"), Some(lo)) if (0xDC00..0xE000).contains(&lo) => {
                        let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        Some((
                            char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER),
                            12,
                        ))
                    }
                    _ => Some((char::REPLACEMENT_CHARACTER, 6)),
                };
            }
            return Some((char::from_u32(hi).unwrap_or(char::REPLACEMENT_CHARACTER), 6));
        }
        _ => char::REPLACEMENT_CHARACTER,
    };
    Some((simple, 2))
}

fn hex4(s: &[u8], i: usize) -> Option<u32> {
    let h = s.get(i..i + 4)?;
    let t = std::str::from_utf8(h).ok()?;
    u32::from_str_radix(t, 16).ok()
}

/// What a walk over an object's members or an array's elements found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// Nothing more until more text arrives.
    NeedMore,
    /// A member (objects: its key) or element begins; its value starts at `start`. The walk
    /// then waits in the value: call [`Members::value_done`] / [`Elements::value_done`] with
    /// its end, or let the walker scan it with `scan_value`.
    Item { key: Option<String>, start: usize },
    /// The value being scanned by the walker ended at this index.
    ValueEnd(usize),
    /// The container closed; the index after it.
    Closed(usize),
    /// Malformed: the walk stops here for good.
    Bad,
}

#[derive(Debug, Clone)]
enum State {
    Open,
    ItemOrClose,
    Key(StrDecode, String),
    Colon(String),
    ValueStart(Option<String>),
    /// In a value: scanned by the walker, or by the caller.
    Value(Option<ValueScan>),
    After,
    Done,
}

/// Walks a container member by member (objects) or element by element (arrays).
#[derive(Debug, Clone)]
struct Walker {
    object: bool,
    pos: usize,
    state: State,
}

impl Walker {
    fn new(start: usize, object: bool) -> Walker {
        Walker {
            object,
            pos: start,
            state: State::Open,
        }
    }

    fn step(&mut self, s: &[u8]) -> Walk {
        let from = self.pos;
        let w = self.walk(s);
        count(self.pos.saturating_sub(from));
        w
    }

    fn walk(&mut self, s: &[u8]) -> Walk {
        let (open, close) = if self.object {
            (b'{', b'}')
        } else {
            (b'[', b']')
        };
        loop {
            match &mut self.state {
                State::Done => return Walk::NeedMore,
                State::Open => {
                    let Some(&b) = s.get(self.pos) else {
                        return Walk::NeedMore;
                    };
                    if b != open {
                        return self.bad();
                    }
                    self.pos += 1;
                    self.state = State::ItemOrClose;
                }
                State::ItemOrClose => {
                    self.pos = skip_ws(s, self.pos);
                    let Some(&b) = s.get(self.pos) else {
                        return Walk::NeedMore;
                    };
                    if b == close {
                        self.pos += 1;
                        self.state = State::Done;
                        return Walk::Closed(self.pos);
                    }
                    if !self.object {
                        self.state = State::ValueStart(None);
                        continue;
                    }
                    if b != b'"' {
                        return self.bad();
                    }
                    self.state = State::Key(StrDecode::new(self.pos), String::new());
                }
                State::Key(dec, key) => match dec.advance(s, key) {
                    None => return Walk::NeedMore,
                    Some(end) => {
                        self.pos = end;
                        self.state = State::Colon(std::mem::take(key));
                    }
                },
                State::Colon(key) => {
                    self.pos = skip_ws(s, self.pos);
                    let Some(&b) = s.get(self.pos) else {
                        return Walk::NeedMore;
                    };
                    if b != b':' {
                        return self.bad();
                    }
                    self.pos += 1;
                    self.state = State::ValueStart(Some(std::mem::take(key)));
                }
                State::ValueStart(key) => {
                    self.pos = skip_ws(s, self.pos);
                    if self.pos >= s.len() {
                        return Walk::NeedMore;
                    }
                    let key = key.take();
                    self.state = State::Value(None);
                    return Walk::Item {
                        key,
                        start: self.pos,
                    };
                }
                State::Value(None) => return Walk::NeedMore,
                State::Value(Some(scan)) => match scan.advance(s) {
                    None => return Walk::NeedMore,
                    Some(end) => {
                        self.pos = end;
                        self.state = State::After;
                        return Walk::ValueEnd(end);
                    }
                },
                State::After => {
                    self.pos = skip_ws(s, self.pos);
                    let Some(&b) = s.get(self.pos) else {
                        return Walk::NeedMore;
                    };
                    if b == b',' {
                        self.pos += 1;
                        self.state = State::ItemOrClose;
                    } else if b == close {
                        self.pos += 1;
                        self.state = State::Done;
                        return Walk::Closed(self.pos);
                    } else {
                        return self.bad();
                    }
                }
            }
        }
    }

    fn bad(&mut self) -> Walk {
        self.state = State::Done;
        Walk::Bad
    }

    fn pos(&self) -> usize {
        self.pos
    }

    fn scan_value(&mut self) {
        if let State::Value(None) = self.state {
            self.state = State::Value(Some(ValueScan::new(self.pos)));
        }
    }

    fn value_pos(&self) -> Option<usize> {
        match &self.state {
            State::Value(Some(scan)) => Some(scan.pos()),
            _ => None,
        }
    }

    fn value_done(&mut self, end: usize) {
        if let State::Value(_) = self.state {
            self.pos = end;
            self.state = State::After;
        }
    }
}

/// An object's members, as they arrive.
#[derive(Debug, Clone)]
pub struct Members(Walker);

impl Members {
    /// A walk over the object whose `{` is at `start`.
    pub fn new(start: usize) -> Members {
        Members(Walker::new(start, true))
    }

    pub fn step(&mut self, s: &[u8]) -> Walk {
        self.0.step(s)
    }

    /// Lets the walker find the current value's end (reported as [`Walk::ValueEnd`]).
    pub fn scan_value(&mut self) {
        self.0.scan_value()
    }

    /// How far a value the walker scans has been read.
    pub fn value_pos(&self) -> Option<usize> {
        self.0.value_pos()
    }

    /// The caller read the current value up to `end`.
    pub fn value_done(&mut self, end: usize) {
        self.0.value_done(end)
    }

    /// Where the walk is (after [`Walk::Bad`]: the byte that was not JSON).
    pub fn pos(&self) -> usize {
        self.0.pos()
    }
}

/// An array's elements, as they arrive.
#[derive(Debug, Clone)]
pub struct Elements(Walker);

impl Elements {
    /// A walk over the array whose `[` is at `start`.
    pub fn new(start: usize) -> Elements {
        Elements(Walker::new(start, false))
    }

    pub fn step(&mut self, s: &[u8]) -> Walk {
        self.0.step(s)
    }

    pub fn scan_value(&mut self) {
        self.0.scan_value()
    }

    pub fn value_done(&mut self, end: usize) {
        self.0.value_done(end)
    }

    /// Where the walk is (after [`Walk::Bad`]: the byte that was not JSON).
    pub fn pos(&self) -> usize {
        self.0.pos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(s: &[u8], cut: usize) -> (String, Option<usize>) {
        let mut d = StrDecode::new(0);
        let mut out = String::new();
        d.advance(&s[..cut], &mut out);
        let end = d.advance(s, &mut out);
        (out, end)
    }

    #[test]
    fn strings_decode_the_same_however_they_arrive() {
        let full = br#""a\"b\n\u00e9\ud83d\ude00c\ud800x" rest"#;
        let want = "a\"b\né😀c\u{fffd}x".to_string();
        for cut in 0..full.len() {
            assert_eq!(
                decode_in_pieces(full, cut),
                (want.clone(), Some(34)),
                "{cut}"
            );
            let mut d = StrDecode::new(0);
            let mut out = String::new();
            assert!(d.advance(&full[..cut], &mut out).is_none() || cut >= 34);
            assert!(want.starts_with(&out), "{cut}: {out:?}");
        }
    }

    #[test]
    fn values_end_where_json_says() {
        let s = br#"{"x": [1, "}"], "y": null} tail"#;
        for cut in 0..s.len() {
            let mut v = ValueScan::new(0);
            v.advance(&s[..cut]);
            assert_eq!(v.advance(s), Some(26), "{cut}");
        }
        assert_eq!(ValueScan::new(0).advance(b"12"), None);
        assert_eq!(ValueScan::new(0).advance(b"12,"), Some(2));
        assert_eq!(ValueScan::new(0).advance(b"\"a\\\"\""), Some(5));
    }

    #[test]
    fn members_and_elements_walk_as_text_arrives() {
        let s = br#"{"name": "f", "arguments": {"x": [1, "}"]}} "#;
        let mut m = Members::new(0);
        let mut seen = Vec::new();
        for cut in 0..=s.len() {
            loop {
                match m.step(&s[..cut]) {
                    Walk::NeedMore => break,
                    Walk::Item { key, start } => {
                        seen.push((key.unwrap(), start));
                        m.scan_value();
                    }
                    Walk::ValueEnd(_) => {}
                    Walk::Closed(end) => seen.push(("}".into(), end)),
                    Walk::Bad => panic!("bad at {cut}"),
                }
            }
        }
        assert_eq!(
            seen,
            vec![
                ("name".to_string(), 9),
                ("arguments".to_string(), 27),
                ("}".to_string(), 43)
            ]
        );
        let mut e = Elements::new(0);
        let s = b"[{}, [1], \"x\"]";
        let mut starts = Vec::new();
        loop {
            match e.step(s) {
                Walk::Item { start, .. } => {
                    starts.push(start);
                    e.scan_value();
                }
                Walk::ValueEnd(_) => {}
                Walk::Closed(end) => {
                    assert_eq!(end, 14);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(starts, vec![1, 5, 10]);
    }

    #[test]
    fn garbage_never_panics() {
        for s in [
            &b"{\"a\\u12"[..],
            b"[[[",
            b"{\"a\":",
            b"\"\\ud800\\u",
            b"{]",
            b"\xff\xfe",
            b"{\"a\" 1}",
        ] {
            for cut in 0..=s.len() {
                let mut m = Members::new(0);
                while !matches!(m.step(&s[..cut]), Walk::NeedMore | Walk::Bad) {
                    m.scan_value();
                }
                let mut e = Elements::new(0);
                while !matches!(e.step(&s[..cut]), Walk::NeedMore | Walk::Bad) {
                    e.scan_value();
                }
                let mut out = String::new();
                StrDecode::new(0).advance(&s[..cut], &mut out);
            }
        }
    }
}
