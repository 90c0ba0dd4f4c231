//! llama-server's native bodies (`POST /completion`, `/infill`, `/apply-template`, `GET
//! /props`), shaped as its README documents them, so tools written for llama-server read
//! kiln's replies unchanged. Unknown fields are ignored, as llama-server does.

use super::chat::ChatMessage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /completion` (and the generation fields of `/infill`).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct LlamaCompletionRequest {
    /// Routed like every other route's `model` (any name reaches a server's one model).
    #[serde(default)]
    pub model: Option<String>,
    /// A string, token ids, ids mixed with strings (`[12, 34, "text", 56]`: one prompt), or
    /// an array of such prompts (the reply is then an array, one result per prompt).
    #[serde(default)]
    #[schema(value_type = Value)]
    pub prompt: serde_json::Value,
    /// Tokens to generate; -1 (the default): the server's default, lowered to the context
    /// left; 0: the prompt is evaluated only.
    #[serde(default)]
    pub n_predict: Option<i64>,
    /// OpenAI's name for `n_predict` (llama-server reads it when `n_predict` is absent).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    /// 0: off.
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    /// kiln's `repetition_penalty`.
    #[serde(default)]
    pub repeat_penalty: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Stop strings (not included in `content`).
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// -1 (or absent): a random seed.
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// `[[token id or text, bias or false], ...]` or `{"<id or text>": bias}`; `false` bans
    /// the token; a text applies to each of its tokens.
    #[serde(default)]
    pub logit_bias: Option<serde_json::Value>,
    /// The probabilities of the top N tokens at each step (`completion_probabilities`).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 20)]
    pub n_probs: Option<i64>,
    /// Completions per prompt.
    #[serde(default)]
    pub n_cmpl: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Return the generated token ids in `tokens`.
    #[serde(default)]
    pub return_tokens: Option<bool>,
    /// Accepted: kiln's prefix cache always reuses the KV of prompt prefixes it has seen
    /// (`scheduler.prefix_cache`), for every request.
    #[serde(default)]
    pub cache_prompt: Option<bool>,
    /// Most tokens speculative decoding may guess per step (within the server's
    /// `speculative.max_draft`); 0 turns it off for this request.
    #[serde(default, rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    /// Fewest guesses worth verifying.
    #[serde(default, rename = "speculative.n_min")]
    pub speculative_n_min: Option<i64>,
    /// A JSON schema the reply must follow (kiln's `response_format` json_schema).
    #[serde(default)]
    pub json_schema: Option<serde_json::Value>,
    /// Only these fields of the reply (`"timings/predicted_n"` lifts a nested one to the top
    /// under that name); unknown ones are left out.
    #[serde(default)]
    pub response_fields: Option<Vec<String>>,
    /// Samplers kiln does not have: each is refused (400 naming it) unless left at its
    /// neutral value, so no request silently samples differently than asked.
    #[serde(default)]
    pub grammar: Option<String>,
    #[serde(default)]
    pub mirostat: Option<i64>,
    #[serde(default)]
    pub typical_p: Option<f64>,
    #[serde(default)]
    pub dynatemp_range: Option<f64>,
    #[serde(default)]
    pub dry_multiplier: Option<f64>,
    #[serde(default)]
    pub xtc_probability: Option<f64>,
    #[serde(default)]
    pub post_sampling_probs: Option<bool>,
    #[serde(default)]
    pub lora: Option<Vec<serde_json::Value>>,
}

/// `POST /infill`: fill-in-the-middle with the model's FIM tokens, plus every field of
/// `/completion` (`prompt` is written after the middle marker: text already typed there).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct InfillRequest {
    /// The code before the cursor.
    #[serde(default)]
    pub input_prefix: Option<String>,
    /// The code after the cursor.
    #[serde(default)]
    pub input_suffix: Option<String>,
    /// Other files for context: each `{"filename", "text"}`.
    #[serde(default)]
    pub input_extra: Option<Vec<ExtraChunk>>,
    #[serde(flatten)]
    pub completion: LlamaCompletionRequest,
}

/// One file of `/infill`'s `input_extra`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct ExtraChunk {
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

/// `/completion`'s reply: one result, or an array of them (several prompts, or `n_cmpl`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum LlamaCompletionReply {
    One(Box<LlamaCompletionResult>),
    Many(Vec<LlamaCompletionResult>),
}

/// One result of `/completion` (a reply, or the last event of a stream). A stream's other
/// events carry only `index`, `content`, `tokens`, `stop` (false) and, with `n_probs`,
/// `completion_probabilities`. With `response_fields`, only the fields asked for (nested ones
/// lifted under their path, `"timings/predicted_n"`): every field may be absent.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct LlamaCompletionResult {
    #[schema(required = false)]
    pub index: usize,
    #[schema(required = false)]
    pub content: String,
    /// The generated ids (with `return_tokens`, and in every stream event).
    #[schema(required = false)]
    pub tokens: Vec<u32>,
    /// kiln has no fixed slots: always -1.
    #[schema(required = false)]
    pub id_slot: i64,
    /// True on the result that ends a completion.
    #[schema(required = false)]
    pub stop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_predicted: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_evaluated: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_settings: Option<GenerationSettings>,
    /// The prompt as the model read it (its tokens, detokenized).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_new_line: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// `eos`, `limit` (`n_predict` or the context), `word` (a stop string) or `none`
    /// (cancelled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopping_word: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_cached: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<LlamaTimings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_probabilities: Option<Vec<TokenProbs>>,
}

/// One generated token's probabilities (`n_probs`).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TokenProbs {
    pub id: u32,
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top_logprobs: Vec<TopProb>,
}

/// One alternative of [`TokenProbs`].
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TopProb {
    pub id: u32,
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// llama-server's timings, from kiln's engine measurements.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct LlamaTimings {
    /// Prompt tokens served by the prefix cache.
    pub cache_n: usize,
    /// Prompt tokens computed.
    pub prompt_n: usize,
    /// From the first engine step to the first token.
    pub prompt_ms: f64,
    pub prompt_per_token_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: usize,
    /// From the first token to the end.
    pub predicted_ms: f64,
    pub predicted_per_token_ms: f64,
    pub predicted_per_second: f64,
}

/// The settings a completion ran with (and `/props`' defaults).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct GenerationSettings {
    pub n_ctx: usize,
    /// -1: the server's default (`server.max_tokens_default`, lowered to the context left).
    pub n_predict: i64,
    pub model: String,
    /// -1: random.
    pub seed: i64,
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub typical_p: f32,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub mirostat: i64,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub n_probs: usize,
    pub samplers: Vec<String>,
}

/// `GET /props`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PropsResponse {
    pub default_generation_settings: DefaultSettings,
    /// Sequences the engine runs at once (`scheduler.max_num_seqs`).
    pub total_slots: usize,
    pub model_path: String,
    /// The served id (what replies carry).
    pub model_alias: String,
    /// The chat template in use (the model's, or the configured one).
    pub chat_template: String,
    pub chat_template_caps: BTreeMap<String, bool>,
    pub bos_token: String,
    pub eos_token: String,
    pub modalities: Modalities,
    /// `kiln <version>`.
    pub build_info: String,
    pub is_sleeping: bool,
}

/// `/props`' `default_generation_settings`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DefaultSettings {
    pub n_ctx: usize,
    pub params: GenerationSettings,
}

/// What inputs the model takes besides text.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Modalities {
    pub vision: bool,
    pub audio: bool,
}

/// `POST /apply-template`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ApplyTemplateRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    /// Variables for the template (`enable_thinking`...), as chat's.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The rendered prompt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApplyTemplateResponse {
    pub prompt: String,
}
