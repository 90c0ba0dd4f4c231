//! `POST /cache/clear`: drops the prefix cache of every loaded model (its unused KV blocks,
//! RAM tier and disk-tier files), e.g. after changing what prompts may be reused. Needs an API
//! key when keys are configured, like every route but the probes.

use crate::server::app_state::AppState;
use crate::server::types::ErrorResponse;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
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
