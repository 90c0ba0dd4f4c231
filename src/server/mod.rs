//! The OpenAI-compatible HTTP API (axum on tokio): `kiln serve`.
//!
//! - [`router`]: the routes, the API-key check, the 404/405 fallbacks, panic safety;
//! - [`serve`]: binds first (so `/health` answers and `/ready` says 503 while the model
//!   loads in the background), then serves until SIGTERM/SIGINT and drains (see [`serve`]);
//! - [`chat`], [`completions`], [`embeddings`], [`rerank`], [`messages`] (Anthropic),
//!   [`responses`] (OpenAI's Responses API), [`models`], [`tokenize`], [`probes`],
//!   [`metrics`], [`openapi`]: one handler module per concept; [`types`] the bodies; [`error`] the one
//!   mapping from failures to status codes and OpenAI's error envelope; [`body`] safe JSON
//!   bodies; [`params`] the sampling fields and limits; [`prompt`] chat messages to tokens
//!   (user text never becomes control tokens);
//! - [`generate`]: the one conversion layer every generating route goes through (model
//!   choice, submission, limits, cancellation, deadline); [`run`] and [`sse`] read the
//!   engine streams into a whole reply or an API's event stream.
//!
//! Compute never runs on the async runtime: the engine has its own threads, and prompt
//! rendering and tokenization go to `spawn_blocking`.

pub mod access;
pub mod admission;
pub mod app_state;
mod auth;
mod body;
pub mod capacity;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod generation_fields;
mod logprobs;
mod merged_events;
pub mod messages;
pub mod models;
pub mod monitoring;
pub mod openapi;
pub mod output_constraint;
pub mod probes;
pub mod prompt;
pub mod registry;
mod reply;
pub mod request_id;
pub mod rerank;
pub mod responses;
pub mod runtime;
pub mod session;
mod sse;
pub mod tokenize;
pub mod types;

use crate::config::Config;
use app_state::AppState;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use registry::ModelRegistry;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long aborted requests get to send their last bytes, and connections to close, at
/// the end of a drain.
const FINAL_GRACE: Duration = Duration::from_secs(5);

/// Why `kiln serve` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot load the model: {0}")]
    Load(String),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
}

/// What [`serve`] needs beyond the configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Every accepted API key (config, key file and environment, resolved by the caller).
    pub api_keys: Vec<String>,
    /// Testing only: faults injected into the engine.
    pub faults: Vec<crate::scheduler::fault::FaultInjection>,
}

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
        // llama-server's name for it.
        .route("/rerank", post(rerank::rerank))
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

/// Runs `f` on the blocking pool (prompt rendering and tokenization).
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("request processing failed: {e}")))?
}

/// Serves `cfg` until SIGTERM or SIGINT:
///
/// 1. binds `server.host:server.port` and prints `kiln: listening on http://ADDR` to stderr
///    (with the real port when the port is 0);
/// 2. loads the configured models on the blocking pool, in order ([`registry`]; a
///    `server.models_dir`'s load on first use); `/ready` turns 200 when they are loaded (a
///    server of one model stops with an error if it cannot load it, one of several serves
///    the others);
/// 3. on the first signal, drains: `/ready` and new requests get 503 at once, requests in
///    flight get up to `server.drain_timeout` to finish, then the rest are aborted (they end
///    with finish reason `abort`); a second signal cuts the wait short. Then the listener
///    closes, the engines stop, and `serve` returns Ok.
pub async fn serve(cfg: Config, opts: ServeOptions) -> Result<(), ServeError> {
    let mut signals = Signals::new().map_err(ServeError::Signals)?;
    let registry = ModelRegistry::new(&cfg, opts.faults.clone())?;
    let state = AppState::new(cfg.server.clone(), Arc::clone(&registry), opts.api_keys);
    let host = &cfg.server.host;
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{}", cfg.server.port)
    } else {
        format!("{host}:{}", cfg.server.port)
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    eprintln!("kiln: listening on http://{local}");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app = router(state.clone());
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });
    let sweeper = tokio::spawn(Arc::clone(&registry).sweep());

    // The configured models load now, in order; a server of one model stops if it cannot
    // load it, a server of several keeps serving the others.
    let startup = {
        let registry = Arc::clone(&registry);
        async move {
            let single = registry.len() == 1;
            for i in (0..registry.len()).filter(|&i| registry.model(i).eager) {
                if let Err(e) = registry.preload(i).await {
                    if single {
                        return Err(e);
                    }
                    tracing::error!(model = registry.routes().id(i), error = %e, "the model could not be loaded; serving the others");
                }
            }
            Ok(())
        }
    };
    tokio::select! {
        res = startup => {
            res.map_err(ServeError::Load)?;
            state.set_started();
            tracing::info!(
                models = registry.len(),
                loaded = registry.all_loaded().len(),
                default_model = state.model_id(),
                "ready"
            );
        }
        _ = signals.next() => {
            tracing::info!("signal received while loading: stopping");
            state.start_draining();
            let _ = stop_tx.send(());
            let _ = tokio::time::timeout(FINAL_GRACE, &mut server).await;
            return Ok(());
        }
    }

    signals.next().await;
    drain(&state, &mut signals).await;
    let _ = stop_tx.send(());
    if tokio::time::timeout(FINAL_GRACE, &mut server)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain: closing them");
        server.abort();
    }
    sweeper.abort();
    let _ = tokio::task::spawn_blocking(move || registry.shutdown_all()).await;
    tracing::info!("stopped");
    Ok(())
}

/// Refuses new work, lets requests in flight finish up to the drain timeout (or a second
/// signal), then aborts the rest and gives them a moment to send their last chunk.
async fn drain(state: &AppState, signals: &mut Signals) {
    state.start_draining();
    let limit = state.settings().drain_timeout;
    tracing::info!(in_flight = state.in_flight(), timeout = ?limit, "draining");
    let deadline = Instant::now() + limit;
    let wait = async {
        while state.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = tokio::time::timeout_at(deadline, wait) => {}
        _ = signals.next() => tracing::warn!("second signal: aborting requests in flight"),
    }
    if state.in_flight() > 0 {
        tracing::warn!(
            in_flight = state.in_flight(),
            "drain timeout: aborting requests"
        );
        for (_, rt) in state.registry().all_loaded() {
            rt.engine.abort_all();
        }
        let _ = tokio::time::timeout(FINAL_GRACE, async {
            while state.in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

/// SIGTERM and SIGINT.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
