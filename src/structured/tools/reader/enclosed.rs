//! Calls whose syntax is not JSON, each between an opening and a closing tag: LFM2's pythonic
//! list (`<|tool_call_start|>[f(x=1)]<|tool_call_end|>`, [`crate::structured::tools::pythonic`])
//! and Gemma 4's `<|tool_call>call:f{x:1}<tool_call|>` ([`crate::structured::tools::gemma4`]).
//!
//! Text before an opening tag is content (held while it may be the start of the tag). The
//! text from an opening tag is held until its closing tag, then read whole: calls (sent with
//! their complete arguments) when it parses, the tagged text as content when it can never be
//! a call. A closing tag inside a string value ends nothing (the text then reads as cut
//! short, and the search goes on to the next closing tag). When the reply ends without the
//! closing tag, what was written is read as calls if it is (a call whose arguments did not
//! close stays a call cut short, its arguments empty); call syntax never becomes content.

use super::{held_prefix, Cx};
use crate::structured::tools::call_json::Slot;
use crate::structured::tools::json_stream::count;
use crate::structured::tools::literal::{BodyCalls, Stop};
use crate::structured::tools::{gemma4, pythonic, ToolFormat};

/// One enclosed syntax: its tags and the reader of the text between them.
#[derive(Debug, Clone, Copy)]
pub struct Syntax {
    open: &'static str,
    close: &'static str,
    parse: fn(&str, &mut BodyCalls) -> Result<(), Stop>,
}

impl Syntax {
    pub fn of(format: ToolFormat) -> Option<Syntax> {
        match format {
            ToolFormat::Lfm2 => Some(Syntax {
                open: pythonic::OPEN,
                close: pythonic::CLOSE,
                parse: pythonic::parse_calls,
            }),
            ToolFormat::Gemma4 => Some(Syntax {
                open: gemma4::OPEN,
                close: gemma4::CLOSE,
                parse: gemma4::parse_call,
            }),
            _ => None,
        }
    }
}

/// Where an enclosed reply is.
#[derive(Debug, Clone)]
pub enum Enclosed {
    /// Text from this index (content, until an opening tag).
    Text(usize),
    /// Inside a call: its opening tag at `open`, searched for the closing tag up to
    /// `searched`.
    Call { open: usize, searched: usize },
}

/// Pushes what `calls` holds as slots: complete calls, and one cut short (its name only).
fn push_calls(cx: &mut Cx<'_>, calls: BodyCalls) {
    for (name, args) in calls {
        let complete = args.is_some();
        cx.slots.push(Slot {
            name: Some(name),
            owned: Some(args.map(|a| a.to_string()).unwrap_or_default()),
            complete,
            ..Slot::default()
        });
    }
}

pub(super) fn enclosed(mut cx: Cx<'_>, syn: Syntax, st: &mut Enclosed) {
    let buf = cx.buf;
    loop {
        match st {
            Enclosed::Text(from) => {
                let rest = &buf[*from..];
                count(rest.len());
                if let Some(at) = rest.find(syn.open) {
                    if !cx.forced {
                        cx.em.text(&rest[..at]);
                    }
                    let open = *from + at;
                    *st = Enclosed::Call {
                        open,
                        searched: open + syn.open.len(),
                    };
                    continue;
                }
                let keep = if cx.done {
                    0
                } else {
                    held_prefix(rest, syn.open)
                };
                if !cx.forced {
                    cx.em.text(&rest[..rest.len() - keep]);
                }
                *st = Enclosed::Text(buf.len() - keep);
                return;
            }
            Enclosed::Call { open, searched } => {
                let body_at = *open + syn.open.len();
                let look = buf.floor_char_boundary((*searched).max(body_at));
                count(buf.len() - look);
                let mut calls = BodyCalls::new();
                let Some(close) = buf[look..].find(syn.close).map(|i| look + i) else {
                    if !cx.done {
                        // The search resumes where the closing tag may have begun.
                        *searched = buf.len() - held_prefix(&buf[look..], syn.close);
                        return;
                    }
                    // The reply ended without the closing tag.
                    match (syn.parse)(&buf[body_at..], &mut calls) {
                        Ok(()) | Err(Stop::Incomplete) => {
                            cx.em.held_ws.clear();
                            push_calls(&mut cx, calls);
                        }
                        Err(Stop::Bad) if !cx.forced => cx.em.text(&buf[*open..]),
                        Err(Stop::Bad) => {}
                    }
                    *st = Enclosed::Text(buf.len());
                    return;
                };
                let end = close + syn.close.len();
                match (syn.parse)(&buf[body_at..close], &mut calls) {
                    Ok(()) => {
                        cx.em.held_ws.clear();
                        cx.em.trim_start = true;
                        push_calls(&mut cx, calls);
                        *st = Enclosed::Text(end);
                    }
                    // The closing tag sits inside a value: the call goes on past it.
                    Err(Stop::Incomplete) => *searched = end,
                    Err(Stop::Bad) => {
                        if !cx.forced {
                            cx.em.text(&buf[*open..end]);
                        }
                        *st = Enclosed::Text(end);
                    }
                }
            }
        }
    }
}
