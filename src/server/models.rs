//! `GET /v1/models` and `GET /v1/models/{id}`: every served model's id (the file stem unless
//! a name is configured) and its aliases, with whether it is loaded; `POST /models/load` and
//! `POST /models/unload` (llama-server's router mode) load and unload one by name. Answered
//! while the server starts too.

use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::registry::Status;
use crate::server::types::{ErrorResponse, ModelCard, ModelList};
use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The card of `name`, a name of model `i`.
fn card(state: &AppState, i: usize, name: &str) -> ModelCard {
    let registry = state.registry();
    let status = registry.status(i);
    let id = registry.routes().id(i);
    ModelCard {
        id: name.to_string(),
        object: "model".to_string(),
        created: state.created(),
        owned_by: "kiln".to_string(),
        loaded: status == Status::Loaded,
        status: status.as_str().to_string(),
        alias_of: (id != name).then(|| id.to_string()),
    }
}

/// Lists the models (each model's id, then its aliases; the default model first).
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    responses(
        (status = 200, description = "The served model ids", body = ModelList),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn list_models(State(state): State<AppState>) -> Json<ModelList> {
    let routes = state.registry().routes();
    let mut data = Vec::new();
    for i in 0..routes.len() {
        for name in routes.names(i) {
            if routes.resolve_exact(name) == Ok(i) {
                data.push(card(&state, i, name));
            }
        }
    }
    Json(ModelList {
        object: "list".to_string(),
        data,
    })
}

/// One model by id (or alias). A name no model has is answered like a request naming it: the
/// card of the model it reaches (one served model, or `server.default_model`), else a 404.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    tag = "openai",
    params(("id" = String, Path, description = "A model id or alias")),
    responses(
        (status = 200, description = "The model", body = ModelCard),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "No such model", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let routes = state.registry().routes();
    let i = routes.resolve(Some(&id))?;
    // A name no model has (routed by the server's policy) gets the served model's card.
    let name = if routes.contains(&id) {
        id.as_str()
    } else {
        routes.id(i)
    };
    Ok(Json(card(&state, i, name)))
}

/// `POST /models/load` and `/models/unload`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelAction {
    /// A model id or alias.
    pub model: String,
}

/// What a load or unload did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelActionResult {
    /// The model's id.
    pub model: String,
    /// `loaded` or `unloaded`.
    pub status: String,
    /// False when there was nothing to do (already loaded, or not loaded).
    pub changed: bool,
}

/// Loads a model (waiting for it, at most `server.models_load_timeout`); a model whose last
/// load failed is tried again. Unloads least recently used idle models if the memory budget
/// needs it.
#[utoipa::path(
    post,
    path = "/models/load",
    tag = "kiln",
    request_body(content = ModelAction, content_type = "application/json"),
    responses(
        (status = 200, description = "The model is loaded", body = ModelActionResult),
        (status = 400, description = "Invalid request", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "No such model", body = ErrorResponse),
        (status = 413, description = "Body too large", body = ErrorResponse),
        (status = 415, description = "Body is not JSON", body = ErrorResponse),
        (status = 503, description = "The load failed, does not fit the budget, or takes longer than the load timeout", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn load_model(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<ModelAction>,
) -> Result<Json<ModelActionResult>, ApiError> {
    state.check_serving()?;
    let registry = state.registry();
    let i = registry.routes().resolve_exact(&req.model)?;
    let was = registry.status(i) == Status::Loaded;
    registry.load(i).await?;
    Ok(Json(ModelActionResult {
        model: registry.routes().id(i).to_string(),
        status: "loaded".to_string(),
        changed: !was,
    }))
}

/// Unloads a model: its engine stops and its memory is freed before the answer. A model
/// with requests in flight (or loading) is a 409; its next request loads it again.
#[utoipa::path(
    post,
    path = "/models/unload",
    tag = "kiln",
    request_body(content = ModelAction, content_type = "application/json"),
    responses(
        (status = 200, description = "The model is unloaded", body = ModelActionResult),
        (status = 400, description = "Invalid request", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "No such model", body = ErrorResponse),
        (status = 409, description = "Requests are running on the model, or it is loading", body = ErrorResponse),
        (status = 413, description = "Body too large", body = ErrorResponse),
        (status = 415, description = "Body is not JSON", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn unload_model(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<ModelAction>,
) -> Result<Json<ModelActionResult>, ApiError> {
    let registry = state.registry();
    let i = registry.routes().resolve_exact(&req.model)?;
    let changed = registry.unload(i).await?;
    Ok(Json(ModelActionResult {
        model: registry.routes().id(i).to_string(),
        status: "unloaded".to_string(),
        changed,
    }))
}
