//! What LFM2's pythonic calls and Gemma 4's calls share: a cursor over the text between a
//! call's tags that tells a text cut short ([`Stop::Incomplete`]) from one that can never be
//! a call ([`Stop::Bad`]), and the grammar of an argument list in a schema's terms.

use serde_json::{Number, Value};

/// Why the text between the tags is not (yet) calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It ended inside a call: more text could complete it.
    Incomplete,
    /// It is not call syntax, whatever follows.
    Bad,
}

/// The calls read so far: each name once read, its arguments object once its call closed.
pub type BodyCalls = Vec<(String, Option<Value>)>;

/// A position in the text between a call's tags.
pub struct Cursor<'a> {
    t: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(t: &'a str) -> Cursor<'a> {
        Cursor { t, i: 0 }
    }

    pub fn rest(&self) -> &'a str {
        &self.t[self.i..]
    }

    /// The next byte; [`Stop::Incomplete`] at the end of the text.
    pub fn peek(&self) -> Result<u8, Stop> {
        self.t
            .as_bytes()
            .get(self.i)
            .copied()
            .ok_or(Stop::Incomplete)
    }

    /// Steps over the byte [`Cursor::peek`] returned (an ASCII byte).
    pub fn bump(&mut self) {
        self.i += 1;
    }

    pub fn advance(&mut self, n: usize) {
        self.i += n;
    }

    pub fn ws(&mut self) {
        let b = self.t.as_bytes();
        while self.i < b.len() && b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    pub fn expect(&mut self, b: u8) -> Result<(), Stop> {
        if self.peek()? == b {
            self.bump();
            Ok(())
        } else {
            Err(Stop::Bad)
        }
    }

    /// Nothing but the end is left.
    pub fn end(&self) -> Result<(), Stop> {
        if self.i == self.t.len() {
            Ok(())
        } else {
            Err(Stop::Bad)
        }
    }

    /// The literal `s` (Incomplete when the text ends inside it).
    pub fn literal(&mut self, s: &str) -> Result<(), Stop> {
        let rest = self.rest();
        if rest.starts_with(s) {
            self.i += s.len();
            Ok(())
        } else if s.starts_with(rest) {
            Err(Stop::Incomplete)
        } else {
            Err(Stop::Bad)
        }
    }

    /// A name: letters, digits, `_`, `.`, `-` (not starting with a digit); Incomplete when the
    /// text ends inside it, since it could go on.
    pub fn ident(&mut self) -> Result<&'a str, Stop> {
        let b = self.t.as_bytes();
        let start = self.i;
        let mut j = start;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'_' | b'.' | b'-')) {
            j += 1;
        }
        if j == b.len() {
            return Err(Stop::Incomplete);
        }
        if j == start || b[start].is_ascii_digit() {
            return Err(Stop::Bad);
        }
        self.i = j;
        Ok(&self.t[start..j])
    }

    /// A number (Python's or JSON's spelling).
    pub fn number(&mut self) -> Result<Value, Stop> {
        let b = self.t.as_bytes();
        let start = self.i;
        let mut j = start;
        while j < b.len()
            && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'+' | b'-' | b'.' | b'_'))
        {
            j += 1;
        }
        if j == b.len() {
            return Err(Stop::Incomplete);
        }
        let n = number_of(&self.t[start..j]).ok_or(Stop::Bad)?;
        self.i = j;
        Ok(Value::Number(n))
    }

    /// A string in quotes `q` with Python's (and JSON's) escapes.
    pub fn quoted(&mut self, q: u8) -> Result<String, Stop> {
        self.expect(q)?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((k, c)) = chars.next() {
            match c {
                c if c as u32 == q as u32 => {
                    self.i += k + 1;
                    return Ok(out);
                }
                '\\' => {
                    let Some((_, e)) = chars.next() else {
                        return Err(Stop::Incomplete);
                    };
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        '0' => out.push('\0'),
                        '\n' => {}
                        'u' | 'x' | 'U' => {
                            let len = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex: String = chars.by_ref().take(len).map(|p| p.1).collect();
                            if hex.len() < len {
                                return Err(Stop::Incomplete);
                            }
                            let code = u32::from_str_radix(&hex, 16).map_err(|_| Stop::Bad)?;
                            match char::from_u32(code) {
                                Some(c) => out.push(c),
                                // A UTF-16 surrogate (JSON's way past the BMP): its pair follows.
                                None if (0xD800..0xDC00).contains(&code) => {
                                    let pair: String =
                                        chars.by_ref().take(6).map(|p| p.1).collect();
                                    if pair.len() < 6 {
                                        return Err(Stop::Incomplete);
                                    }
                                    let low = pair
                                        .strip_prefix("\\u")
                                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                                        .filter(|l| (0xDC00..0xE000).contains(l))
                                        .ok_or(Stop::Bad)?;
                                    let c = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                                    out.push(char::from_u32(c).ok_or(Stop::Bad)?);
                                }
                                None => return Err(Stop::Bad),
                            }
                        }
                        // `\"`, `\'`, `\\`, `\/`, and any other escaped character as itself.
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        Err(Stop::Incomplete)
    }
}

/// An argument list as a Lark expression: `items` (each an argument's expression, and
/// whether the schema requires it) separated by `sep` (a Lark item), the required ones always,
/// each optional one at most once, required ones first.
pub fn arguments(items: &[(String, bool)], sep: &str) -> String {
    let required: Vec<&str> = items.iter().filter(|i| i.1).map(|i| i.0.as_str()).collect();
    let optional: Vec<&str> = items
        .iter()
        .filter(|i| !i.1)
        .map(|i| i.0.as_str())
        .collect();
    let tail = |from: usize| -> String {
        optional[from..]
            .iter()
            .map(|o| format!(" ({sep} {o})?"))
            .collect()
    };
    if !required.is_empty() {
        let head: Vec<String> = required.iter().map(|r| r.to_string()).collect();
        return format!("{}{}", head.join(&format!(" {sep} ")), tail(0));
    }
    if optional.is_empty() {
        return String::new();
    }
    // All optional: the first one written, then any of those after it.
    let alts: Vec<String> = (0..optional.len())
        .map(|i| format!("{}{}", optional[i], tail(i + 1)))
        .collect();
    format!("({})?", alts.join(" | "))
}

/// A JSON number from its Python text (`1_000` and `1.` are Python's too).
fn number_of(text: &str) -> Option<Number> {
    let t: String = text.chars().filter(|&c| c != '_').collect();
    let t = t.strip_prefix('+').unwrap_or(&t);
    if let Ok(i) = t.parse::<i64>() {
        return Some(i.into());
    }
    if let Ok(u) = t.parse::<u64>() {
        return Some(u.into());
    }
    t.parse::<f64>().ok().and_then(Number::from_f64)
}
