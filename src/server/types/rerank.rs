//! `POST /v1/rerank` bodies: the Jina / Cohere rerank shape llama-server speaks too.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A rerank request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct RerankRequest {
    /// The model id (see `GET /v1/models`); another model's id is a 404. Optional.
    #[serde(default)]
    pub model: Option<String>,
    /// What the documents are judged against.
    pub query: String,
    /// 1 to 64 documents: strings, or objects with a `text`.
    #[schema(min_items = 1, max_items = 64)]
    pub documents: Vec<RerankDocument>,
    /// Return only the best `top_n` (default all).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub top_n: Option<i64>,
    /// Each result carries its document (`{"text"}`). Default false.
    #[serde(default)]
    pub return_documents: Option<bool>,
    /// Extension: the task the relevance judgement is for (default: "Given a web search
    /// query, retrieve relevant passages that answer the query").
    #[serde(default)]
    pub instruction: Option<String>,
}

/// A document: a string or `{"text": ...}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum RerankDocument {
    Text(String),
    Object { text: String },
}

impl RerankDocument {
    pub fn text(&self) -> &str {
        match self {
            RerankDocument::Text(t) | RerankDocument::Object { text: t } => t,
        }
    }
}

/// The ranking.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RerankResponse {
    /// `rerank-...`
    pub id: String,
    /// Always `list`.
    pub object: String,
    pub model: String,
    /// Most relevant first.
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
}

/// One document's score.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RerankResult {
    /// The document's position in the request.
    pub index: usize,
    /// From 0 to 1: P(yes) / (P(yes) + P(no)) for the relevance question (see docs/api.md).
    pub relevance_score: f64,
    /// With `return_documents`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankText>,
}

/// A returned document.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RerankText {
    pub text: String,
}

/// Token counts (every document's prompt).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}
