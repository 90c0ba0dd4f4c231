//! The Anthropic request conversion and the reply's stop reasons.

use super::convert::*;
use super::*;
use crate::server::body::parse_json;
use crate::server::output_constraint::Shape;
use crate::server::types::Role;

fn convert_body(body: &str) -> Result<Converted, ApiError> {
    let r: MessagesRequest = parse_json(body.as_bytes())?;
    convert(
        r.system.as_ref(),
        &r.messages,
        r.tools.as_deref(),
        r.tool_choice.as_ref(),
        r.output_config.as_ref().and_then(|o| o.format.as_ref()),
    )
}

#[test]
fn turns_become_chat_messages() {
    let c = convert_body(
        r#"{"max_tokens": 5, "system": [{"type": "text", "text": "be brief"}],
            "messages": [
              {"role": "user", "content": "weather in Paris?"},
              {"role": "assistant", "content": [
                 {"type": "text", "text": "Let me look."},
                 {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
              {"role": "user", "content": [
                 {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                 {"type": "text", "text": "thanks"}]},
              {"role": "assistant", "content": "It is "}]}"#,
    )
    .unwrap();
    let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::User
        ]
    );
    let calls = c.messages[2].tool_calls.as_ref().unwrap();
    assert_eq!(calls[0]["function"]["name"], "weather");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(c.messages[3].tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(c.prefill.as_deref(), Some("It is"));
    assert!(matches!(c.shape, Shape::Free));
}

#[test]
fn bad_blocks_and_tools_name_their_field() {
    let param = |body: &str| match convert_body(body) {
        Err(ApiError::BadRequest { param, .. }) => param.unwrap_or_default(),
        other => panic!("{body}: expected a 400, got {:?}", other.map(|_| ())),
    };
    assert_eq!(
        param(
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}"#
        ),
        "messages[0].content[0].type"
    );
    assert_eq!(
        param(
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}, {"role": "user", "content": "x"}]}"#
        ),
        "messages[0].content[0].type"
    );
    assert_eq!(
        param(
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search", "input_schema": {}}]}"#
        ),
        "tools[0].type"
    );
    assert_eq!(
        param(
            r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "g"}}"#
        ),
        "tool_choice.name"
    );
    assert_eq!(param(r#"{"max_tokens": 5, "messages": []}"#), "messages");
}

#[test]
fn tool_choice_maps_to_openai() {
    let c = convert_body(
        r#"{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true}}"#,
    )
    .unwrap();
    let Shape::Tools(t) = c.shape else {
        panic!("tools expected")
    };
    assert_eq!(t.choice, crate::structured::tools::ToolChoice::Required);
    assert!(!t.parallel);
}

#[test]
fn thinking_sets_enable_thinking() {
    let on = thinking_kwargs(Some(&ThinkingConfig::Enabled {
        budget_tokens: Some(1024),
    }));
    assert_eq!(on.unwrap()["enable_thinking"], true);
    let adaptive = thinking_kwargs(Some(&ThinkingConfig::Adaptive));
    assert_eq!(adaptive.unwrap()["enable_thinking"], true);
    let off = thinking_kwargs(Some(&ThinkingConfig::Disabled));
    assert_eq!(off.unwrap()["enable_thinking"], false);
    assert_eq!(thinking_kwargs(None), None);
}

#[test]
fn a_prefill_continues_or_closes_the_block() {
    use crate::structured::reasoning::ThinkStart::*;
    assert_eq!(after_prefill(None, Some("x")), None);
    for t in [Open, Detect, Closed] {
        assert_eq!(after_prefill(Some(t), None), Some(t));
        assert_eq!(after_prefill(Some(t), Some("")), Some(t));
        assert_eq!(after_prefill(Some(t), Some("a</think>b")), Some(Closed));
    }
    assert_eq!(after_prefill(Some(Open), Some("Let me see")), Some(Open));
    assert_eq!(after_prefill(Some(Detect), Some(" <think>hm")), Some(Open));
    assert_eq!(after_prefill(Some(Detect), Some("1, 2, 3,")), Some(Closed));
}

#[test]
fn stop_reasons() {
    assert_eq!(stop_reason(FinishReason::Length, true, false), "max_tokens");
    assert_eq!(stop_reason(FinishReason::Stop, true, false), "tool_use");
    assert_eq!(
        stop_reason(FinishReason::Stop, false, true),
        "stop_sequence"
    );
    assert_eq!(stop_reason(FinishReason::Stop, false, false), "end_turn");
    assert_eq!(input_of(r#"{"a": 1}"#), json!({"a": 1}));
    assert_eq!(input_of(r#"{"a": "#), json!({}));
}
