//! Qwen3.5's and Qwen3-Coder's XML calls, as their templates write them:
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=ARG>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! A value is written raw: a string as its text, any other JSON value as its JSON. The
//! arguments object is rebuilt from the parameters, one member per closed parameter (so a
//! stream sends it a parameter at a time): a value that parses as JSON other than a string
//! is that value, anything else is a string (a string parameter whose text reads as a
//! number is read as the number; the reader does not see the tools' schemas).

use super::{held_prefix, Cx};
use crate::structured::tools::call_json::Slot;
use crate::structured::tools::json_stream::{count, skip_ws};
use serde_json::Value;

pub const OPEN: &str = "<tool_call>";
pub const CLOSE: &str = "</tool_call>";
const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

/// Where an XML reply is.
#[derive(Debug, Clone)]
pub enum Xml {
    /// Text from this index (content, until `<tool_call>`).
    Text(usize),
    /// After `<tool_call>`: `<function=` expected.
    Open(usize),
    /// The function's name from this index, up to `>`.
    Name(usize),
    /// Between parameters: `<parameter=` or `</function>` expected.
    Params(usize),
    /// A parameter's name from this index, up to `>`.
    ParamName(usize),
    /// A parameter's value from this index (named), up to `</parameter>`.
    Value(usize, String),
    /// After `</function>`: `</tool_call>` expected.
    Close(usize),
    /// Not call syntax after all: skipped to the closing (or next opening) tag.
    Junk(usize),
}

/// What the text from `at` shows of `tag`: all of it (the index after it), maybe (the text
/// so far is its start), or not.
enum Seen {
    Tag(usize),
    Maybe,
    Not,
}

fn see(buf: &str, at: usize, tag: &str) -> Seen {
    let rest = &buf[at..];
    if rest.starts_with(tag) {
        Seen::Tag(at + tag.len())
    } else if tag.starts_with(rest) {
        Seen::Maybe
    } else {
        Seen::Not
    }
}

/// A parameter's raw value as JSON text.
fn value_json(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw.trim()) {
        Ok(v) if !v.is_string() => v.to_string(),
        _ => Value::String(raw.to_string()).to_string(),
    }
}

pub(super) fn xml(cx: Cx<'_>, st: &mut Xml) {
    let (buf, s) = (cx.buf, cx.buf.as_bytes());
    loop {
        match st {
            Xml::Text(from) => {
                let rest = &buf[*from..];
                count(rest.len());
                if let Some(at) = rest.find(OPEN) {
                    if !cx.forced {
                        cx.em.text(&rest[..at]);
                    }
                    cx.em.held_ws.clear();
                    *st = Xml::Open(*from + at + OPEN.len());
                    continue;
                }
                let keep = if cx.done { 0 } else { held_prefix(rest, OPEN) };
                if !cx.forced {
                    cx.em.text(&rest[..rest.len() - keep]);
                }
                *st = Xml::Text(buf.len() - keep);
                return;
            }
            Xml::Open(at) => {
                let i = skip_ws(s, *at);
                *st = match see(buf, i, FUNCTION) {
                    Seen::Tag(next) => Xml::Name(next),
                    Seen::Maybe => return,
                    Seen::Not => Xml::Junk(i),
                };
            }
            Xml::Name(from) => {
                let Some(gt) = buf[*from..].find('>').map(|i| *from + i) else {
                    return;
                };
                cx.slots.push(Slot {
                    name: Some(buf[*from..gt].trim().to_string()),
                    owned: Some(String::new()),
                    ..Slot::default()
                });
                *st = Xml::Params(gt + 1);
            }
            Xml::Params(at) => {
                let i = skip_ws(s, *at);
                let Some(slot) = cx.slots.last_mut() else {
                    return;
                };
                match (see(buf, i, PARAMETER), see(buf, i, FUNCTION_END)) {
                    (Seen::Tag(next), _) => *st = Xml::ParamName(next),
                    (_, Seen::Tag(next)) => {
                        let args = slot.owned.get_or_insert_with(String::new);
                        args.push_str(if args.is_empty() { "{}" } else { "}" });
                        slot.complete = true;
                        cx.em.trim_start = true;
                        *st = Xml::Close(next);
                    }
                    (Seen::Maybe, _) | (_, Seen::Maybe) => return,
                    _ => *st = Xml::Junk(i),
                }
            }
            Xml::ParamName(from) => {
                let Some(gt) = buf[*from..].find('>').map(|i| *from + i) else {
                    return;
                };
                let name = buf[*from..gt].trim().to_string();
                // The value starts on the next line.
                let start = if s.get(gt + 1) == Some(&b'\n') {
                    gt + 2
                } else if gt + 1 == s.len() && !cx.done {
                    return;
                } else {
                    gt + 1
                };
                *st = Xml::Value(start, name);
            }
            Xml::Value(from, name) => {
                let rest = &buf[*from..];
                count(rest.len());
                let Some(end) = rest.find(PARAMETER_END) else {
                    return;
                };
                let raw = rest[..end].strip_suffix('\n').unwrap_or(&rest[..end]);
                let Some(slot) = cx.slots.last_mut() else {
                    return;
                };
                let args = slot.owned.get_or_insert_with(String::new);
                args.push_str(if args.is_empty() { "{" } else { ", " });
                args.push_str(&Value::String(std::mem::take(name)).to_string());
                args.push_str(": ");
                args.push_str(&value_json(raw));
                *st = Xml::Params(*from + end + PARAMETER_END.len());
            }
            Xml::Close(at) => {
                let i = skip_ws(s, *at);
                *st = match see(buf, i, CLOSE) {
                    Seen::Tag(next) => Xml::Text(next),
                    Seen::Maybe => return,
                    Seen::Not => Xml::Junk(i),
                };
            }
            Xml::Junk(from) => {
                let rest = &buf[*from..];
                count(rest.len());
                let close = rest.find(CLOSE).map(|i| (i, CLOSE.len()));
                let open = rest.find(OPEN).map(|i| (i, 0));
                match [close, open].into_iter().flatten().min() {
                    Some((i, len)) => *st = Xml::Text(*from + i + len),
                    None => {
                        let keep = held_prefix(rest, CLOSE).max(held_prefix(rest, OPEN));
                        *st = Xml::Junk(buf.len() - keep);
                        return;
                    }
                }
            }
        }
    }
}
