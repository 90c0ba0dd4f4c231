//! `POST /v1/messages` (Anthropic's Messages API) and `POST /v1/messages/count_tokens`.
//!
//! The request becomes chat messages and a tool request (the same conversion chat uses:
//! `system` a system message, `tool_use` blocks an assistant's `tool_calls`, `tool_result`
//! blocks `tool` messages, a last `assistant` turn the start of the reply) and goes through
//! [`crate::server::session`] like every generating route. The reply comes back as content
//! blocks (`thinking` for a reasoning model's `<think>` part, `text`, `tool_use` with the
//! arguments object as `input`), or streamed as Anthropic's events: `message_start`, `ping`,
//! per block `content_block_start` / `content_block_delta` (`thinking_delta`, `text_delta`,
//! `input_json_delta`) / `content_block_stop`, then `message_delta` (stop reason, output
//! tokens) and `message_stop`. `thinking` sets the template's `enable_thinking`. Errors,
//! streamed or not, use Anthropic's envelope (see [`crate::server::error`]).

mod stream;

use crate::random::random_id;
use crate::scheduler::{FinishReason, PromptOutput};
use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::chat::reply_syntax;
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::openapi::errors::{AnthropicGenerationErrors, AnthropicPromptErrors};
use crate::server::output_constraint::{self as shapes, Shape};
use crate::server::reply::{read_reply, read_reply_text, ReadCall, ReadReply};
use crate::server::session::{Job, Session};
use crate::server::types::messages::*;
use crate::server::types::{
    ChatMessage, FunctionDef, FunctionName, NamedToolChoice, Role, StopSpec, Tool, ToolChoiceSpec,
};
use crate::structured::reasoning::{self, ReasoningSplit, ThinkStart};
use crate::structured::tools::ToolStream;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use stream::MessagesWriter;

/// A request converted: the conversation, the start of the reply (a last assistant turn),
/// and what the reply must be.
struct Converted {
    messages: Vec<ChatMessage>,
    prefill: Option<String>,
    shape: Shape,
}

fn text_of(blocks: &AnthropicContent) -> String {
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
fn turn(i: usize, m: &AnthropicMessage, out: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
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
fn tools(
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
fn convert(
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
fn thinking_kwargs(t: Option<&ThinkingConfig>) -> Option<serde_json::Map<String, Value>> {
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
fn after_prefill(think: Option<ThinkStart>, prefill: Option<&str>) -> Option<ThinkStart> {
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

fn fields<'a>(r: &MessagesRequest, stop: &'a StopSpec) -> Fields<'a> {
    Fields {
        max_tokens: Some(r.max_tokens),
        max_tokens_param: "max_tokens",
        temperature: r.temperature,
        top_p: r.top_p,
        top_k: r.top_k,
        seed: r.seed,
        stop: Some(stop),
        top_logprobs_param: "top_logprobs",
        ..Fields::default()
    }
}

/// `stop_reason` for a choice that ended for `reason` (`called`: it made tool calls;
/// `stop`: a stop sequence ended it).
fn stop_reason(reason: FinishReason, called: bool, stop: bool) -> &'static str {
    match reason {
        FinishReason::Length => "max_tokens",
        _ if called => "tool_use",
        _ if stop => "stop_sequence",
        _ => "end_turn",
    }
}

fn tool_use_id() -> String {
    random_id("toolu_")
}

/// A call's `input`: its arguments object (an unparsable one, cut short, as a string field).
fn input_of(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

/// Creates a message.
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "anthropic",
    request_body(content = MessagesRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The message (JSON), or with `stream: true` Anthropic's event stream",
            content(
                (MessagesResponse = "application/json"),
                (String = "text/event-stream"),
            )),
        AnthropicGenerationErrors,
    ),
    security(("bearer" = []), ("x-api-key" = []))
)]
pub async fn messages(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<MessagesRequest>,
) -> Result<Response, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let stop = StopSpec::Many(req.stop_sequences.clone().unwrap_or_default());
    let plan = SamplingPlan::new(&fields(&req, &stop), state.settings(), session.info())?;
    let c = convert(
        req.system.as_ref(),
        &req.messages,
        req.tools.as_deref(),
        req.tool_choice.as_ref(),
        req.output_config.as_ref().and_then(|o| o.format.as_ref()),
    )?;
    let prefill = c.prefill.clone();
    let prompt = session
        .chat_prompt_with(
            c.messages,
            c.shape,
            true,
            c.prefill,
            thinking_kwargs(req.thinking.as_ref()),
        )
        .await?;
    let input_tokens = prompt.ids.len();
    let read_calls = prompt.read_calls;
    let think = after_prefill(prompt.think, prefill.as_deref());
    let meta = session.meta("msg_");
    let rt = Arc::clone(&session.rt);
    let submitted = session.submit(Job {
        plan,
        prompts: vec![prompt.ids],
        prompt_param: "messages",
        constraint: prompt.constraint,
        chat: true,
        prompt_output: PromptOutput::None,
    })?;
    if req.stream.unwrap_or(false) {
        let reader =
            read_calls.map(|r| ToolStream::new(r.format, r.forced, Arc::clone(&rt.tokenizer)));
        let thinker = think.map(|t| (ReasoningSplit::new(t), reply_syntax(&rt, read_calls)));
        return Ok(submitted.stream(MessagesWriter::new(meta, input_tokens, reader, thinker)));
    }
    let out = submitted.collect().await?;
    let o = out.choices.into_iter().next().unwrap_or_default();
    let (thought, reply) = match think {
        None => (
            String::new(),
            read_reply(read_calls, &rt.tokenizer, &o.ids, &o.text),
        ),
        Some(start) => {
            let full = reply_syntax(&rt, read_calls)
                .text(&o.ids, &o.text)
                .into_owned();
            let parts = reasoning::split(start, &full);
            let reply: ReadReply = read_reply_text(read_calls, &rt.tokenizer, &parts.content);
            (parts.reasoning, reply)
        }
    };
    let called = !reply.calls.is_empty();
    let mut content = Vec::new();
    if !thought.is_empty() {
        content.push(ContentBlock::Thinking {
            thinking: thought,
            signature: String::new(),
        });
    }
    if !reply.content.is_empty() {
        content.push(ContentBlock::Text {
            text: reply.content,
        });
    }
    for ReadCall { name, arguments } in reply.calls {
        content.push(ContentBlock::ToolUse {
            id: tool_use_id(),
            name,
            input: input_of(&arguments),
        });
    }
    let cached = out.usage.prompt_tokens_details.cached_tokens;
    Ok(Json(MessagesResponse {
        id: meta.id,
        kind: "message".to_string(),
        role: "assistant".to_string(),
        model: meta.model,
        content,
        stop_reason: Some(
            stop_reason(
                o.finish.unwrap_or(FinishReason::Abort),
                called,
                o.stop.is_some(),
            )
            .to_string(),
        ),
        stop_sequence: o.stop,
        usage: AnthropicUsage {
            input_tokens: out.usage.prompt_tokens - cached,
            output_tokens: out.usage.completion_tokens,
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
        },
    })
    .into_response())
}

/// Counts the tokens of a Messages request's prompt (tools and system included).
#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    tag = "anthropic",
    request_body(content = CountTokensRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The prompt's token count", body = CountTokensResponse),
        AnthropicPromptErrors,
    ),
    security(("bearer" = []), ("x-api-key" = []))
)]
pub async fn count_tokens(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CountTokensRequest>,
) -> Result<Json<CountTokensResponse>, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let c = convert(
        req.system.as_ref(),
        &req.messages,
        req.tools.as_deref(),
        req.tool_choice.as_ref(),
        None,
    )?;
    let prompt = session
        .chat_prompt_with(
            c.messages,
            c.shape,
            true,
            c.prefill,
            thinking_kwargs(req.thinking.as_ref()),
        )
        .await?;
    Ok(Json(CountTokensResponse {
        input_tokens: prompt.ids.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::body::parse_json;

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
        use ThinkStart::*;
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
}
