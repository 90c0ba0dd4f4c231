//! A Responses request as kiln's chat request: `instructions` a system message, then the
//! stored conversation of `previous_response_id`, then the input items (messages as chat
//! messages, `function_call` items an assistant's `tool_calls`, `function_call_output` items
//! `tool` messages); `tools`, `tool_choice` and `text.format` the output constraint chat
//! uses. And back: a reply's output as the assistant message the next turn reads.

use crate::server::error::ApiError;
use crate::server::output_constraint::{self as shapes, Shape, ToolRequest};
use crate::server::types::responses::*;
use crate::server::types::{
    ChatMessage, FunctionDef, FunctionName, NamedToolChoice, Role, Tool, ToolChoiceSpec,
};
use serde_json::{json, Value};
use std::collections::HashMap;

/// A request converted.
pub struct Converted {
    /// What the model reads: instructions, history, input.
    pub messages: Vec<ChatMessage>,
    /// This request's input alone (what a stored turn keeps).
    pub input: Vec<ChatMessage>,
    pub shape: Shape,
}

/// A call as chat's `tool_calls` entry.
pub fn tool_call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": call_id, "type": "function",
           "function": {"name": name, "arguments": arguments}})
}

/// The input items as chat messages. `names` maps the call ids of the history to their
/// function names (a `tool` message carries its function's name for templates that print it).
fn input_messages(
    input: Option<&ResponseInput>,
    names: &mut HashMap<String, String>,
) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match input {
        None => return Ok(Vec::new()),
        Some(ResponseInput::Text(s)) => return Ok(vec![ChatMessage::text(Role::User, s.clone())]),
        Some(ResponseInput::Items(items)) => items,
    };
    let mut out: Vec<ChatMessage> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            InputItem::Message(m) => {
                let role = match m.role {
                    InputRole::User => Role::User,
                    InputRole::Assistant => Role::Assistant,
                    InputRole::System => Role::System,
                    InputRole::Developer => Role::Developer,
                };
                out.push(ChatMessage::text(role, m.content.text()));
            }
            InputItem::FunctionCall(c) => {
                if c.call_id.is_empty() {
                    return Err(ApiError::bad(
                        format!("input[{i}].call_id"),
                        "a function_call needs a call_id",
                    ));
                }
                names.insert(c.call_id.clone(), c.name.clone());
                let call = tool_call(&c.call_id, &c.name, &c.arguments);
                // Calls right after an assistant message (or another call) belong to it.
                match out.last_mut() {
                    Some(m) if m.role == Role::Assistant => {
                        m.tool_calls.get_or_insert_with(Vec::new).push(call)
                    }
                    _ => out.push(ChatMessage {
                        tool_calls: Some(vec![call]),
                        ..ChatMessage::text(Role::Assistant, String::new())
                    }),
                }
            }
            InputItem::FunctionCallOutput(o) => out.push(ChatMessage {
                tool_call_id: Some(o.call_id.clone()),
                name: names.get(&o.call_id).cloned(),
                ..ChatMessage::text(Role::Tool, o.output.text())
            }),
            InputItem::Reasoning(_) => {}
        }
    }
    Ok(out)
}

/// Responses' function tools as chat's, and `tool_choice` as chat's.
fn tools(req: &ResponsesRequest) -> Result<Option<ToolRequest>, ApiError> {
    let mut list = Vec::new();
    for (i, t) in req.tools.as_deref().unwrap_or_default().iter().enumerate() {
        if t.kind != "function" {
            return Err(ApiError::bad(
                format!("tools[{i}].type"),
                format!(
                    "only function tools are supported, got {:?} (kiln has no built-in tools)",
                    t.kind
                ),
            ));
        }
        let Some(name) = t.name.clone() else {
            return Err(ApiError::bad(
                format!("tools[{i}].name"),
                "a function tool needs a name",
            ));
        };
        list.push(Tool {
            kind: "function".to_string(),
            function: FunctionDef {
                name,
                description: t.description.clone(),
                parameters: t.parameters.clone(),
                strict: t.strict,
            },
        });
    }
    let choice = match &req.tool_choice {
        None => None,
        Some(ResponsesToolChoice::Mode(m)) => Some(ToolChoiceSpec::Mode(m.clone())),
        Some(ResponsesToolChoice::Function(f)) => {
            if f.kind != "function" {
                return Err(ApiError::bad(
                    "tool_choice.type",
                    format!(
                        "tool_choice must be \"none\", \"auto\", \"required\" or a function, got type {:?}",
                        f.kind
                    ),
                ));
            }
            let Some(name) = f.name.clone() else {
                return Err(ApiError::bad(
                    "tool_choice.name",
                    "a function tool_choice needs a name",
                ));
            };
            Some(ToolChoiceSpec::Named(NamedToolChoice {
                kind: "function".to_string(),
                function: FunctionName { name },
            }))
        }
    };
    shapes::tool_request(Some(&list), choice.as_ref(), req.parallel_tool_calls).map_err(|e| {
        match e {
            // Chat's field names, said the Responses way (tools are flat here).
            ApiError::BadRequest {
                message,
                param,
                code,
            } => ApiError::BadRequest {
                message,
                param: param.map(|p| p.replace(".function.", ".")),
                code,
            },
            other => other,
        }
    })
}

/// `text.format` as a shape.
fn text_format(text: Option<&TextConfig>) -> Shape {
    match text.and_then(|t| t.format.as_ref()) {
        None | Some(TextFormat::Text) => Shape::Free,
        Some(TextFormat::JsonObject) => Shape::Json {
            schema: json!({"type": "object"}),
            param: "text.format",
            label: "json_object".to_string(),
        },
        Some(TextFormat::JsonSchema { name, schema, .. }) => Shape::Json {
            schema: schema.clone(),
            param: "text.format.schema",
            label: format!("json_schema:{name}"),
        },
    }
}

/// The request as chat messages and a shape, after `history` (the stored conversation of
/// `previous_response_id`).
pub fn convert(req: &ResponsesRequest, history: Vec<ChatMessage>) -> Result<Converted, ApiError> {
    let mut names: HashMap<String, String> = history
        .iter()
        .flat_map(|m| m.tool_calls.iter().flatten())
        .filter_map(|c| {
            Some((
                c.get("id")?.as_str()?.to_string(),
                c.pointer("/function/name")?.as_str()?.to_string(),
            ))
        })
        .collect();
    let input = input_messages(req.input.as_ref(), &mut names)?;
    if input.is_empty() && history.is_empty() {
        return Err(ApiError::bad(
            "input",
            "input is required (a string or at least one item)",
        ));
    }
    let mut messages = Vec::with_capacity(history.len() + input.len() + 1);
    if let Some(text) = req.instructions.as_ref().filter(|t| !t.is_empty()) {
        messages.push(ChatMessage::text(Role::System, text.clone()));
    }
    messages.extend(history);
    messages.extend(input.iter().cloned());
    let shape = match (text_format(req.text.as_ref()), tools(req)?) {
        (json, None) => json,
        (Shape::Json { schema, param, .. }, Some(mut t)) => {
            t.answer = Some((schema, param));
            Shape::Tools(t)
        }
        (_, Some(t)) => Shape::Tools(t),
    };
    Ok(Converted {
        messages,
        input,
        shape,
    })
}

/// A reply's output as the assistant message a later turn reads (its text and calls; the
/// reasoning is left out, as chat templates drop earlier reasoning).
pub fn output_message(output: &[OutputItem]) -> Option<ChatMessage> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Message { content, .. } => {
                for c in content {
                    if let OutputContent::OutputText { text: t, .. } = c {
                        text.push_str(t);
                    }
                }
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => calls.push(tool_call(call_id, name, arguments)),
            OutputItem::Reasoning { .. } => {}
        }
    }
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    Some(ChatMessage {
        tool_calls: (!calls.is_empty()).then_some(calls),
        ..ChatMessage::text(Role::Assistant, text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::body::parse_json;

    fn convert_body(body: &str) -> Result<Converted, ApiError> {
        let r: ResponsesRequest = parse_json(body.as_bytes())?;
        convert(&r, Vec::new())
    }

    fn param(body: &str) -> String {
        let e = match parse_json::<ResponsesRequest>(body.as_bytes()) {
            Err(e) => e,
            Ok(r) => match convert(&r, Vec::new()) {
                Err(e) => e,
                Ok(_) => panic!("{body}: expected a 400"),
            },
        };
        match e {
            ApiError::BadRequest { param, .. } => param.unwrap_or_default(),
            other => panic!("{body}: expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn items_become_chat_messages() {
        let c = convert_body(
            r#"{"instructions": "be brief", "input": [
                 {"role": "user", "content": "weather in Paris?"},
                 {"type": "reasoning", "id": "rs_1", "summary": []},
                 {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                 {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{\"city\":\"Lyon\"}"},
                 {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                 {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]}]}"#,
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
                Role::Developer,
                Role::Assistant
            ]
        );
        let calls = c.messages[2].tool_calls.as_ref().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1]["function"]["arguments"], r#"{"city":"Lyon"}"#);
        assert_eq!(c.messages[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(c.messages[3].name.as_deref(), Some("weather"));
        assert_eq!(c.messages[4].content.as_ref().unwrap().text(), "a\nb");
        // The instructions are not part of the turn a stored response keeps.
        assert_eq!(c.input.len(), 5);
        assert!(matches!(c.shape, Shape::Free));
    }

    #[test]
    fn a_string_is_one_user_message_after_the_history() {
        let r: ResponsesRequest = parse_json(br#"{"input": "and then?"}"#).unwrap();
        let c = convert(&r, vec![ChatMessage::text(Role::User, "hi".to_string())]).unwrap();
        assert_eq!(c.messages.len(), 2);
        assert_eq!(c.input.len(), 1);
        assert_eq!(c.messages[1].content.as_ref().unwrap().text(), "and then?");
    }

    #[test]
    fn bad_input_names_its_field() {
        assert_eq!(param(r#"{"input": []}"#), "input");
        assert_eq!(param(r#"{}"#), "input");
        assert_eq!(param(r#"{"input": 5}"#), "input");
        assert_eq!(
            param(
                r#"{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}"#
            ),
            "input[0]"
        );
        assert_eq!(
            param(r#"{"input": [{"type": "web_search_call", "id": "x"}]}"#),
            "input[0]"
        );
        assert_eq!(
            param(r#"{"input": "x", "tools": [{"type": "web_search"}]}"#),
            "tools[0].type"
        );
        assert_eq!(
            param(r#"{"input": "x", "tools": [{"type": "function", "name": "a b"}]}"#),
            "tools[0].name"
        );
        assert_eq!(
            param(
                r#"{"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}"#
            ),
            "tool_choice.name"
        );
        assert_eq!(
            param(r#"{"input": "x", "tool_choice": {"type": "mcp", "server_label": "s"}}"#),
            "tool_choice.type"
        );
        assert_eq!(
            param(r#"{"input": "x", "text": {"format": {"type": "json_schema"}}}"#),
            "text.format"
        );
    }

    #[test]
    fn tools_and_format_make_the_shape() {
        let c = convert_body(
            r#"{"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                "tool_choice": "required", "parallel_tool_calls": false,
                "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}}}"#,
        )
        .unwrap();
        let Shape::Tools(t) = c.shape else {
            panic!("tools expected")
        };
        assert_eq!(t.choice, crate::structured::tools::ToolChoice::Required);
        assert!(!t.parallel);
        assert_eq!(t.answer.unwrap().1, "text.format.schema");
        let c =
            convert_body(r#"{"input": "x", "text": {"format": {"type": "json_object"}}}"#).unwrap();
        assert!(matches!(c.shape, Shape::Json { .. }));
    }

    #[test]
    fn output_becomes_the_next_turns_assistant_message() {
        let m = output_message(&[
            OutputItem::Reasoning {
                id: "rs".into(),
                summary: vec![],
                content: vec![OutputContent::ReasoningText { text: "hm".into() }],
                status: "completed".into(),
            },
            OutputItem::FunctionCall {
                id: "fc".into(),
                call_id: "call_9".into(),
                name: "f".into(),
                arguments: "{}".into(),
                status: "completed".into(),
            },
        ])
        .unwrap();
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(m.tool_calls.unwrap()[0]["id"], "call_9");
        assert!(output_message(&[]).is_none());
    }
}
