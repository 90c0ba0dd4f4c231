//! `GET /health` (liveness: 200 while the process answers) and `GET /ready` (readiness: 200
//! only when the model is loaded and the engine healthy; 503 while loading, draining, or
//! after an engine fault). Neither needs an API key.

use crate::server::error::ApiError;
use crate::server::state::AppState;
use crate::server::types::ErrorResponse;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// A probe's answer.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ProbeStatus {
    /// `ok` (health) or `ready`.
    pub status: String,
}

/// Liveness.
#[utoipa::path(
    get,
    path = "/health",
    tag = "kiln",
    responses((status = 200, description = "The process answers", body = ProbeStatus))
)]
pub async fn health() -> Json<ProbeStatus> {
    Json(ProbeStatus {
        status: "ok".to_string(),
    })
}

/// Readiness.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "kiln",
    responses(
        (status = 200, description = "Loaded and healthy", body = ProbeStatus),
        (status = 503, description = "Loading, draining or engine failed", body = ErrorResponse),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Result<Json<ProbeStatus>, ApiError> {
    state.runtime().map(|_| {
        Json(ProbeStatus {
            status: "ready".to_string(),
        })
    })
}
