//! `GET /metrics` (Prometheus text from the one registry, [`crate::metrics::Metrics`]),
//! `GET /stats` (a JSON summary over the last 1 and 5 minutes) and the middleware that counts
//! every HTTP request by route and status.

use crate::metrics::window::WindowStats;
use crate::server::app_state::{AppState, ServerPhase};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;

/// Refreshes the gauges read at scrape time and renders every family of every model.
pub fn render(state: &AppState) -> String {
    let registry = state.registry();
    let ready = state.phase() == ServerPhase::Ready;
    let single = registry.len() == 1;
    let mut all = Vec::with_capacity(registry.len());
    for (i, pm) in registry.models().iter().enumerate() {
        let rt = registry.loaded(i);
        // One model: every generation request in flight is its (even before its model is
        // picked); several: the requests holding each model.
        let in_flight = if single {
            state.in_flight()
        } else {
            registry.leases(i)
        };
        pm.metrics.set_ready(ready && rt.is_some(), in_flight);
        pm.metrics
            .set_load(&rt.map(|rt| rt.engine.load()).unwrap_or_default());
        all.push(pm.metrics.as_ref());
    }
    crate::metrics::render_all(&all)
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

/// `GET /stats`: latency percentiles and rates over the last 1 and 5 minutes, and the load now,
/// of the default model at the top level and of each model in `models`.
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
    /// Bytes of one sequence's recurrent state beside its KV blocks (hybrid models; 0 else).
    pub recurrent_state_bytes_per_seq: usize,
    /// The default model's prefix cache below the KV cache: its RAM and disk tiers.
    pub prefix_cache: PrefixCacheStats,
    /// Every served model (the default first).
    pub models: Vec<ModelStats>,
    /// Weights and KV bytes of the loaded models.
    pub memory_bytes: u64,
    /// `server.models_memory_budget` (None: no limit).
    pub memory_budget_bytes: Option<u64>,
}

/// The prefix cache's tiers (`cache.*` settings): lookups served by each tier since start
/// (`*_hits`: at least one block; `*_misses`: reached the tier and found none), what the RAM
/// and disk tiers hold, and the disk tier's health.
#[derive(Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct PrefixCacheStats {
    pub pool_hits: u64,
    pub pool_misses: u64,
    pub ram_hits: u64,
    pub ram_misses: u64,
    pub disk_hits: u64,
    pub disk_misses: u64,
    pub ram_blocks: u64,
    pub ram_bytes: u64,
    pub disk_blocks: u64,
    pub disk_bytes: u64,
    /// Blocks the KV cache evicted into RAM.
    pub spilled_blocks: u64,
    pub disk_written_blocks: u64,
    /// Disk files refused by a check (corrupt, truncated, another model's): ignored.
    pub disk_rejected_blocks: u64,
    /// The disk tier cannot write (full or unwritable directory): RAM only for now.
    pub disk_degraded: bool,
    /// Requests waiting for their prompt's blocks to be read from disk (not yet queued).
    pub disk_reads_waiting: u64,
}

impl From<crate::scheduler::TierStats> for PrefixCacheStats {
    fn from(t: crate::scheduler::TierStats) -> Self {
        PrefixCacheStats {
            pool_hits: t.pool_hits,
            pool_misses: t.pool_misses,
            ram_hits: t.ram_hits,
            ram_misses: t.ram_misses,
            disk_hits: t.disk_hits,
            disk_misses: t.disk_misses,
            ram_blocks: t.ram_blocks,
            ram_bytes: t.ram_bytes,
            disk_blocks: t.disk_blocks,
            disk_bytes: t.disk_bytes,
            spilled_blocks: t.spilled,
            disk_written_blocks: t.disk_written,
            disk_rejected_blocks: t.disk_rejected,
            disk_degraded: t.disk_degraded,
            disk_reads_waiting: t.disk_waiting,
        }
    }
}

/// One model's part of `/stats`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ModelStats {
    pub model: String,
    /// `loaded`, `loading`, `unloaded` or `failed`.
    pub status: String,
    #[schema(value_type = Object)]
    pub last_1m: WindowStats,
    #[schema(value_type = Object)]
    pub last_5m: WindowStats,
    pub running: usize,
    pub waiting: usize,
    pub kv_cache_usage: f64,
    pub kv_blocks_used: usize,
    pub kv_blocks_cached: usize,
    pub kv_blocks_total: usize,
    /// Bytes of one sequence's recurrent state beside its KV blocks (hybrid models; 0 else).
    pub recurrent_state_bytes_per_seq: usize,
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
    let registry = state.registry();
    let models: Vec<ModelStats> = registry
        .models()
        .iter()
        .enumerate()
        .map(|(i, pm)| {
            let load = registry
                .loaded(i)
                .map(|rt| rt.engine.load())
                .unwrap_or_default();
            ModelStats {
                model: registry.routes().id(i).to_string(),
                status: registry.status(i).as_str().to_string(),
                last_1m: pm.stats.query(Duration::from_secs(60)),
                last_5m: pm.stats.query(Duration::from_secs(300)),
                running: load.running,
                waiting: load.waiting,
                kv_cache_usage: load.kv_blocks_used as f64 / load.kv_blocks_total.max(1) as f64,
                kv_blocks_used: load.kv_blocks_used,
                kv_blocks_cached: load.kv_blocks_cached,
                kv_blocks_total: load.kv_blocks_total,
                recurrent_state_bytes_per_seq: registry
                    .loaded(i)
                    .map_or(0, |rt| rt.engine.info().recurrent_state_bytes_per_seq),
            }
        })
        .collect();
    let d = &models[0];
    Json(StatsBody {
        status: match state.phase() {
            ServerPhase::Loading => "loading",
            ServerPhase::Ready => "ready",
            ServerPhase::Draining => "draining",
            ServerPhase::Recovering => "recovering",
            ServerPhase::Failed => "failed",
        }
        .to_string(),
        last_1m: d.last_1m.clone(),
        last_5m: d.last_5m.clone(),
        running: d.running,
        waiting: d.waiting,
        kv_cache_usage: d.kv_cache_usage,
        kv_blocks_used: d.kv_blocks_used,
        kv_blocks_cached: d.kv_blocks_cached,
        kv_blocks_total: d.kv_blocks_total,
        recurrent_state_bytes_per_seq: d.recurrent_state_bytes_per_seq,
        memory_bytes: registry.memory_used(),
        memory_budget_bytes: registry.settings().budget,
        prefix_cache: registry.model(0).metrics.tiers_now().into(),
        models,
    })
}

/// Counts every response by route pattern (never the raw path: bounded label values) and
/// status, on the metrics of the model it was routed to; refusals before any work (4xx, 503)
/// also count in `kiln_rejected_total` by reason.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".to_string());
    let (resp, model) = crate::server::registry::track_routing(next.run(req)).await;
    let status = resp.status().as_u16();
    // Counted on the model the request ran on (the default one when it named none served).
    let m = &state.registry().model(model.unwrap_or(0)).metrics;
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
