//! `POST /tokenize` and `POST /detokenize` (as vLLM and llama.cpp offer): the model's
//! tokenizer over HTTP. `messages` are tokenized exactly as a chat request's prompt is.

use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::offload::blocking;
use crate::server::openapi::errors::PromptErrors;
use crate::server::prompt;
use crate::server::types::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

/// Tokenizes text (`prompt`) or a conversation (`messages`).
#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "kiln",
    request_body(content = TokenizeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The token ids", body = TokenizeResponse),
        PromptErrors,
    ),
    security(("bearer" = []))
)]
pub async fn tokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let lease = state.lease(req.model.as_deref()).await?;
    let rt = Arc::clone(lease.runtime());
    let n_ctx = rt.engine.info().n_ctx;
    let want_strs = req.return_token_strs.unwrap_or(false);
    let rt2 = Arc::clone(&rt);
    let tokens = blocking(move || match (req.prompt, req.messages) {
        (Some(text), None) => {
            Ok(rt2
                .tokenizer
                .encode(&text, req.add_special.unwrap_or(true), true))
        }
        (None, Some(messages)) => {
            prompt::chat_prompt(&rt2, &messages, req.add_generation_prompt.unwrap_or(true))
        }
        _ => Err(ApiError::bad(
            "prompt",
            "give exactly one of `prompt` and `messages`",
        )),
    })
    .await?;
    let token_strs = want_strs.then(|| {
        tokens
            .iter()
            .map(|&id| String::from_utf8_lossy(rt.tokenizer.token_to_piece(id)).into_owned())
            .collect()
    });
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: n_ctx,
        tokens,
        token_strs,
    }))
}

/// Turns token ids back into text.
#[utoipa::path(
    post,
    path = "/detokenize",
    tag = "kiln",
    request_body(content = DetokenizeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The text", body = DetokenizeResponse),
        PromptErrors,
    ),
    security(("bearer" = []))
)]
pub async fn detokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let lease = state.lease(req.model.as_deref()).await?;
    let rt = Arc::clone(lease.runtime());
    let n_vocab = rt.tokenizer.n_vocab();
    let mut ids = Vec::with_capacity(req.tokens.len());
    for (i, &v) in req.tokens.iter().enumerate() {
        match u32::try_from(v) {
            Ok(id) if (id as usize) < n_vocab => ids.push(id),
            _ => {
                return Err(ApiError::bad(
                    format!("tokens[{i}]"),
                    format!("token id {v} is outside the vocabulary of {n_vocab} tokens"),
                ))
            }
        }
    }
    let tok = Arc::clone(&rt.tokenizer);
    let prompt = blocking(move || Ok(tok.decode(&ids))).await?;
    Ok(Json(DetokenizeResponse { prompt }))
}
