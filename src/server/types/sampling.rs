//! The sampling fields chat and completions share, as one struct both requests flatten
//! (`#[serde(flatten)]`), so a field added here is accepted, documented and checked by both.
//!
//! serde's flatten loses the path of an error inside the flattened struct (the value is
//! buffered first), so each field names itself in its own error message (see [`FIELD_TAG`]);
//! the body reader turns that back into the error's `param`.

use super::common::{StopSpec, StreamOptions};
use super::tools::ResponseFormat;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::HashMap;
use utoipa::ToSchema;

/// How an error inside a flattened field starts: `field `max_tokens`: invalid type ...`.
pub const FIELD_TAG: &str = "field `";

/// The field an error message from a flattened field names, and the rest of the message.
pub fn split_field_error(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix(FIELD_TAG)?;
    let (field, rest) = rest.split_once('`')?;
    Some((field, rest.trim_start_matches(':').trim_start()))
}

/// One deserializer per field that prefixes its errors with the field's name.
macro_rules! named_fields {
    ($($fn_name:ident: $ty:ty = $name:literal;)*) => {
        $(
            fn $fn_name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                <$ty>::deserialize(d)
                    .map_err(|e| de::Error::custom(format!("{FIELD_TAG}{}`: {e}", $name)))
            }
        )*
    };
}

named_fields! {
    de_max_tokens: Option<i64> = "max_tokens";
    de_temperature: Option<f64> = "temperature";
    de_top_p: Option<f64> = "top_p";
    de_n: Option<i64> = "n";
    de_stop: Option<StopSpec> = "stop";
    de_seed: Option<i64> = "seed";
    de_presence_penalty: Option<f64> = "presence_penalty";
    de_frequency_penalty: Option<f64> = "frequency_penalty";
    de_logit_bias: Option<HashMap<String, f64>> = "logit_bias";
    de_user: Option<String> = "user";
    de_stream: Option<bool> = "stream";
    de_stream_options: Option<StreamOptions> = "stream_options";
    de_top_k: Option<i64> = "top_k";
    de_min_p: Option<f64> = "min_p";
    de_repetition_penalty: Option<f64> = "repetition_penalty";
    de_ignore_eos: Option<bool> = "ignore_eos";
    de_response_format: Option<ResponseFormat> = "response_format";
}

/// Sampling, stopping, streaming and output format: the fields of a chat or completion
/// request that are not about the prompt. Ranges are checked by `server::generation_fields::Plan`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct SamplingFields {
    /// Tokens to generate at most per choice (chat also takes `max_completion_tokens`,
    /// which wins when both are given). Default: the server's `max_tokens_default`, lowered
    /// to what the context leaves.
    #[serde(default, deserialize_with = "de_max_tokens")]
    #[schema(minimum = 1)]
    pub max_tokens: Option<i64>,
    /// 0 to 2; 0 is greedy. Default 1.
    #[serde(default, deserialize_with = "de_temperature")]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    /// Nucleus sampling, in (0, 1]. Default 1.
    #[serde(default, deserialize_with = "de_top_p")]
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// Choices to generate (per prompt). Default 1.
    #[serde(default, deserialize_with = "de_n")]
    #[schema(minimum = 1, maximum = 16)]
    pub n: Option<i64>,
    /// Up to `server.max_stop_strings` strings; the text stops before the first one.
    #[serde(default, deserialize_with = "de_stop")]
    pub stop: Option<StopSpec>,
    /// Seed of the sampler: the same seed and parameters give the same text.
    #[serde(default, deserialize_with = "de_seed")]
    pub seed: Option<i64>,
    #[serde(default, deserialize_with = "de_presence_penalty")]
    #[schema(minimum = -2, maximum = 2)]
    pub presence_penalty: Option<f64>,
    #[serde(default, deserialize_with = "de_frequency_penalty")]
    #[schema(minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<f64>,
    /// Token id (as a string) -> bias from -100 to 100 added to its logit.
    #[serde(default, deserialize_with = "de_logit_bias")]
    pub logit_bias: Option<HashMap<String, f64>>,
    /// An end-user id (accepted, not used).
    #[serde(default, deserialize_with = "de_user")]
    pub user: Option<String>,
    /// Stream the answer as server-sent events.
    #[serde(default, deserialize_with = "de_stream")]
    pub stream: Option<bool>,
    #[serde(default, deserialize_with = "de_stream_options")]
    pub stream_options: Option<StreamOptions>,
    /// Extension: keep only the `top_k` most likely tokens (0 = off).
    #[serde(default, deserialize_with = "de_top_k")]
    #[schema(minimum = 0)]
    pub top_k: Option<i64>,
    /// Extension: keep tokens at least `min_p` times as likely as the best one (0 to 1).
    #[serde(default, deserialize_with = "de_min_p")]
    #[schema(minimum = 0, maximum = 1)]
    pub min_p: Option<f64>,
    /// Extension: HF / llama.cpp repetition penalty in (0, 2]; 1 = off.
    #[serde(default, deserialize_with = "de_repetition_penalty")]
    #[schema(exclusive_minimum = 0, maximum = 2)]
    pub repetition_penalty: Option<f64>,
    /// Extension: keep generating through end-of-generation tokens (benchmarks).
    #[serde(default, deserialize_with = "de_ignore_eos")]
    pub ignore_eos: Option<bool>,
    /// Extension (llama-server's field): most tokens speculative decoding may guess per step
    /// for this request (within the server's `speculative.max_draft`); 0 turns it off. The
    /// reply is the same either way.
    #[serde(default, rename = "speculative.n_max")]
    #[schema(minimum = 0)]
    pub speculative_n_max: Option<i64>,
    /// Extension (llama-server's field): fewest guesses worth verifying.
    #[serde(default, rename = "speculative.n_min")]
    #[schema(minimum = 0)]
    pub speculative_n_min: Option<i64>,
    /// `text`, `json_object`, or `json_schema` (output valid by construction).
    #[serde(default, deserialize_with = "de_response_format")]
    pub response_format: Option<ResponseFormat>,
}

impl SamplingFields {
    /// Whether the reply streams.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether a stream ends with a usage chunk (`stream_options.include_usage`).
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}
