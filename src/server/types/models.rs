//! `GET /v1/models` bodies.

use serde::Serialize;
use utoipa::ToSchema;

/// The models served: each model's id, then its aliases (the default model first).
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
    /// kiln's extension: the model is loaded (requests to an unloaded one load it first).
    pub loaded: bool,
    /// kiln's extension: `loaded`, `loading`, `unloaded` or `failed`.
    pub status: String,
    /// kiln's extension: the model's own id when this card is one of its aliases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<String>,
}
