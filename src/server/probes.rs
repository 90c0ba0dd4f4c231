//! `GET /health` (liveness: 200 while the process can serve, 503 once an engine worker has
//! failed for good, so an orchestrator restarts it) and `GET /ready` (readiness: 200 only
//! when the model is loaded and every engine worker serving; 503 while loading, draining, or
//! rebuilding a worker after a fault). Neither needs an API key.

use crate::server::app_state::{AppState, ServerPhase};
use crate::server::error::ApiError;
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
    responses(
        (status = 200, description = "The process answers and can serve", body = ProbeStatus),
        (status = 503, description = "An engine worker failed and could not be rebuilt: restart the process", body = ErrorResponse),
    )
)]
pub async fn health(State(state): State<AppState>) -> Result<Json<ProbeStatus>, ApiError> {
    if state.phase() == ServerPhase::Failed {
        return Err(ApiError::Unavailable(
            "the inference engine failed and could not be rebuilt; restart the server".to_string(),
        ));
    }
    Ok(Json(ProbeStatus {
        status: "ok".to_string(),
    }))
}

/// Readiness.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "kiln",
    responses(
        (status = 200, description = "Loaded and every engine worker serving", body = ProbeStatus),
        (status = 503, description = "Loading, draining, recovering from an engine fault, or failed", body = ErrorResponse),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Result<Json<ProbeStatus>, ApiError> {
    match state.phase() {
        ServerPhase::Ready => Ok(Json(ProbeStatus {
            status: "ready".to_string(),
        })),
        ServerPhase::Recovering => Err(ApiError::Unavailable(
            "an engine worker is being rebuilt after a fault".to_string(),
        )),
        _ => state
            .check_serving()
            .map(|_| ProbeStatus {
                status: "ready".to_string(),
            })
            .map(Json),
    }
}
