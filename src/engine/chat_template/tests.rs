//! Unit tests: Python printing, tojson, raise_exception, budgets, the ChatML default.

use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn render(src: &str, ctx: serde_json::Value) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(src)?.render(&ctx, DateTime::parse_iso("2025-01-01T00:00:00"))
}

#[test]
fn values_print_like_python() {
    let out = render(
        "{{ a }} {{ b }} {{ c }} {{ d }} {{ e }} {{ f }}|{{ missing }}|{{ a|string }}",
        json!({"a": null, "b": true, "c": false, "d": 1.0, "e": [1, "x"], "f": {"k": null}}),
    )
    .unwrap();
    assert_eq!(out, "None True False 1.0 [1, 'x'] {'k': None}||None");
}
