//! `GET /v1/models` and `GET /v1/models/{id}`: the model's id (the file stem unless
//! `model.name` sets one) and its aliases. Answered while the model loads too.

use crate::server::error::ApiError;
use crate::server::state::AppState;
use crate::server::types::{ErrorResponse, ModelCard, ModelList};
use axum::extract::{Path, State};
use axum::Json;

fn card(state: &AppState, id: &str) -> ModelCard {
    ModelCard {
        id: id.to_string(),
        object: "model".to_string(),
        created: state.created(),
        owned_by: "kiln".to_string(),
    }
}

/// Lists the models (the id first, then its aliases).
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
    Json(ModelList {
        object: "list".to_string(),
        data: state
            .model_ids()
            .iter()
            .map(|id| card(&state, id))
            .collect(),
    })
}

/// One model by id (or alias).
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
    state.check_model(Some(&id))?;
    Ok(Json(card(&state, &id)))
}
