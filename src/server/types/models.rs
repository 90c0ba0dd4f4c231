//! `GET /v1/models` bodies.

use serde::Serialize;
use utoipa::ToSchema;

/// The models served (the model's id first, then its aliases).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ModelCard>,
}

/// One model id.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// Unix seconds (when the server started).
    pub created: u64,
    pub owned_by: String,
}
