//! `POST /tokenize` and `POST /detokenize` bodies (vLLM's shapes).

use super::chat::ChatMessage;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Text, or a conversation rendered with the chat template, to tokenize.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// Text to tokenize (control-token text such as `<|im_start|>` is parsed). `content` is
    /// accepted as another name for it (llama.cpp).
    #[serde(default, alias = "content")]
    pub prompt: Option<String>,
    /// A conversation, tokenized exactly as `/v1/chat/completions` would.
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// Add BOS/EOS as the vocabulary asks (text only). Default true.
    #[serde(default)]
    pub add_special: Option<bool>,
    /// With `messages`: end where the assistant's reply starts. Default true.
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Also return each token's text.
    #[serde(default)]
    pub return_token_strs: Option<bool>,
}

/// Token ids.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TokenizeResponse {
    pub count: usize,
    /// The context length requests must fit in.
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

/// Token ids to turn back into text.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

/// The text of the tokens (control tokens render as nothing).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
