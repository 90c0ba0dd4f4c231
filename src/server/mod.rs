//! The OpenAI-compatible HTTP API (axum on tokio): `kiln serve`. This module only declares
//! the rooms and builds the [`router`]; each route's handler lives in the module named for it.
//!
//! - [`router`]: the routes, the API-key check, the 404/405 fallbacks, panic safety;
//!   [`serve`] (in `serve.rs`): binds first (so `/health` answers and `/ready` says 503 while
//!   the models load in the background), then serves until SIGTERM/SIGINT and drains;
//! - handlers, one module per API family or concept: [`chat`], [`completions`],
//!   [`embeddings`], [`rerank`], [`messages`] (Anthropic), [`responses`] (OpenAI's Responses
//!   API), [`llama`] (llama-server's native `/completion`, `/infill`, `/props`, `/slots`,
//!   `/apply-template`), [`models`], [`tokenize`], [`probes`], [`monitoring`] (`/metrics`,
//!   `/stats`), [`openapi`];
//! - what several families share, imported downward by the handlers: [`types`] the bodies;
//!   [`error`] the one mapping from failures to status codes and the error envelopes; `body`
//!   safe JSON bodies; [`generation_fields`] the sampling fields and limits; [`prompt`] chat
//!   messages to tokens (user text never becomes control tokens); [`raw_prompt`] prompts sent
//!   as text or token ids; `reply` a whole reply's reasoning, content and tool calls;
//!   `offload` CPU work off the runtime; [`output_constraint`] response formats and tools;
//! - [`session`]: the one conversion layer every generating route goes through (model
//!   choice, submission, limits, cancellation, deadline); `merged_events` and `sse` read
//!   the engine streams into a whole reply or an API's event stream; [`registry`] the served
//!   models and their life; [`app_state`] what every handler shares.
//!
//! Compute never runs on the async runtime: the engine has its own threads, and prompt
//! rendering and tokenization go to `spawn_blocking` (`offload`).

pub mod access;
pub mod admission;
pub mod app_state;
mod auth;
mod body;
pub mod cache_admin;
pub mod capacity;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod generation_fields;
pub mod history;
pub mod llama;
mod logprobs;
mod merged_events;
pub mod messages;
pub mod models;
pub mod monitoring;
mod offload;
pub mod openapi;
pub mod output_constraint;
pub mod probes;
pub mod prompt;
pub mod query;
pub mod raw_prompt;
pub mod registry;
mod reply;
pub mod request_id;
pub mod rerank;
pub mod response_store;
pub mod responses;
pub mod runtime;
mod serve;
pub mod session;
mod sse;
pub mod tokenize;
pub mod types;

use app_state::AppState;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
pub use serve::{serve, ServeError, ServeOptions};
use std::time::Duration;

/// The application: routes, fallbacks, API keys, and a 500 (never a dropped connection) if
/// a handler panics.
pub fn router(state: AppState) -> Router {
    // Every route that generates goes here: a place in the engine's queue is taken before the
    // request's body is read (see [`admission`]).
    let generating = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/responses", post(responses::create_response))
        .route("/v1/rerank", post(rerank::rerank))
        // llama-server's names and native routes.
        .route("/rerank", post(rerank::rerank))
        .route("/completion", post(llama::completion))
        .route("/infill", post(llama::infill::infill))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admission::reserve,
        ));
    let cors = cors_layer(&state.settings().cors_allowed_origins);
    Router::new()
        .merge(generating)
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route(
            "/v1/responses/{id}",
            get(responses::get_response).delete(responses::delete_response),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::items::list_input_items),
        )
        .route("/v1/models", get(models::list_models))
        // Ids may hold a slash (`org/model`).
        .route("/v1/models/{*id}", get(models::get_model))
        .route("/models/load", post(models::load_model))
        .route("/models/unload", post(models::unload_model))
        .route("/cache/clear", post(cache_admin::clear_cache))
        .route("/cache/warm", post(cache_admin::warm_cache))
        .route("/props", get(llama::props::props))
        .route("/slots", get(llama::props::slots))
        .route("/apply-template", post(llama::props::apply_template))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
        .route("/metrics", get(monitoring::metrics))
        .route("/stats", get(monitoring::stats))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admission::limit,
        ))
        // Outside the in-flight limit: its 429 on an Anthropic route gets Anthropic's shape.
        .layer(axum::middleware::from_fn(error::reshape))
        // Outside the key check (a browser's preflight carries no key) and the in-flight limit
        // (a page reads its 401 or 429 like any other answer).
        .layer(tower::util::option_layer(cors))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            monitoring::track,
        ))
        .layer(axum::middleware::from_fn(request_id::track))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state)
}

/// CORS for browser clients (`server.cors_allowed_origins`; none: no CORS headers, and a
/// preflight is refused like any unknown method). A preflight `OPTIONS` is answered here,
/// before the API-key check (browsers send it without credentials); the request that follows
/// still needs its key. Any request header may be sent (the OpenAI clients add their own);
/// `Retry-After` and `x-request-id` are readable by the page.
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{header, HeaderName, HeaderValue};
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([
                header::RETRY_AFTER,
                HeaderName::from_static(request_id::HEADER),
            ])
            .max_age(Duration::from_secs(600)),
    )
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::Internal("internal error".to_string()).into_response()
}
