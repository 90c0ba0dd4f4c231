//! Reading a reply in a [`ToolFormat`] as it arrives: content and calls, resumably, so each
//! delta costs what it adds (a 4,000-token call is read in linear time, not re-read at every
//! token). What it emits is final: content is only sent once it cannot turn out to be call
//! syntax, a call's header once its name is complete, then its arguments as they grow (LFM2's
//! and Gemma 4's calls, whose syntax is not JSON, once their closing tag arrives: [`enclosed`]).
//!
//! The reply as a whole ([`Reader::reply`]) is exactly what the deltas added up to, so a
//! streamed and a non-streamed reply agree by construction. A reply cut short (`max_tokens`)
//! keeps its partial calls as calls: call syntax never becomes content.

use super::call_json::{CallBody, CallList, CallObject, Progress, Slot};
use super::json_stream::{count, skip_ws, Members, StrDecode, ValueScan, Walk};
use super::{PartialCall, Reply, ToolDelta, ToolFormat};

/// A tagged syntax: calls after `open` (one object or a list), up to `close` if it has one.
#[derive(Debug, Clone, Copy)]
struct Tags {
    open: &'static str,
    close: Option<&'static str>,
}

fn tags(format: ToolFormat) -> Option<Tags> {
    match format {
        // Harmony calls arrive rewritten as Hermes ones (`structured::harmony`).
        ToolFormat::Hermes | ToolFormat::Harmony => Some(Tags {
            open: "<tool_call>",
            close: Some("</tool_call>"),
        }),
        ToolFormat::Mistral => Some(Tags {
            open: "[TOOL_CALLS]",
            close: None,
        }),
        ToolFormat::Phi4 => Some(Tags {
            open: "<|tool_call|>",
            close: Some("<|/tool_call|>"),
        }),
        ToolFormat::Granite => Some(Tags {
            open: "<|tool_call|>",
            close: None,
        }),
        ToolFormat::Generic
        | ToolFormat::Llama3
        | ToolFormat::QwenXml
        | ToolFormat::Lfm2
        | ToolFormat::Gemma4 => None,
    }
}

/// Where a tagged reply is.
#[derive(Debug, Clone)]
enum Tagged {
    /// Text from this index (content, until an opening tag).
    Text(usize),
    /// Just after an opening tag: what follows decides the body.
    Open(usize),
    Body(CallBody),
    /// Mistral Small: `name[ARGS]{...}`, the name from this index (searched for `[ARGS]` up
    /// to the second).
    Named(usize, usize),
    /// Mistral Small's arguments for the last slot, from this index once they start.
    NamedArgs(usize, Option<ValueScan>),
    /// After the calls: the closing tag is expected from here.
    Close(usize),
    /// Not call syntax after all: skipped up to the closing (or next opening) tag.
    Junk(usize),
}

/// Where a Llama 3 reply is: it is either one call object or text, decided by its first two
/// keys.
#[derive(Debug, Clone)]
enum Llama {
    Start,
    Undecided {
        start: usize,
        walk: Members,
        keys: Vec<String>,
    },
    Call(CallObject),
    Text(usize),
    Done,
}

/// The generic envelope's parts.
#[derive(Debug, Clone)]
enum Envelope {
    Start,
    Members(Box<(Members, EnvPart)>),
    Text(usize),
    Done,
}

#[derive(Debug, Clone)]
enum EnvPart {
    None,
    /// `response` as a string: decoded into the content.
    Answer(StrDecode),
    /// `response` as other JSON (under `response_format`): its text is the content.
    RawAnswer(ValueScan, usize),
    Calls(CallList),
}

#[derive(Debug, Clone)]
enum Mode {
    Tagged(Tags, Tagged),
    Xml(xml::Xml),
    Enclosed(enclosed::Syntax, enclosed::Enclosed),
    Llama(Llama),
    Envelope(Envelope),
}

/// One choice's reader.
#[derive(Debug, Clone)]
pub struct Reader {
    format: ToolFormat,
    forced: bool,
    buf: String,
    mode: Mode,
    slots: Vec<Slot>,
    /// Per slot: its index in the reply once its header went out, and the arguments bytes
    /// sent since.
    sent: Vec<Option<(usize, usize)>>,
    started: usize,
    em: Emitter,
    finished: bool,
}

/// Content on its way out.
#[derive(Debug, Clone, Default)]
struct Emitter {
    content: String,
    /// Whitespace at the end of the text so far, held until text follows (whitespace next to
    /// call syntax is layout, not content).
    held_ws: String,
    /// A call came before any content: whitespace opening the content is layout too.
    trim_start: bool,
    out: Vec<ToolDelta>,
}

impl Emitter {
    /// Content as the reply's text shows it: whitespace at its end is held.
    fn text(&mut self, t: &str) {
        let t = if self.trim_start && self.content.is_empty() {
            self.held_ws.clear();
            t.trim_start_matches(|c: char| c.is_ascii_whitespace())
        } else {
            t
        };
        let body = t.trim_end_matches(|c: char| c.is_ascii_whitespace());
        if body.is_empty() {
            self.held_ws.push_str(t);
            return;
        }
        let ws = std::mem::take(&mut self.held_ws);
        self.emit(&ws);
        self.emit(body);
        self.held_ws.push_str(&t[body.len()..]);
    }

    /// Content sent as it is.
    fn emit(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        self.content.push_str(t);
        match self.out.last_mut() {
            Some(ToolDelta::Content(c)) => c.push_str(t),
            _ => self.out.push(ToolDelta::Content(t.to_string())),
        }
    }
}

impl Reader {
    /// A reader for `format`; `forced` when the reply can only be calls (`tool_choice`
    /// "required" or a named function): then nothing it holds is ever content.
    pub fn new(format: ToolFormat, forced: bool) -> Reader {
        let mode = match (format, tags(format), enclosed::Syntax::of(format)) {
            (_, Some(t), _) => Mode::Tagged(t, Tagged::Text(0)),
            (_, None, Some(syn)) => Mode::Enclosed(syn, enclosed::Enclosed::Text(0)),
            (ToolFormat::Llama3, None, _) => Mode::Llama(Llama::Start),
            (ToolFormat::QwenXml, None, _) => Mode::Xml(xml::Xml::Text(0)),
            _ => Mode::Envelope(Envelope::Start),
        };
        Reader {
            format,
            forced,
            buf: String::new(),
            mode,
            slots: Vec::new(),
            sent: Vec::new(),
            started: 0,
            em: Emitter::default(),
            finished: false,
        }
    }

    pub fn format(&self) -> ToolFormat {
        self.format
    }

    /// Calls whose header went out.
    pub fn calls_started(&self) -> usize {
        self.started
    }

    /// Adds text and returns what it makes final.
    pub fn push(&mut self, text: &str) -> Vec<ToolDelta> {
        if self.finished || text.is_empty() {
            return Vec::new();
        }
        self.buf.push_str(text);
        self.run(false);
        self.sync();
        std::mem::take(&mut self.em.out)
    }

    /// No more text will come (the reply ended or was cut short): what is left to send.
    pub fn finish(&mut self) -> Vec<ToolDelta> {
        if self.finished {
            return Vec::new();
        }
        self.run(true);
        self.finished = true;
        self.sync();
        if self.started == 0 {
            let ws = std::mem::take(&mut self.em.held_ws);
            self.em.emit(&ws);
        }
        std::mem::take(&mut self.em.out)
    }

    /// Everything sent so far: the content and the calls whose header went out.
    pub fn reply(&self) -> Reply {
        let mut calls: Vec<(usize, PartialCall)> = self
            .slots
            .iter()
            .zip(&self.sent)
            .filter_map(|(slot, sent)| {
                let (index, _) = (*sent)?;
                let arguments = slot.arguments(&self.buf).to_string();
                Some((
                    index,
                    PartialCall {
                        name: slot.name.clone(),
                        arguments,
                        complete: slot.complete,
                    },
                ))
            })
            .collect();
        calls.sort_by_key(|c| c.0);
        Reply {
            content: self.em.content.clone(),
            calls: calls.into_iter().map(|c| c.1).collect(),
        }
    }

    fn run(&mut self, done: bool) {
        let cx = Cx {
            buf: &self.buf,
            slots: &mut self.slots,
            em: &mut self.em,
            forced: self.forced,
            format: self.format,
            done,
        };
        match &mut self.mode {
            Mode::Tagged(t, st) => tagged(cx, *t, st),
            Mode::Llama(st) => llama(cx, st),
            Mode::Xml(st) => xml::xml(cx, st),
            Mode::Enclosed(syn, st) => enclosed::enclosed(cx, *syn, st),
            Mode::Envelope(st) => envelope(cx, st),
        }
    }

    /// Sends the headers and argument growth of the calls read so far.
    fn sync(&mut self) {
        self.sent.resize(self.slots.len(), None);
        for (slot, sent) in self.slots.iter().zip(self.sent.iter_mut()) {
            if sent.is_none() {
                let Some(name) = &slot.name else {
                    continue;
                };
                self.em.out.push(ToolDelta::CallStart {
                    index: self.started,
                    name: name.clone(),
                });
                *sent = Some((self.started, 0));
                self.started += 1;
            }
            let Some((index, sent)) = sent else {
                continue;
            };
            let args = slot.arguments(&self.buf);
            if args.len() > *sent {
                self.em.out.push(ToolDelta::Arguments {
                    index: *index,
                    fragment: args[*sent..].to_string(),
                });
                *sent = args.len();
            }
        }
    }
}

/// What a format's reader works on: the text so far, the calls, the content.
struct Cx<'a> {
    buf: &'a str,
    slots: &'a mut Vec<Slot>,
    em: &'a mut Emitter,
    forced: bool,
    format: ToolFormat,
    /// No more text will come.
    done: bool,
}

fn tagged(cx: Cx<'_>, t: Tags, st: &mut Tagged) {
    let (buf, s) = (cx.buf, cx.buf.as_bytes());
    loop {
        match st {
            Tagged::Text(from) => {
                let rest = &buf[*from..];
                count(rest.len());
                if let Some(at) = rest.find(t.open) {
                    if !cx.forced {
                        cx.em.text(&rest[..at]);
                    }
                    cx.em.held_ws.clear();
                    *st = Tagged::Open(*from + at + t.open.len());
                    continue;
                }
                let keep = if cx.done {
                    0
                } else {
                    held_prefix(rest, t.open)
                };
                // Forced: only calls can come, so text is never content.
                if !cx.forced {
                    cx.em.text(&rest[..rest.len() - keep]);
                }
                *st = Tagged::Text(buf.len() - keep);
                return;
            }
            Tagged::Open(at) => {
                let i = skip_ws(s, *at);
                *st = match s.get(i) {
                    None => return,
                    Some(b'[' | b'{') => Tagged::Body(CallBody::new(i)),
                    Some(_) if cx.format == ToolFormat::Mistral => Tagged::Named(i, i),
                    Some(_) => Tagged::Junk(i),
                };
            }
            Tagged::Body(body) => match body.advance(s, cx.slots) {
                Progress::More => return,
                Progress::Done(end) => {
                    cx.em.trim_start = true;
                    *st = match t.close {
                        Some(_) => Tagged::Close(end),
                        None => Tagged::Text(end),
                    }
                }
                Progress::Bad(at) => *st = Tagged::Junk(at),
            },
            Tagged::Named(from, searched) => {
                // The name runs up to `[ARGS]`; a name still arriving waits.
                const ARGS: &str = "[ARGS]";
                let look = buf.floor_char_boundary(searched.saturating_sub(ARGS.len()).max(*from));
                count(buf.len() - look);
                let Some(at) = buf[look..].find(ARGS).map(|i| look + i) else {
                    *searched = buf.len();
                    return;
                };
                cx.slots.push(Slot {
                    name: Some(buf[*from..at].trim().to_string()),
                    ..Slot::default()
                });
                *st = Tagged::NamedArgs(at + ARGS.len(), None);
            }
            Tagged::NamedArgs(from, scan) => {
                let Some(slot) = cx.slots.last_mut() else {
                    return;
                };
                let scan = match scan {
                    Some(scan) => scan,
                    None => {
                        let i = skip_ws(s, *from);
                        if i == s.len() {
                            return;
                        }
                        slot.args = Some((i, i));
                        scan.insert(ValueScan::new(i))
                    }
                };
                let end = scan.advance(s);
                if let Some(a) = &mut slot.args {
                    a.1 = scan.pos().min(s.len());
                }
                match end {
                    Some(end) => {
                        slot.complete = true;
                        *st = Tagged::Text(end);
                    }
                    None => {
                        // A bare value that the end of the reply completes.
                        if cx.done {
                            slot.complete = slot
                                .args
                                .is_some_and(|(a, b)| b > a && !matches!(s[a], b'{' | b'[' | b'"'));
                        }
                        return;
                    }
                }
            }
            Tagged::Close(from) => {
                let close = t.close.unwrap_or_default();
                let i = skip_ws(s, *from);
                let rest = &buf[i..];
                if rest.starts_with(close) {
                    *st = Tagged::Text(i + close.len());
                } else if close.starts_with(rest) {
                    return;
                } else {
                    *st = Tagged::Junk(i);
                }
            }
            Tagged::Junk(from) => {
                // Skipped to the closing tag, or to the next opening tag.
                let rest = &buf[*from..];
                count(rest.len());
                let close = t.close.and_then(|c| rest.find(c).map(|i| (i, c.len())));
                let open = rest.find(t.open).map(|i| (i, 0));
                match [close, open].into_iter().flatten().min() {
                    Some((i, len)) => *st = Tagged::Text(*from + i + len),
                    None => {
                        let keep = t
                            .close
                            .map_or(0, |c| held_prefix(rest, c))
                            .max(held_prefix(rest, t.open));
                        *st = Tagged::Junk(buf.len() - keep);
                        return;
                    }
                }
            }
        }
    }
}

fn llama(cx: Cx<'_>, st: &mut Llama) {
    const PY: &str = "<|python_tag|>";
    let (buf, s) = (cx.buf, cx.buf.as_bytes());
    loop {
        match st {
            Llama::Done => return,
            Llama::Start => {
                let mut i = skip_ws(s, 0);
                let rest = &buf[i..];
                if rest.starts_with(PY) {
                    i = skip_ws(s, i + PY.len());
                } else if !rest.is_empty() && PY.starts_with(rest) && !cx.done {
                    return;
                }
                *st = match s.get(i) {
                    None if !cx.done => return,
                    Some(b'{') => Llama::Undecided {
                        start: i,
                        walk: Members::new(i),
                        keys: Vec::new(),
                    },
                    _ if cx.forced => Llama::Done,
                    _ => Llama::Text(0),
                };
            }
            Llama::Undecided { start, walk, keys } => {
                let mut closed = false;
                while keys.len() < 2 && !closed {
                    match walk.step(s) {
                        Walk::NeedMore => break,
                        Walk::Item { key, .. } => {
                            keys.extend(key);
                            walk.scan_value();
                        }
                        Walk::ValueEnd(_) => {}
                        Walk::Closed(_) | Walk::Bad => closed = true,
                    }
                }
                if keys.len() < 2 && !closed && !cx.done {
                    return;
                }
                let call = cx.forced
                    || match &keys[..] {
                        [k, v] => k == "name" && matches!(v.as_str(), "parameters" | "arguments"),
                        // Cut short before its keys were known: a call if it starts like one.
                        [k] => cx.done && !closed && k == "name",
                        [] => cx.done && !closed,
                        _ => false,
                    };
                *st = if call {
                    Llama::Call(CallObject::new(*start, cx.slots))
                } else {
                    Llama::Text(0)
                };
            }
            Llama::Call(c) => match c.advance(s, cx.slots) {
                Progress::More => return,
                Progress::Done(_) | Progress::Bad(_) => *st = Llama::Done,
            },
            Llama::Text(from) => {
                cx.em.emit(&buf[*from..]);
                *st = Llama::Text(buf.len());
                return;
            }
        }
    }
}

fn envelope(cx: Cx<'_>, st: &mut Envelope) {
    let (buf, s) = (cx.buf, cx.buf.as_bytes());
    loop {
        match st {
            Envelope::Done => return,
            Envelope::Start => {
                let i = skip_ws(s, 0);
                *st = match s.get(i) {
                    None => return,
                    Some(b'{') => Envelope::Members(Box::new((Members::new(i), EnvPart::None))),
                    Some(_) if cx.forced => Envelope::Done,
                    Some(_) => Envelope::Text(0),
                };
            }
            Envelope::Text(from) => {
                cx.em.emit(&buf[*from..]);
                *st = Envelope::Text(buf.len());
                return;
            }
            Envelope::Members(m) => {
                let (walk, part) = &mut **m;
                let end = match part {
                    EnvPart::None => None,
                    EnvPart::Answer(dec) => {
                        let mut got = String::new();
                        let end = dec.advance(s, &mut got);
                        cx.em.emit(&got);
                        Some(end)
                    }
                    EnvPart::RawAnswer(scan, sent) => {
                        let end = scan.advance(s);
                        let pos = scan.pos().min(s.len());
                        cx.em.emit(&buf[*sent..pos]);
                        *sent = pos;
                        Some(end)
                    }
                    EnvPart::Calls(list) => match list.advance(s, cx.slots) {
                        Progress::More => Some(None),
                        Progress::Done(end) => Some(Some(end)),
                        Progress::Bad(_) => {
                            *st = Envelope::Done;
                            continue;
                        }
                    },
                };
                match end {
                    None => {}
                    Some(None) => return,
                    Some(Some(end)) => {
                        walk.value_done(end);
                        *part = EnvPart::None;
                    }
                }
                match walk.step(s) {
                    Walk::NeedMore => return,
                    Walk::Item { key, start } => {
                        *part = match (key.as_deref(), s.get(start)) {
                            (Some("response"), Some(b'"')) if !cx.forced => {
                                EnvPart::Answer(StrDecode::new(start))
                            }
                            (Some("response"), _) if !cx.forced => {
                                EnvPart::RawAnswer(ValueScan::new(start), start)
                            }
                            (Some("tool_calls"), Some(b'[')) => {
                                EnvPart::Calls(CallList::new(start))
                            }
                            _ => {
                                walk.scan_value();
                                EnvPart::None
                            }
                        }
                    }
                    Walk::ValueEnd(_) => {}
                    Walk::Closed(_) | Walk::Bad => *st = Envelope::Done,
                }
            }
        }
    }
}

/// The longest suffix of `text` that is a proper prefix of `tag` (text that may be the start
/// of the tag and so cannot be shown yet).
fn held_prefix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&k| text.is_char_boundary(text.len() - k) && text.ends_with(&tag[..k]))
        .unwrap_or(0)
}

mod enclosed;
#[cfg(test)]
mod tests;
mod xml;
