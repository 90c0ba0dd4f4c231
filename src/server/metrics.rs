//! `GET /metrics` (Prometheus text from the one registry, [`crate::metrics::Metrics`]),
//! `GET /stats` (a JSON summary over the last 1 and 5 minutes) and the middleware that counts
//! every HTTP request by route and status.

use crate::metrics::window::WindowStats;
use crate::server::state::{AppState, ServerPhase};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;

/// Refreshes the gauges read at scrape time and renders every family.
pub fn render(state: &AppState) -> String {
    let m = state.metrics();
    m.set_ready(state.phase() == ServerPhase::Ready, state.in_flight());
    if let Some(rt) = state.loaded() {
        m.set_load(&rt.engine.load());
    }
    m.render()
}

/// Prometheus metrics (text format 0.0.4).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "kiln",
    responses(
        (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
        (status = 401, description = "Missing or wrong API key (unless server.metrics_public)", body = crate::server::types::ErrorResponse),
    ),
    security((), ("bearer" = []))
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&state),
    )
}

/// `GET /stats`: latency percentiles and rates over the last 1 and 5 minutes, and the load now.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct StatsBody {
    /// `"loading"`, `"ready"`, `"draining"`, `"recovering"` (rebuilding a worker after a
    /// fault) or `"failed"`.
    pub status: String,
    #[schema(value_type = Object)]
    pub last_1m: WindowStats,
    #[schema(value_type = Object)]
    pub last_5m: WindowStats,
    pub running: usize,
    pub waiting: usize,
    /// KV blocks held by sequences over all blocks.
    pub kv_cache_usage: f64,
    pub kv_blocks_used: usize,
    pub kv_blocks_cached: usize,
    pub kv_blocks_total: usize,
}

/// A JSON summary for people and scripts without Prometheus (what `kiln top` shows).
#[utoipa::path(
    get,
    path = "/stats",
    tag = "kiln",
    responses(
        (status = 200, description = "Percentiles, rates and load", body = StatsBody),
        (status = 401, description = "Missing or wrong API key (unless server.metrics_public)", body = crate::server::types::ErrorResponse),
    ),
    security((), ("bearer" = []))
)]
pub async fn stats(State(state): State<AppState>) -> Json<StatsBody> {
    let load = state
        .loaded()
        .map(|rt| rt.engine.load())
        .unwrap_or_default();
    let w = state.stats();
    Json(StatsBody {
        status: match state.phase() {
            ServerPhase::Loading => "loading",
            ServerPhase::Ready => "ready",
            ServerPhase::Draining => "draining",
            ServerPhase::Recovering => "recovering",
            ServerPhase::Failed => "failed",
        }
        .to_string(),
        last_1m: w.query(Duration::from_secs(60)),
        last_5m: w.query(Duration::from_secs(300)),
        running: load.running,
        waiting: load.waiting,
        kv_cache_usage: load.kv_blocks_used as f64 / load.kv_blocks_total.max(1) as f64,
        kv_blocks_used: load.kv_blocks_used,
        kv_blocks_cached: load.kv_blocks_cached,
        kv_blocks_total: load.kv_blocks_total,
    })
}

/// Counts every response by route pattern (never the raw path: bounded label values) and
/// status; refusals before any work (4xx, 503) also count in `kiln_rejected_total` by reason.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".to_string());
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let m = state.metrics();
    m.http_request(&endpoint, status);
    let reason = match status {
        400 | 422 => Some("invalid"),
        401 => Some("unauthorized"),
        404 => Some("not_found"),
        408 => Some("timeout"),
        413 => Some("too_large"),
        415 => Some("unsupported_media_type"),
        429 => Some("overloaded"),
        503 => Some("unavailable"),
        _ => None,
    };
    if let Some(r) = reason {
        m.rejected(r);
    }
    resp
}
