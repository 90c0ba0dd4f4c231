//! Call objects as they arrive: `{"name": ..., "arguments"|"parameters": {...}}` alone or in a
//! JSON list, read resumably into [`Slot`]s (a call's name once its string is complete, its
//! arguments as a growing span of the buffer).

use super::json_stream::{skip_ws, Elements, Members, StrDecode, Walk};

/// One call being read: where its parts are in the buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slot {
    /// Known once its string is complete.
    pub name: Option<String>,
    /// The arguments' span so far (raw JSON text, as the model wrote it).
    pub args: Option<(usize, usize)>,
    /// The arguments' JSON text so far when the reader writes it (formats whose calls are not
    /// JSON, as Qwen3.5's XML): then `args` is unused.
    pub owned: Option<String>,
    /// The call's object closed (with a name).
    pub complete: bool,
}

impl Slot {
    /// The arguments' JSON text so far, in `buf` (the text the reader was given).
    pub fn arguments<'a>(&'a self, buf: &'a str) -> &'a str {
        match (&self.owned, self.args) {
            (Some(o), _) => o,
            (None, Some((a, b))) => &buf[a..b],
            (None, None) => "",
        }
    }
}

/// What a reader of one JSON part reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Waiting for more text.
    More,
    /// The part ended; the index after it.
    Done(usize),
    /// Malformed: reading stopped at this index.
    Bad(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Name(usize),
    Args,
    Other,
}

/// One call object starting at a `{`, read into `slots[slot]`.
#[derive(Debug, Clone)]
pub struct CallObject {
    walk: Members,
    slot: usize,
    part: Part,
}

impl CallObject {
    /// Reads the object at `start` into a new slot pushed on `slots`.
    pub fn new(start: usize, slots: &mut Vec<Slot>) -> CallObject {
        slots.push(Slot::default());
        CallObject {
            walk: Members::new(start),
            slot: slots.len() - 1,
            part: Part::Other,
        }
    }

    pub fn advance(&mut self, s: &[u8], slots: &mut [Slot]) -> Progress {
        let progress = loop {
            match self.walk.step(s) {
                Walk::NeedMore => break Progress::More,
                Walk::Item { key, start } => {
                    self.part = match key.as_deref() {
                        Some("name") if s.get(start) == Some(&b'"') => Part::Name(start),
                        Some("arguments" | "parameters") => {
                            slots[self.slot].args = Some((start, start));
                            Part::Args
                        }
                        _ => Part::Other,
                    };
                    self.walk.scan_value();
                }
                Walk::ValueEnd(end) => {
                    match self.part {
                        Part::Name(start) => {
                            let mut name = String::new();
                            StrDecode::new(start).advance(&s[..end], &mut name);
                            slots[self.slot].name = Some(name);
                        }
                        Part::Args => {
                            if let Some(a) = &mut slots[self.slot].args {
                                a.1 = end;
                            }
                        }
                        Part::Other => {}
                    }
                    self.part = Part::Other;
                }
                Walk::Closed(end) => {
                    let slot = &mut slots[self.slot];
                    slot.complete = slot.name.is_some();
                    break Progress::Done(end);
                }
                Walk::Bad => break Progress::Bad(self.walk.pos()),
            }
        };
        if self.part == Part::Args {
            if let (Some(a), Some(pos)) = (&mut slots[self.slot].args, self.walk.value_pos()) {
                a.1 = pos;
            }
        }
        progress
    }
}

/// A JSON list of call objects starting at a `[` (elements that are not objects are skipped).
#[derive(Debug, Clone)]
pub struct CallList {
    walk: Elements,
    current: Option<CallObject>,
}

impl CallList {
    pub fn new(start: usize) -> CallList {
        CallList {
            walk: Elements::new(start),
            current: None,
        }
    }

    pub fn advance(&mut self, s: &[u8], slots: &mut Vec<Slot>) -> Progress {
        loop {
            if let Some(call) = &mut self.current {
                match call.advance(s, slots) {
                    Progress::More => return Progress::More,
                    Progress::Done(end) => {
                        self.current = None;
                        self.walk.value_done(end);
                    }
                    Progress::Bad(at) => return Progress::Bad(at),
                }
            }
            match self.walk.step(s) {
                Walk::NeedMore => return Progress::More,
                Walk::Item { start, .. } => {
                    if s.get(start) == Some(&b'{') {
                        self.current = Some(CallObject::new(start, slots));
                    } else {
                        self.walk.scan_value();
                    }
                }
                Walk::ValueEnd(_) => {}
                Walk::Closed(end) => return Progress::Done(end),
                Walk::Bad => return Progress::Bad(self.walk.pos()),
            }
        }
    }
}

/// Calls after an opening tag: one object, or a list of them, whichever the first byte after
/// any whitespace says.
#[derive(Debug, Clone)]
pub enum CallBody {
    Start(usize),
    Object(CallObject),
    List(CallList),
}

impl CallBody {
    pub fn new(start: usize) -> CallBody {
        CallBody::Start(start)
    }

    /// `Bad` also when the body is neither an object nor a list.
    pub fn advance(&mut self, s: &[u8], slots: &mut Vec<Slot>) -> Progress {
        loop {
            match self {
                CallBody::Start(at) => {
                    let i = skip_ws(s, *at);
                    match s.get(i) {
                        None => return Progress::More,
                        Some(b'{') => *self = CallBody::Object(CallObject::new(i, slots)),
                        Some(b'[') => *self = CallBody::List(CallList::new(i)),
                        Some(_) => return Progress::Bad(i),
                    }
                }
                CallBody::Object(o) => return o.advance(s, slots),
                CallBody::List(l) => return l.advance(s, slots),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_the_same_however_it_arrives() {
        let s = br#"{"arguments": {"code": "</tool_call> \"}\""}, "name": "python"} "#;
        let whole = {
            let mut slots = Vec::new();
            let mut c = CallObject::new(0, &mut slots);
            assert_eq!(c.advance(s, &mut slots), Progress::Done(s.len() - 1));
            slots
        };
        assert_eq!(whole[0].name.as_deref(), Some("python"));
        let (a, b) = whole[0].args.unwrap();
        assert_eq!(&s[a..b], br#"{"code": "</tool_call> \"}\""}"#);
        assert!(whole[0].complete);
        for cut in 0..s.len() {
            let mut slots = Vec::new();
            let mut c = CallObject::new(0, &mut slots);
            let first = c.advance(&s[..cut], &mut slots);
            assert!(first == Progress::More || cut == s.len() - 1, "{cut}");
            if let Some((a, b)) = slots[0].args {
                assert!(b <= cut && s[a..].starts_with(&s[a..b]), "{cut}");
            }
            c.advance(s, &mut slots);
            assert_eq!(slots, whole, "{cut}");
        }
    }

    #[test]
    fn lists_and_bodies() {
        let s = br#" [{"name": "a", "arguments": {}}, 3, {"name": "b", "arguments": {"x": 1}}]"#;
        let mut slots = Vec::new();
        let mut b = CallBody::new(0);
        assert_eq!(b.advance(s, &mut slots), Progress::Done(s.len()));
        let names: Vec<_> = slots.iter().map(|s| s.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        let mut slots = Vec::new();
        assert_eq!(
            CallBody::new(0).advance(b"  x", &mut slots),
            Progress::Bad(2)
        );
    }
}
