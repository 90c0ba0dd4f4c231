//! `POST /v1/responses` (OpenAI's Responses API), `GET /v1/responses/{id}` and
//! `DELETE /v1/responses/{id}`.
//!
//! The request becomes chat messages and an output constraint ([`mod@convert`]) and goes through
//! [`crate::server::session`] like every generating route; the reply is read as chat reads it
//! (reasoning split off, tool calls parsed) and answered as output items: `reasoning`,
//! `message` (`output_text`), `function_call`. Streamed, it is the API's typed events
//! ([`stream`]). A response is stored ([`store`]) unless `store: false`, for
//! `previous_response_id` and `GET`. Errors use OpenAI's envelope; a `previous_response_id`
//! or id that is not stored is a 404.

pub mod convert;
pub mod items;
pub mod stream;

use crate::random::random_id;
use crate::scheduler::{FinishReason, PromptOutput};
use crate::server::app_state::{AppState, Runtime};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::logprobs::chat_entries;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::reply::reply_parts;
use crate::server::response_store::{Stored, Turn};
use crate::server::session::{Job, Meta, Session};
use crate::server::types::responses::*;
use crate::server::types::{ChatMessage, ErrorResponse, UsageBody};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use convert::{convert, output_message};
use std::sync::Arc;
use stream::ResponsesWriter;

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Completed,
    /// `max_output_tokens` (or the context) cut it.
    MaxTokens,
    /// The server aborted it (shutdown past the drain timeout).
    Aborted,
}

impl Finish {
    pub fn of(reason: FinishReason) -> Finish {
        match reason {
            FinishReason::Length => Finish::MaxTokens,
            FinishReason::Abort | FinishReason::Error => Finish::Aborted,
            _ => Finish::Completed,
        }
    }

    pub fn status(self) -> &'static str {
        match self {
            Finish::Completed => "completed",
            _ => "incomplete",
        }
    }

    pub fn details(self) -> Option<IncompleteDetails> {
        match self {
            Finish::Completed => None,
            Finish::MaxTokens => Some(IncompleteDetails {
                reason: Some("max_output_tokens".to_string()),
            }),
            Finish::Aborted => Some(IncompleteDetails { reason: None }),
        }
    }
}

/// The status of a response's last item.
pub fn item_status(f: Finish) -> &'static str {
    f.status()
}

/// What storing a response needs besides the response: the turn it continues and its input.
pub struct Keep {
    pub parent: Option<Arc<Turn>>,
    pub input: Vec<ChatMessage>,
}

/// The stored turn of a response whose output is `output`.
pub fn stored_turn(keep: Keep, output: &[OutputItem]) -> Arc<Turn> {
    let mut messages = keep.input;
    let input_len = messages.len();
    messages.extend(output_message(output));
    Arc::new(Turn {
        input_len,
        parent: keep.parent,
        messages,
    })
}

/// The usage in this API's words; the reasoning tokens are the reasoning text tokenized again.
pub fn usage_of(u: UsageBody, rt: &Runtime, reasoning: &str) -> ResponseUsage {
    let reasoning_tokens = if reasoning.is_empty() {
        0
    } else {
        rt.tokenizer
            .encode(reasoning, false, false)
            .len()
            .min(u.completion_tokens)
    };
    ResponseUsage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputTokensDetails {
            cached_tokens: u.prompt_tokens_details.cached_tokens,
        },
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputTokensDetails { reasoning_tokens },
        total_tokens: u.total_tokens,
    }
}

/// Whether the reply's logprobs are returned (`top_logprobs` or `include`).
fn wants_logprobs(r: &ResponsesRequest) -> bool {
    r.top_logprobs.is_some()
        || r.include
            .iter()
            .flatten()
            .any(|i| i == "message.output_text.logprobs")
}

fn fields(r: &ResponsesRequest) -> Fields<'_> {
    Fields {
        logprobs: wants_logprobs(r),
        top_logprobs: r.top_logprobs,
        max_tokens: r.max_output_tokens,
        max_tokens_param: "max_output_tokens",
        temperature: r.temperature,
        top_p: r.top_p,
        seed: r.seed,
        top_k: r.top_k,
        top_logprobs_param: "top_logprobs",
        ..Fields::default()
    }
}

/// The 404 for an id that is not stored (never was, expired, deleted or `store: false`).
fn not_stored(id: &str, param: Option<&str>) -> ApiError {
    let (what, code) = match param {
        Some(_) => ("Previous response", "previous_response_not_found"),
        None => ("Response", "response_not_found"),
    };
    let shown: String = id.chars().take(80).collect();
    ApiError::NotFound {
        message: format!(
            "{what} with id '{shown}' not found (responses are kept in memory for \
             server.responses_store_ttl, and not across restarts)."
        ),
        param: param.map(str::to_string),
        code,
    }
}

/// The response as created: the request's settings echoed, `in_progress`, no output.
fn template(req: &ResponsesRequest, meta: &Meta) -> ResponseObject {
    ResponseObject {
        id: meta.id.clone(),
        object: "response".to_string(),
        created_at: meta.created,
        status: "in_progress".to_string(),
        error: None,
        incomplete_details: None,
        instructions: req.instructions.clone(),
        max_output_tokens: req.max_output_tokens,
        model: meta.model.clone(),
        output: Vec::new(),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        previous_response_id: req.previous_response_id.clone(),
        store: req.store.unwrap_or(true),
        temperature: req.temperature,
        top_p: req.top_p,
        tool_choice: req
            .tool_choice
            .clone()
            .unwrap_or_else(|| ResponsesToolChoice::Mode("auto".to_string())),
        tools: req.tools.clone().unwrap_or_default(),
        text: req.text.clone().unwrap_or(TextConfig {
            format: Some(TextFormat::Text),
            verbosity: None,
        }),
        truncation: "disabled".to_string(),
        metadata: req.metadata.clone().unwrap_or_default(),
        user: req.user.clone(),
        usage: None,
        reasoning: req.reasoning.clone(),
    }
}

/// The chat template's variables: `chat_template_kwargs`, with `enable_thinking` from
/// `reasoning.effort` unless they set it.
fn template_kwargs(req: &ResponsesRequest) -> Option<serde_json::Map<String, serde_json::Value>> {
    let effort = req.reasoning.as_ref().and_then(|r| r.effort.as_deref());
    let mut kwargs = req.chat_template_kwargs.clone();
    if let Some(e) = effort {
        kwargs
            .get_or_insert_with(Default::default)
            .entry("enable_thinking")
            .or_insert(serde_json::Value::Bool(e != "none"));
    }
    kwargs
}

/// A whole reply's output items: reasoning, the message, the calls; the last one is
/// `incomplete` when the reply was cut short. A reply with nothing in it is an empty message.
fn output_items(
    reasoning: Option<String>,
    content: Option<String>,
    calls: Vec<crate::server::types::ToolCall>,
    logprobs: Vec<crate::server::types::ChatTokenLogprob>,
    finish: Finish,
) -> Vec<OutputItem> {
    let done = || "completed".to_string();
    let mut out = Vec::new();
    if let Some(text) = reasoning.filter(|r| !r.is_empty()) {
        out.push(OutputItem::Reasoning {
            id: random_id("rs_"),
            summary: Vec::new(),
            content: vec![OutputContent::ReasoningText { text }],
            status: done(),
        });
    }
    let content = content.filter(|c| !c.is_empty());
    if content.is_some() || (calls.is_empty() && out.is_empty()) {
        out.push(OutputItem::Message {
            id: random_id("msg_"),
            role: "assistant".to_string(),
            content: vec![OutputContent::OutputText {
                text: content.unwrap_or_default(),
                annotations: Vec::new(),
                logprobs,
            }],
            status: done(),
        });
    }
    for c in calls {
        out.push(OutputItem::FunctionCall {
            id: random_id("fc_"),
            call_id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
            status: done(),
        });
    }
    if finish != Finish::Completed {
        if let Some(
            OutputItem::Reasoning { status, .. }
            | OutputItem::Message { status, .. }
            | OutputItem::FunctionCall { status, .. },
        ) = out.last_mut()
        {
            *status = item_status(finish).to_string();
        }
    }
    out
}

/// Creates a model response.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "openai",
    request_body(content = ResponsesRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The response (JSON), or with `stream: true` the typed events (`response.created` ... `response.completed`)",
            content(
                (ResponseObject = "application/json"),
                (String = "text/event-stream"),
            )),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn create_response(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let plan = SamplingPlan::new(&fields(&req), state.settings(), session.info())?;
    let parent = match req.previous_response_id.as_deref() {
        None => None,
        Some(id) => Some(Arc::clone(
            &state
                .responses()
                .get(id)
                .await
                .ok_or_else(|| not_stored(id, Some("previous_response_id")))?
                .turn,
        )),
    };
    let history = parent.as_ref().map(Turn::conversation).unwrap_or_default();
    let c = convert(&req, history)?;
    let prompt = session
        .chat_prompt_with(c.messages, c.shape, true, None, template_kwargs(&req))
        .await?;
    let (read_calls, think) = (prompt.read_calls, prompt.think);
    let meta = session.meta("resp_");
    let rt = Arc::clone(&session.rt);
    let template = template(&req, &meta);
    let keep = req.store.unwrap_or(true).then_some(Keep {
        parent,
        input: c.input,
    });
    let submitted = session.submit(Job {
        plan,
        prompts: vec![prompt.ids],
        prompt_param: "input",
        constraint: prompt.constraint,
        chat: true,
        prompt_output: PromptOutput::None,
    })?;
    if req.stream.unwrap_or(false) {
        return Ok(submitted.stream(ResponsesWriter::new(
            state.clone(),
            Arc::clone(&rt),
            template,
            read_calls,
            think,
            keep,
            wants_logprobs(&req),
        )));
    }
    let out = submitted.collect().await?;
    let o = out.choices.into_iter().next().unwrap_or_default();
    let finish = Finish::of(o.finish.unwrap_or(FinishReason::Abort));
    let (reasoning, content, calls) = reply_parts(&rt, read_calls, think, &o.ids, o.text);
    let usage = usage_of(out.usage, &rt, reasoning.as_deref().unwrap_or(""));
    let mut response = template;
    response.status = finish.status().to_string();
    response.incomplete_details = finish.details();
    let logprobs = chat_entries(&rt.tokenizer, &o.logprobs);
    response.output = output_items(
        reasoning,
        content,
        calls.unwrap_or_default(),
        logprobs,
        finish,
    );
    response.usage = Some(usage);
    if let Some(keep) = keep {
        let turn = stored_turn(keep, &response.output);
        state.responses().put(Stored {
            response: response.clone(),
            turn,
        });
    }
    Ok(Json(response).into_response())
}

/// A stored response.
#[utoipa::path(
    get,
    path = "/v1/responses/{id}",
    tag = "openai",
    params(("id" = String, Path, description = "The response's id (`resp_...`)")),
    responses(
        (status = 200, description = "The response", body = ResponseObject),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "Not stored (never, expired, deleted, or `store: false`)", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn get_response(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ResponseObject>, ApiError> {
    let stored = state
        .responses()
        .get(&id)
        .await
        .ok_or_else(|| not_stored(&id, None))?;
    Ok(Json(stored.response.clone()))
}

/// Deletes a stored response (a later `previous_response_id` naming it is a 404).
#[utoipa::path(
    delete,
    path = "/v1/responses/{id}",
    tag = "openai",
    params(("id" = String, Path, description = "The response's id (`resp_...`)")),
    responses(
        (status = 200, description = "Deleted", body = ResponseDeleted),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "Not stored", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn delete_response(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ResponseDeleted>, ApiError> {
    if !state.responses().delete(&id).await {
        return Err(not_stored(&id, None));
    }
    Ok(Json(ResponseDeleted {
        id,
        object: "response".to_string(),
        deleted: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::types::{FunctionCall, ToolCall};

    #[test]
    fn items_and_statuses() {
        let call = ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "f".into(),
                arguments: "{\"a\":".into(),
            },
        };
        let items = output_items(
            Some("hm".into()),
            None,
            vec![call],
            Vec::new(),
            Finish::MaxTokens,
        );
        assert_eq!(items.len(), 2);
        assert!(matches!(&items[0], OutputItem::Reasoning { status, .. } if status == "completed"));
        assert!(
            matches!(&items[1], OutputItem::FunctionCall { status, call_id, .. } if status == "incomplete" && call_id == "call_1")
        );
        // Nothing at all is one empty message.
        let items = output_items(
            None,
            Some(String::new()),
            Vec::new(),
            Vec::new(),
            Finish::Completed,
        );
        assert!(
            matches!(&items[..], [OutputItem::Message { content, .. }] if matches!(&content[0], OutputContent::OutputText { text, .. } if text.is_empty()))
        );
        assert_eq!(Finish::of(FinishReason::Length).status(), "incomplete");
        assert_eq!(
            Finish::of(FinishReason::Length)
                .details()
                .unwrap()
                .reason
                .as_deref(),
            Some("max_output_tokens")
        );
        assert_eq!(Finish::of(FinishReason::Stop).status(), "completed");
    }

    #[test]
    fn reasoning_effort_sets_enable_thinking_unless_the_kwargs_do() {
        let req = |body: &str| -> ResponsesRequest {
            crate::server::body::parse_json(body.as_bytes()).unwrap()
        };
        assert_eq!(template_kwargs(&req(r#"{"input": "x"}"#)), None);
        let on = template_kwargs(&req(r#"{"input": "x", "reasoning": {"effort": "low"}}"#));
        assert_eq!(on.unwrap()["enable_thinking"], true);
        let off = template_kwargs(&req(r#"{"input": "x", "reasoning": {"effort": "none"}}"#));
        assert_eq!(off.unwrap()["enable_thinking"], false);
        let kw = template_kwargs(&req(r#"{"input": "x", "reasoning": {"effort": "high"},
                "chat_template_kwargs": {"enable_thinking": false, "a": 1}}"#))
        .unwrap();
        assert_eq!(kw["enable_thinking"], false);
        assert_eq!(kw["a"], 1);
    }
}
