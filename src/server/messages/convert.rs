//! A Messages request as chat sees it: `system` a system message, `tool_use` blocks an
//! assistant's `tool_calls`, `tool_result` blocks `tool` messages, Anthropic's tools and
//! `tool_choice` as OpenAI's, `thinking` as the template's `enable_thinking`, and where a
//! prefilled reply starts.

use crate::server::error::ApiError;
use crate::server::output_constraint::{self as shapes, Shape};
use crate::server::types::messages::*;
use crate::server::types::{
    ChatMessage, FunctionDef, FunctionName, NamedToolChoice, Role, Tool, ToolChoiceSpec,
};
use crate::structured::reasoning::{self, ThinkStart};
use serde_json::{json, Value};

/// A request converted: the conversation, the start of the reply (a last assistant turn),
/// and what the reply must be.
pub(super) struct Converted {
    pub(super) messages: Vec<ChatMessage>,
    pub(super) prefill: Option<String>,
    pub(super) shape: Shape,
}

pub(super) fn text_of(blocks: &AnthropicContent) -> String {
    match blocks {
        AnthropicContent::Text(s) => s.clone(),
        AnthropicContent::Blocks(b) => b
            .iter()
            .filter_map(|b| match b {
                ContentBlockParam::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// One Anthropic turn as chat messages: a user turn's `tool_result` blocks become `tool`
/// messages (before its text), an assistant turn's `tool_use` blocks its `tool_calls`.
pub(super) fn turn(
    i: usize,
    m: &AnthropicMessage,
    out: &mut Vec<ChatMessage>,
) -> Result<(), ApiError> {
    let blocks = match &m.content {
        AnthropicContent::Text(s) => {
            let role = match m.role {
                AnthropicRole::User => Role::User,
                AnthropicRole::Assistant => Role::Assistant,
            };
            out.push(ChatMessage::text(role, s.clone()));
            return Ok(());
        }
        AnthropicContent::Blocks(b) => b,
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        match (m.role, b) {
            (_, ContentBlockParam::Text { text }) => texts.push(text.clone()),
            (AnthropicRole::Assistant, ContentBlockParam::ToolUse { id, name, input }) => {
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                }));
            }
            (
                AnthropicRole::User,
                ContentBlockParam::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                },
            ) => {
                let text = content.as_ref().map(BlockText::text).unwrap_or_default();
                let text = if is_error.unwrap_or(false) {
                    format!("Error: {text}")
                } else {
                    text
                };
                out.push(ChatMessage {
                    tool_call_id: Some(tool_use_id.clone()),
                    ..ChatMessage::text(Role::Tool, text)
                });
            }
            (
                _,
                ContentBlockParam::Thinking { .. } | ContentBlockParam::RedactedThinking { .. },
            ) => {}
            (role, other) => {
                let kind = match other {
                    ContentBlockParam::ToolUse { .. } => "tool_use",
                    _ => "tool_result",
                };
                let who = match role {
                    AnthropicRole::User => "user",
                    AnthropicRole::Assistant => "assistant",
                };
                return Err(ApiError::bad(
                    format!("messages[{i}].content[{j}].type"),
                    format!("a {kind} block cannot be in a {who} turn"),
                ));
            }
        }
    }
    let role = match m.role {
        AnthropicRole::User => Role::User,
        AnthropicRole::Assistant => Role::Assistant,
    };
    if !texts.is_empty() || !calls.is_empty() {
        out.push(ChatMessage {
            tool_calls: (!calls.is_empty()).then_some(calls),
            ..ChatMessage::text(role, texts.join("\n"))
        });
    }
    Ok(())
}

/// Anthropic tools as OpenAI's, and `tool_choice` as OpenAI's (`any` is `required`).
pub(super) fn tools(
    tools: Option<&[AnthropicTool]>,
    choice: Option<&AnthropicToolChoice>,
) -> Result<Option<crate::server::output_constraint::ToolRequest>, ApiError> {
    let mut list = Vec::new();
    for (i, t) in tools.unwrap_or_default().iter().enumerate() {
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
            return Err(ApiError::bad(
                format!("tools[{i}].type"),
                format!("server tools ({kind:?}) are not supported; only client tools are"),
            ));
        }
        list.push(Tool {
            kind: "function".to_string(),
            function: FunctionDef {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: Some(t.input_schema.clone()),
                strict: None,
            },
        });
    }
    let mode = |m: &str| Some(ToolChoiceSpec::Mode(m.to_string()));
    let (spec, parallel) = match choice {
        None => (None, None),
        Some(AnthropicToolChoice::Auto {
            disable_parallel_tool_use,
        }) => (mode("auto"), disable_parallel_tool_use.map(|d| !d)),
        Some(AnthropicToolChoice::Any {
            disable_parallel_tool_use,
        }) => (mode("required"), disable_parallel_tool_use.map(|d| !d)),
        Some(AnthropicToolChoice::Tool {
            name,
            disable_parallel_tool_use,
        }) => (
            Some(ToolChoiceSpec::Named(NamedToolChoice {
                kind: "function".to_string(),
                function: FunctionName { name: name.clone() },
            })),
            disable_parallel_tool_use.map(|d| !d),
        ),
        Some(AnthropicToolChoice::None) => (mode("none"), None),
    };
    shapes::tool_request(Some(&list), spec.as_ref(), parallel).map_err(|e| match e {
        // OpenAI's field names, said the Anthropic way.
        ApiError::BadRequest {
            message,
            param,
            code,
        } => ApiError::BadRequest {
            message: message.replace("\"required\"", "\"any\""),
            param: param.map(|p| {
                p.replace(".function.name", ".name")
                    .replace(".function.parameters", ".input_schema")
            }),
            code,
        },
        other => other,
    })
}

/// The conversation and tools of a Messages (or count_tokens) request; `format` is the
/// reply's JSON Schema (`output_config.format`), if any.
pub(super) fn convert(
    system: Option<&BlockText>,
    turns: &[AnthropicMessage],
    tool_list: Option<&[AnthropicTool]>,
    tool_choice: Option<&AnthropicToolChoice>,
    format: Option<&OutputFormat>,
) -> Result<Converted, ApiError> {
    if turns.is_empty() {
        return Err(ApiError::bad("messages", "messages must not be empty"));
    }
    let mut messages = Vec::with_capacity(turns.len() + 1);
    if let Some(s) = system {
        messages.push(ChatMessage::text(Role::System, s.text()));
    }
    let (last, earlier) = turns.split_last().expect("not empty");
    for (i, m) in earlier.iter().enumerate() {
        turn(i, m, &mut messages)?;
    }
    // A last assistant turn of text only is the start of the reply.
    let text_only = match &last.content {
        AnthropicContent::Text(_) => true,
        AnthropicContent::Blocks(b) => b
            .iter()
            .all(|b| matches!(b, ContentBlockParam::Text { .. })),
    };
    let prefill = if last.role == AnthropicRole::Assistant && text_only {
        Some(text_of(&last.content).trim_end().to_string())
    } else {
        turn(earlier.len(), last, &mut messages)?;
        None
    };
    let json = format.map(|OutputFormat::JsonSchema { schema }| schema.clone());
    let param = "output_config.format.schema";
    let shape = match (tools(tool_list, tool_choice)?, json) {
        (Some(mut t), answer) => {
            t.answer = answer.map(|s| (s, param));
            Shape::Tools(t)
        }
        (None, Some(schema)) => Shape::Json {
            schema,
            param,
            label: "output_config".to_string(),
        },
        (None, None) => Shape::Free,
    };
    Ok(Converted {
        messages,
        prefill,
        shape,
    })
}

/// The template's `enable_thinking` for a request's `thinking` (None: the template's default).
pub(super) fn thinking_kwargs(
    t: Option<&ThinkingConfig>,
) -> Option<serde_json::Map<String, Value>> {
    let on = match t? {
        ThinkingConfig::Enabled { .. } | ThinkingConfig::Adaptive => true,
        ThinkingConfig::Disabled => false,
    };
    Some(serde_json::Map::from_iter([(
        "enable_thinking".to_string(),
        Value::Bool(on),
    )]))
}

/// Where the reply starts once the prompt is followed by `prefill` (the start of the reply
/// the client wrote): the prefill continues an open block until it closes it; a reply that
/// continues text is content.
pub(super) fn after_prefill(
    think: Option<ThinkStart>,
    prefill: Option<&str>,
) -> Option<ThinkStart> {
    let p = prefill.filter(|p| !p.is_empty());
    match (think?, p) {
        (start, None) => Some(start),
        (_, Some(p)) if p.contains(reasoning::CLOSE) => Some(ThinkStart::Closed),
        (ThinkStart::Open, Some(_)) => Some(ThinkStart::Open),
        (ThinkStart::Detect, Some(p)) if p.trim_start().starts_with(reasoning::OPEN) => {
            Some(ThinkStart::Open)
        }
        (_, Some(_)) => Some(ThinkStart::Closed),
    }
}
