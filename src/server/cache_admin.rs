//! The prefix cache's admin routes. `POST /cache/clear` drops the prefix cache of every loaded
//! model (its unused KV blocks, RAM tier and disk-tier files), e.g. after changing what prompts
//! may be reused. `POST /cache/warm` computes a request's prompt (a chat-completions or
//! completions body, rendered and tokenized as those routes do) so its full blocks enter the
//! prefix cache and its tiers, generating one token that is discarded. Both need an API key
//! when keys are configured, like every route but the probes.

use crate::scheduler::PromptOutput;
use crate::server::app_state::AppState;
use crate::server::body::{from_value, JsonBody};
use crate::server::error::ApiError;
use crate::server::generation_fields::SamplingPlan;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::raw_prompt::{tokenize, MAX_PROMPTS};
use crate::server::session::{Job, Session};
use crate::server::types::{ChatCompletionRequest, CompletionRequest, ErrorResponse};
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

/// What `POST /cache/clear` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct CacheClearResult {
    /// Loaded models whose prefix cache was dropped (an unloaded model has none).
    pub models: Vec<String>,
}

/// Drops the prefix cache (KV cache, RAM and disk tiers) of every loaded model. Requests in
/// flight keep the blocks they use; later requests compute their prompts again.
#[utoipa::path(
    post,
    path = "/cache/clear",
    tag = "kiln",
    responses(
        (status = 200, description = "The prefix caches are dropped", body = CacheClearResult),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn clear_cache(State(state): State<AppState>) -> Json<CacheClearResult> {
    let registry = state.registry();
    let models = (0..registry.models().len())
        .filter_map(|i| {
            let rt = registry.loaded(i)?;
            rt.engine.clear_prefix_cache();
            Some(registry.routes().id(i).to_string())
        })
        .collect();
    Json(CacheClearResult { models })
}

/// The body of `POST /cache/warm`: a chat-completions body (with `messages`) or a completions
/// body (with `prompt`). Sampling fields are read and validated but the one token generated
/// is discarded.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub enum WarmRequest {
    Chat(ChatCompletionRequest),
    Completion(CompletionRequest),
}

/// What `POST /cache/warm` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct CacheWarmResult {
    /// The model whose cache was warmed.
    pub model: String,
    /// The prompt's tokens (summed over the prompts of a completions body).
    pub prompt_tokens: usize,
    /// Of those, the tokens that were already cached before this call.
    pub cached_tokens: usize,
    /// Full KV blocks of the prompt(s) now in the prefix cache (a partial last block is not
    /// cached).
    pub cached_blocks: usize,
    /// Tokens per KV block.
    pub block_size: usize,
}

/// Computes a prompt's KV so that its full blocks enter the prefix cache (and its RAM and disk
/// tiers): the next request starting with the same prompt reuses them.
#[utoipa::path(
    post,
    path = "/cache/warm",
    tag = "kiln",
    request_body(content = WarmRequest, content_type = "application/json",
        description = "A `/v1/chat/completions` body (`messages`) or a `/v1/completions` body (`prompt`)"),
    responses(
        (status = 200, description = "The prompt is computed and cached", body = CacheWarmResult),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn warm_cache(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<Json<CacheWarmResult>, ApiError> {
    let req = if body.get("messages").is_some() {
        WarmRequest::Chat(from_value(body)?)
    } else {
        WarmRequest::Completion(from_value(body)?)
    };
    let (session, job) = match req {
        WarmRequest::Chat(mut req) => {
            let session = Session::open(&state, req.model.as_deref()).await?;
            let plan = warm_plan(SamplingPlan::new(
                &crate::server::chat::fields(&req),
                state.settings(),
                session.info(),
            )?);
            let shape = crate::server::chat::request_shape(&req)?;
            let prompt = session
                .chat_prompt_with(
                    std::mem::take(&mut req.messages),
                    shape,
                    req.add_generation_prompt.unwrap_or(true),
                    None,
                    req.chat_template_kwargs.take(),
                )
                .await?;
            let job = Job {
                plan,
                prompts: vec![prompt.ids],
                prompt_param: "messages",
                constraint: None,
                chat: true,
                prompt_output: PromptOutput::None,
            };
            (session, job)
        }
        WarmRequest::Completion(mut req) => {
            let session = Session::open(&state, req.model.as_deref()).await?;
            let plan = warm_plan(SamplingPlan::new(
                &crate::server::completions::fields(&req),
                state.settings(),
                session.info(),
            )?);
            let prompts = std::mem::take(&mut req.prompt).into_prompts();
            if prompts.len() > MAX_PROMPTS {
                return Err(ApiError::bad(
                    "prompt",
                    format!(
                        "at most {MAX_PROMPTS} prompts per request, got {}",
                        prompts.len()
                    ),
                ));
            }
            let rt = Arc::clone(&session.rt);
            let tokenized = blocking(move || tokenize(&rt.tokenizer, prompts, "prompt")).await?;
            let job = Job {
                plan,
                prompts: tokenized.into_iter().map(|t| t.ids).collect(),
                prompt_param: "prompt",
                constraint: None,
                chat: false,
                prompt_output: PromptOutput::None,
            };
            (session, job)
        }
    };
    let model = session.model.clone();
    let block_size = session.info().block_size.max(1);
    let out = session.submit(job)?.collect().await?;
    let cached_blocks = out
        .per_prompt
        .iter()
        .map(|(u, _)| u.prompt_tokens / block_size)
        .sum();
    Ok(Json(CacheWarmResult {
        model,
        prompt_tokens: out.usage.prompt_tokens,
        cached_tokens: out.usage.prompt_tokens_details.cached_tokens,
        cached_blocks,
        block_size,
    }))
}

/// The request's plan, cut to one greedy token: only the prompt's KV is wanted.
fn warm_plan(mut plan: SamplingPlan) -> SamplingPlan {
    plan.max_tokens = Some(1);
    plan.n = 1;
    plan.logprobs = false;
    plan.stop.clear();
    plan
}
