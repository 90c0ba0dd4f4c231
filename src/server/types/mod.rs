//! The bodies of the HTTP API, shaped exactly like OpenAI's (plus llama.cpp / vLLM extensions
//! such as `top_k`, `min_p`, `repetition_penalty`, `ignore_eos`). Each type is both what the
//! handlers (de)serialize and what `/openapi.json` describes (`utoipa::ToSchema`), so the
//! document cannot drift from the code.
//!
//! Requests ignore unknown fields (clients send extras) and accept `null` for any optional
//! field; a known field of the wrong type fails deserialization with its path, which becomes
//! the error's `param`. Ranges are checked later, in `server::generation_fields`.

pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod llama;
pub mod messages;
pub mod models;
pub mod rerank;
pub mod responses;
pub mod sampling;
pub mod tokenize;
pub mod tools;

pub use chat::*;
pub use common::*;
pub use completions::*;
pub use embeddings::*;
pub use models::*;
pub use sampling::SamplingFields;
pub use tokenize::*;
pub use tools::*;
