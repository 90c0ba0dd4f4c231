//! `/v1/embeddings` request and response bodies (OpenAI's shape).

use super::PromptInput;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A string, strings, token ids or lists of ids: one embedding each.
    pub input: PromptInput,
    /// `float` (the default) or `base64` (the little-endian f32 bytes, base64-encoded).
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Accepted only when it equals the model's embedding length (no truncation).
    #[serde(default)]
    pub dimensions: Option<i64>,
    /// Accepted and ignored.
    #[serde(default)]
    pub user: Option<String>,
}

/// One input's embedding.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct EmbeddingData {
    /// Always `embedding`.
    pub object: String,
    pub index: usize,
    pub embedding: EmbeddingVector,
}

/// An embedding: numbers (unit L2 norm), or with `encoding_format: "base64"` their
/// little-endian f32 bytes as a base64 string.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

/// `usage` of an embeddings response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// The response to `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct EmbeddingResponse {
    /// Always `list`.
    pub object: String,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}
