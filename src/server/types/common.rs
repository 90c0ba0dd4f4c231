//! Pieces shared by the endpoints: stop sequences, stream options, usage, errors.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::ToSchema;

/// `stop`: one string or a list of strings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

impl StopSpec {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSpec::One(s) => vec![s],
            StopSpec::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk (with `choices: []`) carrying the usage before `[DONE]`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
}

/// `usage.completion_tokens_details`: OpenAI's predicted-output counts, which kiln fills
/// from speculative decoding (present only when the request's tokens were guessed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct CompletionTokensDetails {
    /// Guessed tokens the model confirmed (part of `completion_tokens`, each produced
    /// without an engine step of its own).
    pub accepted_prediction_tokens: usize,
    /// Guessed tokens the model did not produce (verified, then dropped).
    pub rejected_prediction_tokens: usize,
}

/// Token counts of a request (over all its choices and prompts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct UsageBody {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    /// Present when the request's tokens were guessed (speculative decoding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

impl UsageBody {
    /// Adds one engine request's counts.
    pub fn add(&mut self, u: crate::scheduler::Usage) {
        self.prompt_tokens += u.prompt_tokens;
        self.completion_tokens += u.completion_tokens;
        self.total_tokens = self.prompt_tokens + self.completion_tokens;
        self.prompt_tokens_details.cached_tokens += u.cached_tokens;
        if u.draft_tokens > 0 {
            let d = self.completion_tokens_details.get_or_insert_default();
            d.accepted_prediction_tokens += u.accepted_tokens;
            d.rejected_prediction_tokens += u.draft_tokens - u.accepted_tokens;
        }
    }
}

/// kiln's own field on the streaming usage chunk (not OpenAI's): where the request's time
/// went, measured by the engine from the moment it accepted the request, in milliseconds.
/// Clients that cannot time chunk arrivals (k6) read TTFT and inter-token latency here.
/// Over several prompts (completions with a list): the longest queue and duration, the
/// earliest first token, and every prompt's gaps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct TimingsBody {
    /// Acceptance to the first engine step that ran it.
    pub queue_ms: f64,
    /// Acceptance to the first generated token; null if none was generated.
    pub ttft_ms: Option<f64>,
    /// Acceptance to the end.
    pub duration_ms: f64,
    /// Every gap between two consecutive tokens of a choice.
    pub itl_ms: Vec<f64>,
}

fn ms(d: std::time::Duration) -> f64 {
    // Microsecond resolution keeps the JSON short.
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl TimingsBody {
    /// Adds one engine request's timings.
    pub fn add(&mut self, t: &crate::scheduler::Timings) {
        self.queue_ms = self.queue_ms.max(ms(t.queue));
        self.duration_ms = self.duration_ms.max(ms(t.duration));
        if let Some(first) = t.ttft.map(ms) {
            self.ttft_ms = Some(self.ttft_ms.map_or(first, |cur| cur.min(first)));
        }
        self.itl_ms.extend(t.itl.iter().copied().map(ms));
    }
}

/// OpenAI's error envelope.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// The error itself.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorBody {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `rate_limit_error`, `timeout_error`
    /// or `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code such as `context_length_exceeded` or `model_not_found`.
    pub code: Option<String>,
}

/// One alternative of `top_logprobs` (chat).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
}

/// One generated token's logprob (chat).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[].logprobs` (chat).
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
    /// Always null: kiln does not produce refusals.
    pub refusal: Option<Vec<ChatTokenLogprob>>,
}

/// `choices[].logprobs` (completions): parallel lists, one entry per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// Null for the first token of an echoed prompt (nothing predicts it).
    pub token_logprobs: Vec<Option<f32>>,
    /// For each token, its most likely alternatives: token text -> logprob (null for the
    /// first token of an echoed prompt).
    #[schema(value_type = Vec<Option<std::collections::HashMap<String, f32>>>)]
    pub top_logprobs: Vec<Option<serde_json::Map<String, serde_json::Value>>>,
    /// Where each token starts in the choice's text (in characters).
    pub text_offset: Vec<usize>,
}

/// A string, or a list decoded as `B` (a visitor rather than `#[serde(untagged)]`, so an
/// error inside an item keeps its path and message): the shape of Responses' `input` and
/// content, and of Messages' `system` and content.
pub(super) fn text_or_list<'de, D, B, T>(
    d: D,
    text: fn(String) -> T,
    list: fn(Vec<B>) -> T,
    what: &'static str,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    B: Deserialize<'de>,
{
    struct V<B, T> {
        text: fn(String) -> T,
        list: fn(Vec<B>) -> T,
        what: &'static str,
    }
    impl<'de, B: Deserialize<'de>, T> Visitor<'de> for V<B, T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.what)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
            Ok((self.text)(s.to_string()))
        }
        fn visit_string<E: de::Error>(self, s: String) -> Result<T, E> {
            Ok((self.text)(s))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element::<B>()? {
                out.push(b);
            }
            Ok((self.list)(out))
        }
    }
    d.deserialize_any(V { text, list, what })
}
