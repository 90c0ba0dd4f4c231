//! `GET /metrics`: a minimal Prometheus text exposition read from the engine's load numbers
//! on each scrape (the observability work replaces it with a full registry). Metric names
//! are the constants below.

use crate::server::state::{AppState, Phase};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;

pub const BUILD_INFO: &str = "kiln_build_info";
pub const READY: &str = "kiln_ready";
pub const HTTP_IN_FLIGHT: &str = "kiln_http_requests_in_flight";
pub const REQUESTS_RUNNING: &str = "kiln_requests_running";
pub const REQUESTS_WAITING: &str = "kiln_requests_waiting";
pub const KV_BLOCKS_USED: &str = "kiln_kv_blocks_used";
pub const KV_BLOCKS_CACHED: &str = "kiln_kv_blocks_cached";
pub const KV_BLOCKS_TOTAL: &str = "kiln_kv_blocks_total";
pub const KV_USAGE: &str = "kiln_kv_usage_ratio";

fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text.
pub fn render(state: &AppState) -> String {
    let mut out = String::new();
    let (fingerprint, isa) = match state.loaded() {
        Some(rt) => (rt.fingerprint.clone(), crate::kernels::isa::isa().name()),
        None => (String::new(), ""),
    };
    let _ = writeln!(
        out,
        "# HELP {BUILD_INFO} Build and model of this server (always 1).\n# TYPE {BUILD_INFO} gauge\n{BUILD_INFO}{{version=\"{}\",model=\"{}\",isa=\"{}\",fingerprint=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        label(state.model_id()),
        isa,
        fingerprint
    );
    let ready = state.phase() == Phase::Ready;
    gauge(
        &mut out,
        READY,
        "1 when /ready answers 200.",
        f64::from(u8::from(ready)),
    );
    gauge(
        &mut out,
        HTTP_IN_FLIGHT,
        "Generation requests whose response is not complete.",
        state.in_flight() as f64,
    );
    if let Some(rt) = state.loaded() {
        let l = rt.engine.load();
        gauge(
            &mut out,
            REQUESTS_RUNNING,
            "Sequences running.",
            l.running as f64,
        );
        gauge(
            &mut out,
            REQUESTS_WAITING,
            "Requests accepted, not yet running.",
            l.waiting as f64,
        );
        gauge(
            &mut out,
            KV_BLOCKS_USED,
            "KV blocks held by sequences.",
            l.kv_blocks_used as f64,
        );
        gauge(
            &mut out,
            KV_BLOCKS_CACHED,
            "KV blocks held only by the prefix cache (evictable).",
            l.kv_blocks_cached as f64,
        );
        gauge(
            &mut out,
            KV_BLOCKS_TOTAL,
            "KV blocks in all.",
            l.kv_blocks_total as f64,
        );
        let ratio = l.kv_blocks_used as f64 / l.kv_blocks_total.max(1) as f64;
        gauge(
            &mut out,
            KV_USAGE,
            "Share of KV blocks held by sequences.",
            ratio,
        );
    }
    out
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
