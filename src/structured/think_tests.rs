//! Tests of `structured::think` (the free think part before a constrained answer), apart
//! from it so that the think part depends on neither the test kit nor the grammar compiler.

use super::think::*;
use crate::structured::reasoning::{ThinkStart, CLOSE};
use crate::structured::testkit::{drive, grammars, tokenizer};
use crate::structured::Constraint;
use serde_json::{json, Value};
use std::sync::Arc;

fn frame(start: ThinkStart, forced: bool) -> Arc<ThinkFrame> {
    let table = Arc::clone(grammars().token_bytes());
    Arc::new(ThinkFrame::new(start, &tokenizer(), table, forced).unwrap())
}

fn answer(start: ThinkStart) -> Constraint {
    let f = frame(start, true);
    let (prefix, rules) = f.prefix();
    let schema = json!({"type": "object", "properties": {"x": {"type": "integer"}},
                        "required": ["x"], "additionalProperties": false});
    Constraint::json_schema_after(grammars(), &prefix, &rules, &schema, "response_format", "t")
        .unwrap()
        .closing()
        .thinking(f)
}

/// The reply written by a chooser that prefers `prefer` (byte by byte, in order of
/// preference), split at `</think>`.
fn write(c: &Constraint, budget: usize, prefer: &'static [u8]) -> (String, Value) {
    let score = move |w: &[u8]| match w {
        [b] => prefer
            .iter()
            .rev()
            .position(|p| p == b)
            .map_or(0, |i| i as u32 + 1),
        _ => 0,
    };
    let text = drive(c.sequence_within(budget), budget, &score)
        .expect("the reply ends within its budget")
        .concat();
    let (think, rest) = text.split_once(CLOSE).unwrap_or(("", &text));
    (
        think.to_string(),
        serde_json::from_str(rest.trim_start()).expect(&text),
    )
}

#[test]
fn an_endless_thought_is_closed_within_the_reserve_and_the_json_follows() {
    let c = answer(ThinkStart::Open);
    let (think, json) = write(&c, 60, b"a");
    assert_eq!(
        think,
        "a".repeat(30),
        "the think part ends at half the budget"
    );
    assert!(json["x"].is_number(), "{json}");
}

#[test]
fn a_thought_that_closes_itself_is_followed_by_the_json() {
    let c = answer(ThinkStart::Open);
    // `b`, then the close tag's bytes in order, then JSON.
    let (think, json) = write(&c, 60, b"</think>{\"x: 1}");
    assert!(!think.contains('a'), "{think}");
    assert!(json["x"].is_number(), "{json}");
}

#[test]
fn a_reply_that_may_think_may_also_answer_at_once() {
    let c = answer(ThinkStart::Detect);
    let (think, json) = write(&c, 60, b"{\"x: 1}");
    assert_eq!(think, "");
    assert!(json["x"].is_number(), "{json}");
    // Opening the block, it is closed in time too.
    let (think, json) = write(&c, 60, b"<think>a");
    assert!(think.starts_with("<think><"), "{think}");
    assert!(json["x"].is_number(), "{json}");
}

#[test]
fn a_call_grammar_is_wrapped_behind_the_think_part() {
    let f = frame(ThinkStart::Open, true);
    let g = f.wrap("start: \"<call>\" %json {\"type\": \"integer\"}\n");
    assert!(
        g.starts_with("start: think_part after_think\nafter_think: \"<call>\""),
        "{g}"
    );
    let c = Constraint::lark(grammars(), &g, "tools", "t", true)
        .unwrap()
        .thinking(f);
    let text = drive(c.sequence_within(40), 40, &|w: &[u8]| u32::from(w == b"a"))
        .expect("ends")
        .concat();
    let (think, call) = text.split_once(CLOSE).expect(&text);
    assert_eq!(think, "a".repeat(20));
    let n: i64 = call
        .trim_start()
        .strip_prefix("<call>")
        .expect(&text)
        .parse()
        .unwrap();
    let _ = n;
}

#[test]
fn auto_replies_think_until_max_tokens() {
    let f = frame(ThinkStart::Open, false);
    let g = f.wrap("start: /(?s:.*)/\n");
    let c = Constraint::lark(grammars(), &g, "tools", "t", false)
        .unwrap()
        .thinking(f);
    assert!(drive(c.sequence_within(30), 30, &|w: &[u8]| u32::from(w == b"a")).is_none());
}

#[test]
fn the_budget_finds_where_the_structured_part_starts() {
    let f = frame(ThinkStart::Detect, true);
    let words = crate::structured::vocab::token_words(&tokenizer());
    let id = |w: &str| words.iter().position(|x| x == w.as_bytes()).unwrap() as u32;
    let mut b = f.budget(100);
    assert_eq!(b.commit(id(" ")), None);
    assert_eq!(b.commit(id("{")), Some(0));
    assert!(!b.active());
    let mut b = f.budget(100);
    for c in "<think>ab</think".chars() {
        assert_eq!(b.commit(id(&c.to_string())), None);
    }
    assert_eq!(b.commit(id(">")), Some(1));
    assert_eq!(b.commit(id("{")), Some(0));
}
