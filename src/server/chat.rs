//! `POST /v1/chat/completions`: render the conversation, generate, answer as one JSON
//! object or as a stream of `chat.completion.chunk`s (see [`crate::server::sse`]).

use crate::scheduler::{FinishReason, TokenLogprob};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::logprobs::chat_entries;
use crate::server::params::{Fields, Plan};
use crate::server::run::collect;
use crate::server::sse::{self, json_event, ChunkWriter, StreamSettings};
use crate::server::state::{random_id, unix_now, AppState, Runtime};
use crate::server::types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatResponseMessage, ErrorResponse,
    TimingsBody, UsageBody,
};
use crate::server::{blocking, prompt};
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// What every response and chunk of a request repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

impl Meta {
    pub fn new(prefix: &str, state: &AppState, rt: &Runtime) -> Meta {
        Meta {
            id: random_id(prefix),
            created: unix_now(),
            model: state.model_id().to_string(),
            fingerprint: rt.fingerprint.clone(),
        }
    }
}

fn fields(r: &ChatCompletionRequest) -> Fields<'_> {
    let (max_tokens, max_tokens_param) = match (r.max_completion_tokens, r.max_tokens) {
        (Some(v), _) => (Some(v), "max_completion_tokens"),
        (None, v) => (v, "max_tokens"),
    };
    Fields {
        max_tokens,
        max_tokens_param,
        temperature: r.temperature,
        top_p: r.top_p,
        n: r.n,
        stop: r.stop.as_ref(),
        seed: r.seed,
        presence_penalty: r.presence_penalty,
        frequency_penalty: r.frequency_penalty,
        logit_bias: r.logit_bias.as_ref(),
        logprobs: r.logprobs.unwrap_or(false),
        top_logprobs: r.top_logprobs,
        top_logprobs_param: "top_logprobs",
        top_k: r.top_k,
        min_p: r.min_p,
        repetition_penalty: r.repetition_penalty,
        ignore_eos: r.ignore_eos.unwrap_or(false),
    }
}

/// Creates a chat completion.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body(content = ChatCompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The completion (JSON), or with `stream: true` a stream of `chat.completion.chunk` events ending with `data: [DONE]`",
            content(
                (ChatCompletionResponse = "application/json"),
                (ChatCompletionChunk = "text/event-stream"),
            )),
        (status = 400, description = "Invalid request (`param` names the field)", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "Unknown model", body = ErrorResponse),
        (status = 408, description = "The request ran past the server's time limit", body = ErrorResponse),
        (status = 413, description = "Body too large", body = ErrorResponse),
        (status = 415, description = "Body is not JSON", body = ErrorResponse),
        (status = 429, description = "Queue full; see Retry-After", body = ErrorResponse),
        (status = 500, description = "Engine fault", body = ErrorResponse),
        (status = 503, description = "Loading, draining or engine down", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn chat_completions(
    State(state): State<AppState>,
    JsonBody(mut req): JsonBody<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let in_flight = state.begin_request();
    let rt = state.runtime()?;
    state.check_model(req.model.as_deref())?;
    let settings = state.settings();
    let info = rt.engine.info();
    let plan = Plan::new(&fields(&req), settings, info)?;
    let messages = std::mem::take(&mut req.messages);
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let ids = {
        let rt = Arc::clone(&rt);
        blocking(move || prompt::chat_prompt(&rt, &messages, add_generation_prompt)).await?
    };
    let mut gen = plan.request(ids, "messages", settings, info)?;
    if !plan.ignore_eos {
        gen.stop_token_ids = rt.end_of_turn.clone();
    }
    let deadline = settings
        .request_timeout
        .map(|t| (tokio::time::Instant::now() + t, t));
    let stream = rt
        .engine
        .submit(gen)
        .map_err(|e| ApiError::from_submit(e, "messages", plan.max_tokens_param))?;
    let meta = Meta::new("chatcmpl-", &state, &rt);
    if req.stream.unwrap_or(false) {
        let writer = ChatWriter {
            meta,
            rt,
            n: plan.n,
        };
        let include_usage = req
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        return Ok(sse::respond(
            vec![stream],
            writer,
            StreamSettings {
                n: plan.n,
                include_usage,
                deadline,
                keep_alive: settings.sse_keep_alive,
            },
            in_flight,
        ));
    }
    let (outs, usage) = collect(vec![stream], plan.n, deadline).await?;
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(index, o)| ChatChoice {
            index,
            message: ChatResponseMessage {
                role: "assistant".to_string(),
                content: Some(o.text),
                refusal: None,
            },
            logprobs: plan.logprobs.then(|| ChatLogprobs {
                content: chat_entries(&rt.tokenizer, &o.logprobs),
                refusal: None,
            }),
            finish_reason: o.finish.unwrap_or(FinishReason::Abort).as_str().to_string(),
        })
        .collect();
    Ok(Json(ChatCompletionResponse {
        id: meta.id,
        object: "chat.completion".to_string(),
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage,
    })
    .into_response())
}

/// Chat's chunks.
struct ChatWriter {
    meta: Meta,
    rt: Arc<Runtime>,
    n: usize,
}

impl ChatWriter {
    /// A chunk; the usage chunk carries `tail`.
    fn chunk(
        &self,
        choices: Vec<ChatChunkChoice>,
        tail: Option<(UsageBody, TimingsBody)>,
    ) -> SseEvent {
        let (usage, timings) = tail.unzip();
        json_event(&ChatCompletionChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk".to_string(),
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: self.meta.fingerprint.clone(),
            choices,
            usage,
            timings,
        })
    }
}

impl ChunkWriter for ChatWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        (0..self.n)
            .map(|index| {
                self.chunk(
                    vec![ChatChunkChoice {
                        index,
                        delta: ChatDelta {
                            role: Some("assistant".to_string()),
                            content: Some(String::new()),
                        },
                        logprobs: None,
                        finish_reason: None,
                    }],
                    None,
                )
            })
            .collect()
    }

    fn delta(&mut self, choice: usize, text: String, lps: &[TokenLogprob]) -> Option<SseEvent> {
        if text.is_empty() && lps.is_empty() {
            return None;
        }
        let logprobs = (!lps.is_empty()).then(|| ChatLogprobs {
            content: chat_entries(&self.rt.tokenizer, lps),
            refusal: None,
        });
        Some(self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta {
                    role: None,
                    content: Some(text),
                },
                logprobs,
                finish_reason: None,
            }],
            None,
        ))
    }

    fn finished(&mut self, choice: usize, reason: FinishReason) -> SseEvent {
        self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta::default(),
                logprobs: None,
                finish_reason: Some(reason.as_str().to_string()),
            }],
            None,
        )
    }

    fn usage(&mut self, usage: UsageBody, timings: TimingsBody) -> SseEvent {
        self.chunk(Vec::new(), Some((usage, timings)))
    }
}
