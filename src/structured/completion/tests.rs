//! The steering toward the shortest completion on a small byte-level vocabulary (every
//! character a token, so required keys cost many tokens), driven by a stubborn chooser.

use super::plan;
use crate::structured::bounds::{JsonBounds, LIMITS};
use crate::structured::testkit::{drive, grammars};
use crate::structured::Constraint;
use serde_json::{json, Value};
use std::sync::Arc;

fn constraint(schema: &Value) -> Constraint {
    Constraint::json_schema(grammars(), schema, "response_format", "t")
        .unwrap()
        .closing()
}

#[test]
fn the_plan_writes_required_keys_with_their_shortest_values_and_closes() {
    let schema = json!({
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "opt": {"type": "string"},
            "b": {"type": "string"},
            "c": {"type": "array", "items": {"type": "number"}},
            "d": {"type": "object", "properties": {"e": {"type": "boolean"}}, "required": ["e"]}
        },
        "required": ["a", "b", "c", "d"]
    });
    let c = constraint(&schema);
    let table = Arc::clone(grammars().token_bytes());
    let bounds = JsonBounds::new(Arc::clone(&table), false, LIMITS);
    let text = plan(&c.start(), &bounds, &table, &[]).expect("a plan");
    assert_eq!(
        String::from_utf8(text).unwrap(),
        r#"{"a": 0, "b": "", "c": [], "d": {"e": true}}"#
    );
}

/// Array items of six required keys with long names: on a byte-level vocabulary an item
/// costs about 170 tokens, far more than the 64-token closing margin. A chooser that adds
/// items forever (`,` and `{` first, then the smallest number) is cut inside an item by the
/// margin alone; sized to the shortest completion, it finishes the item and closes in time.
#[test]
fn required_keys_beyond_the_closing_margin_are_written_in_time() {
    let keys: Vec<String> = (0..6).map(|i| format!("a_rather_long_key_{i}")).collect();
    let props: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| (k.clone(), json!({"type": "integer"})))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object", "properties": props, "required": keys,
            "additionalProperties": false
        }}},
        "required": ["items"],
        "additionalProperties": false
    });
    let more = |w: &[u8]| match w {
        b"," | b"{" => 3,
        _ if !w.is_empty() && w.iter().all(u8::is_ascii_digit) => 2,
        _ => 0,
    };
    let c = constraint(&schema);
    for budget in [300, 420, 560] {
        let margin_only = drive(
            c.sequence_within(budget).without_completion(),
            budget,
            &more,
        );
        assert_eq!(
            margin_only, None,
            "budget {budget}: the margin alone closed it"
        );
        let text = drive(c.sequence_within(budget), budget, &more)
            .unwrap_or_else(|| panic!("budget {budget}: not closed"))
            .concat();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let items = v["items"].as_array().unwrap();
        assert!(!items.is_empty(), "{text}");
        for item in items {
            assert_eq!(item.as_object().unwrap().len(), 6, "{text}");
        }
    }
}

/// An unanchored `"pattern": "wifi"` allows any text until the word is written: no state
/// change for a byte search to follow. A chooser writing `a` forever never gets there; the
/// pattern's literal, tried as the way out, closes the string within the budget.
#[test]
fn an_unanchored_pattern_is_closed_by_writing_its_literal() {
    let schema = json!({
        "type": "object",
        "properties": {
            "type": {"type": "string", "pattern": "wifi"},
            "name": {"type": "string", "pattern": "[a-z][a-z0-9]*"}
        },
        "required": ["type", "name"]
    });
    let letters = |w: &[u8]| u32::from(w == b"a");
    let c = constraint(&schema);
    let budget = 80;
    let without = c
        .sequence()
        .with_phrases(Arc::from(Vec::new()))
        .with_budget(budget);
    assert_eq!(drive(without, budget, &letters), None);
    let text = drive(c.sequence_within(budget), budget, &letters)
        .expect("closed within the budget")
        .concat();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert!(v["type"].as_str().unwrap().contains("wifi"), "{text}");
    assert!(!v["name"].as_str().unwrap().is_empty(), "{text}");
}

#[test]
fn the_cost_of_a_text_counts_the_longest_words() {
    let table = grammars().token_bytes();
    // `abc` and `12` are merges of the test vocabulary; the rest are single bytes.
    assert_eq!(table.cost(b"abc12x"), 3);
    assert_eq!(table.cost(b"ab"), 1);
    assert_eq!(table.cost(b""), 0);
}
