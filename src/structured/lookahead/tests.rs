//! The lookahead on a small byte-level vocabulary (the 256 bytes and a few merges), driven
//! by a stubborn chooser standing in for a model that keeps writing the same kind of text.

use crate::structured::testkit::{drive, grammars};
use crate::structured::Constraint;
use serde_json::{json, Value};

/// The reply a chooser writes under `schema` (closing near `budget`), always drawing the
/// allowed token it scores highest (the lowest id among equals); None when `budget` tokens
/// end it unfinished.
fn stubborn(schema: Value, budget: usize, score: &dyn Fn(&[u8]) -> u32) -> Option<String> {
    stubborn_tokens(schema, budget, true, score).map(|t| t.concat())
}

/// [`stubborn`] without closing near the budget.
fn unsteered(schema: Value, budget: usize, score: &dyn Fn(&[u8]) -> u32) -> Option<String> {
    stubborn_tokens(schema, budget, false, score).map(|t| t.concat())
}

/// [`stubborn`]'s reply token by token.
fn stubborn_tokens(
    schema: Value,
    budget: usize,
    closing: bool,
    score: &dyn Fn(&[u8]) -> u32,
) -> Option<Vec<String>> {
    let c = Constraint::json_schema(grammars(), &schema, "response_format", "t")
        .unwrap()
        .closing();
    let seq = if closing {
        c.sequence_within(budget)
    } else {
        c.sequence()
    };
    drive(seq, budget, score)
}

fn digits(w: &[u8]) -> u32 {
    u32::from(!w.is_empty() && w.iter().all(u8::is_ascii_digit)) * 2
}

fn value(text: &str, key: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{text}"))
        .to_string()
}

#[test]
fn a_pattern_that_wants_more_text_before_the_quote_closes_within_the_margin() {
    let schema = json!({
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[0-9]+#[A-Za-z0-9]+"}},
        "required": ["id"]
    });
    // Digits forever: without a budget nothing ends it.
    assert_eq!(unsteered(schema.clone(), 40, &digits), None);
    let text = stubborn(schema, 40, &digits).expect("closed within 40 tokens");
    let id = value(&text, "id");
    let (num, tail) = id.split_once('#').unwrap_or_else(|| panic!("{text}"));
    assert!(
        !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()),
        "{text}"
    );
    assert!(
        !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{text}"
    );
}

#[test]
fn a_date_time_in_endless_fractional_seconds_closes() {
    let schema = json!({
        "type": "object",
        "properties": {"at": {"type": "string", "format": "date-time"}},
        "required": ["at"]
    });
    let frac = |w: &[u8]| digits(w) + u32::from(w == b".");
    assert_eq!(unsteered(schema.clone(), 60, &frac), None);
    let text = stubborn(schema, 60, &frac).expect("closed within 60 tokens");
    let at = value(&text, "at");
    assert!(
        at.len() > 20 && at.ends_with('Z') && at.contains('.'),
        "{text}"
    );
}

#[test]
fn a_uri_several_runs_from_its_end_is_finished_by_the_search() {
    // Each segment is a run of letters the chooser never leaves: the way out is `/`, then
    // runs and separators no single token writes.
    let schema = json!({
        "type": "object",
        "properties": {"schema": {"type": "string",
            "pattern": "^iglu:[a-zA-Z0-9_.-]+/[a-zA-Z0-9_-]+/[a-zA-Z]+/[0-9]+-[0-9]+-[0-9]+$"}},
        "required": ["schema"]
    });
    let letters = |w: &[u8]| u32::from(!w.is_empty() && w.iter().all(u8::is_ascii_lowercase));
    assert_eq!(unsteered(schema.clone(), 64, &letters), None);
    let text = stubborn(schema, 64, &letters).expect("closed within 64 tokens");
    let uri = value(&text, "schema");
    let parts: Vec<&str> = uri.strip_prefix("iglu:").unwrap().split('/').collect();
    assert_eq!(parts.len(), 4, "{text}");
    assert_eq!(parts[3].split('-').count(), 3, "{text}");
}

#[test]
fn one_token_that_ends_the_pattern_is_preferred_to_a_longer_way() {
    // `abc` is one token of the vocabulary, and the pattern needs it at the end.
    let schema = json!({
        "type": "object",
        "properties": {"k": {"type": "string", "pattern": "^[0-9]+abc$"}},
        "required": ["k"]
    });
    assert_eq!(unsteered(schema.clone(), 40, &digits), None);
    let tokens = stubborn_tokens(schema, 40, true, &digits).expect("closed within 40 tokens");
    assert_eq!(tokens[tokens.len() - 3..], ["abc", "\"", "}"], "{tokens:?}");
}
