//! Earlier calls and their results as the model's tool format shows them to its template:
//! - Generic: an assistant message's calls become the envelope it would have written;
//! - the native formats: each call's `arguments` string becomes the object templates print
//!   (with `tojson`, or key by key as Qwen3.5's and Gemma 4's do);
//! - Gemma 4: its template renders a call's results inside the assistant turn
//!   (`tool_responses`), not as `tool` turns, so the `tool` messages after an assistant's
//!   calls (and the assistant's answer after them) fold into that message, as llama.cpp
//!   does for this template;
//! - LFM2: a template that renders no calls gets them in the assistant's text, where the
//!   model wrote them ([`lfm2_content`], applied when the prompt is rendered, so the call
//!   syntax stays markup and only the client's strings are protected).

use crate::server::types::{ChatMessage, MessageContent, Role};
use crate::structured::tools::{generic, pythonic, ToolFormat};
use serde_json::{json, Value};

/// The conversation as `format`'s template takes it (see the module docs).
pub fn history(mut messages: Vec<ChatMessage>, format: ToolFormat) -> Vec<ChatMessage> {
    for m in &mut messages {
        let Some(calls) = m.tool_calls.take() else {
            continue;
        };
        if calls.is_empty() {
            continue;
        }
        if format == ToolFormat::Generic {
            let text = generic::render_calls(&calls);
            m.content = Some(MessageContent::Text(text));
        } else {
            let calls = calls
                .into_iter()
                .map(|mut c| {
                    if let Some(Value::String(s)) = c.pointer("/function/arguments").cloned() {
                        if let Ok(v) = serde_json::from_str::<Value>(&s) {
                            c["function"]["arguments"] = v;
                        }
                    }
                    c
                })
                .collect();
            m.tool_calls = Some(calls);
        }
    }
    if format == ToolFormat::Gemma4 {
        messages = gemma4_turns(messages);
    }
    messages
}

fn has_calls(m: &ChatMessage) -> bool {
    m.role == Role::Assistant && m.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
}

/// Each assistant message with calls, the `tool` messages after it (as `tool_responses`,
/// named by the call they answer in order) and the assistant's answer after those (as its
/// content) become one assistant message.
fn gemma4_turns(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut it = messages.into_iter().peekable();
    while let Some(mut m) = it.next() {
        if !has_calls(&m) {
            out.push(m);
            continue;
        }
        let calls = m.tool_calls.clone().unwrap_or_default();
        let mut responses = Vec::new();
        while let Some(t) = it.next_if(|t| t.role == Role::Tool) {
            let text = t.content.as_ref().map(|c| c.text()).unwrap_or_default();
            let response = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            let name = calls
                .get(responses.len())
                .and_then(|c| c.pointer("/function/name"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| t.tool_call_id.clone())
                .unwrap_or_default();
            responses.push(json!({"name": name, "response": response}));
        }
        // The text that went with the calls is not rendered by this template (it prints
        // the content after the results): the answer after the results takes its place.
        m.content = it
            .next_if(|n| {
                n.role == Role::Assistant
                    && !has_calls(n)
                    && n.content.as_ref().is_some_and(|c| !c.text().is_empty())
            })
            .and_then(|n| n.content);
        if !responses.is_empty() {
            m.tool_responses = Some(responses);
        }
        out.push(m);
    }
    out
}

/// An assistant message's text for an LFM2 template that renders no calls: its calls in the
/// model's syntax, then its text (None when the template renders calls itself, or there
/// are none).
pub fn lfm2_content(format: ToolFormat, template: &str, m: &ChatMessage) -> Option<String> {
    if format != ToolFormat::Lfm2 || template.contains("tool_calls") {
        return None;
    }
    let calls = m.tool_calls.as_ref().filter(|c| !c.is_empty())?;
    let text = m.content.as_ref().map(|c| c.text()).unwrap_or_default();
    Some(format!("{}{text}", pythonic::render_calls(calls)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> Value {
        json!({"id": "c", "type": "function", "function": {"name": name, "arguments": args}})
    }

    #[test]
    fn gemma4_folds_results_and_the_answer_into_the_calling_turn() {
        let messages = vec![
            ChatMessage::text(Role::User, "Weather?".into()),
            ChatMessage {
                tool_calls: Some(vec![
                    call("get_weather", r#"{"city": "Paris"}"#),
                    call("get_time", "{}"),
                ]),
                ..ChatMessage::text(Role::Assistant, "Let me look.".into())
            },
            ChatMessage {
                tool_call_id: Some("c".into()),
                ..ChatMessage::text(Role::Tool, r#"{"temp": 18}"#.into())
            },
            ChatMessage::text(Role::Tool, "noon".into()),
            ChatMessage::text(Role::Assistant, "18 C at noon.".into()),
            ChatMessage::text(Role::User, "Thanks".into()),
        ];
        let out = history(messages, ToolFormat::Gemma4);
        assert_eq!(out.len(), 3);
        let m = &out[1];
        assert_eq!(
            m.tool_calls.as_ref().unwrap()[0]["function"]["arguments"]["city"],
            "Paris"
        );
        assert_eq!(
            m.tool_responses.as_ref().unwrap(),
            &vec![
                json!({"name": "get_weather", "response": {"temp": 18}}),
                json!({"name": "get_time", "response": "noon"}),
            ]
        );
        assert_eq!(m.content.as_ref().unwrap().text(), "18 C at noon.");
        assert_eq!(out[2].content.as_ref().unwrap().text(), "Thanks");
        // Other formats keep the tool turns.
        let other = history(
            vec![
                ChatMessage {
                    tool_calls: Some(vec![call("f", "{}")]),
                    ..ChatMessage::text(Role::Assistant, String::new())
                },
                ChatMessage::text(Role::Tool, "x".into()),
            ],
            ToolFormat::Hermes,
        );
        assert_eq!(other.len(), 2);
    }

    #[test]
    fn lfm2_calls_go_into_the_text_only_where_the_template_shows_none() {
        let m = ChatMessage {
            tool_calls: Some(vec![call("f", r#"{"x": "a"}"#)]),
            ..ChatMessage::text(Role::Assistant, "Done.".into())
        };
        assert_eq!(
            lfm2_content(ToolFormat::Lfm2, "List of tools: <|tool_list_start|>", &m).unwrap(),
            "<|tool_call_start|>[f(x=\"a\")]<|tool_call_end|>Done."
        );
        assert_eq!(
            lfm2_content(ToolFormat::Lfm2, "message.tool_calls", &m),
            None
        );
        assert_eq!(lfm2_content(ToolFormat::Hermes, "", &m), None);
    }
}
