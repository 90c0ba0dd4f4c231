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

mod convert;
mod stream;
#[cfg(test)]
mod tests;

use crate::random::random_id;
use crate::scheduler::{FinishReason, PromptOutput};
use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::openapi::errors::{AnthropicGenerationErrors, AnthropicPromptErrors};
use crate::server::reply::reply_syntax;
use crate::server::reply::{read_reply, read_reply_text, ReadCall, ReadReply};
use crate::server::session::{Job, Session};
use crate::server::types::messages::*;
use crate::server::types::StopSpec;
use crate::structured::reasoning::{self, ReasoningSplit};
use crate::structured::tools::ToolStream;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use convert::{after_prefill, convert, thinking_kwargs};
use serde_json::{json, Value};
use std::sync::Arc;
use stream::MessagesWriter;

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
