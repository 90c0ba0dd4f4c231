//! What a caller submits, what it gets back, and why a submission can be refused.

pub use crate::engine::pooling::{Pooling, PoolingType};
use crate::scheduler::sampling::{SamplingError, SamplingParams};
use crate::scheduler::speculative::SpecRequest;
use crate::scheduler::state::AdmitError;
pub use crate::scheduler::stop::FinishReason;
use crate::structured::Constraint;
use std::sync::Arc;
use std::time::Duration;

/// Most choices one request may ask for (`n`).
pub const MAX_N: usize = 16;
/// Most stop strings per request, and the longest one in bytes.
pub const MAX_STOPS: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

/// One generation request: token ids in, `n` streams of tokens out.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// The prompt, already tokenized (with the chat template applied when it is a chat).
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Tokens to generate at most per choice (the HTTP layer resolves the default).
    pub max_tokens: usize,
    /// Stop strings: the text before the first of them is returned, never the string itself.
    pub stop: Vec<String>,
    /// Extra token ids that end a choice (besides the model's end-of-generation tokens).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating through the model's end-of-generation tokens.
    pub ignore_eos: bool,
    /// Independent choices sampled from one prompt prefill (1..=[`MAX_N`]).
    pub n: usize,
    /// Report each token's logprob (and `params.top_logprobs` alternatives).
    pub logprobs: bool,
    /// A grammar every choice's output must follow (tokens that would break it are masked
    /// before sampling; the choice ends where the grammar is complete).
    pub constraint: Option<Arc<Constraint>>,
    /// What the request wants from its prompt itself, computed in the same prefill.
    pub prompt_output: PromptOutput,
    /// Its own speculative-decoding bounds (llama-server's `speculative.n_max`/`n_min`);
    /// they never change the reply, only how fast it comes.
    pub speculative: SpecRequest,
    /// Who sent it, as the prefix cache may see it: a hash of the caller's API key (never the
    /// key), None without one. With `cache.namespace_by_key` its prompt matches only prefixes
    /// computed for the same id.
    pub api_key_id: Option<u64>,
}

/// What a request wants from its prompt's positions besides their KV.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PromptOutput {
    #[default]
    None,
    /// Each prompt token's logprob given the tokens before it (the first token has none),
    /// with the `top` most likely alternatives: one [`Event::PromptLogprobs`] before any
    /// delta. `max_tokens` may be 0 (score the prompt only).
    Logprobs { top: usize },
    /// The prompt's embedding: the final hidden states (after the output norm) of its
    /// positions pooled as `pooling` says and L2-normalized, one [`Event::Embedding`]; the
    /// request generates nothing (`max_tokens` must be 0).
    Embedding { pooling: Pooling },
}

impl PromptOutput {
    /// Whether every prompt position needs its logits row.
    pub fn wants_rows(self) -> bool {
        !matches!(self, PromptOutput::None)
    }
}

impl GenerationRequest {
    /// A request for `prompt` with default sampling, one choice and `max_tokens`.
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
        GenerationRequest {
            prompt,
            params: SamplingParams::default(),
            max_tokens,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            n: 1,
            logprobs: false,
            constraint: None,
            prompt_output: PromptOutput::None,
            speculative: SpecRequest::default(),
            api_key_id: None,
        }
    }
}

/// Why a request was not accepted. Each variant names the parameter at fault where there is one
/// ([`SubmitError::param`]) so the HTTP layer can build OpenAI's error envelope.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("{0}")]
    Sampling(#[from] SamplingError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {id} in the prompt is outside the vocabulary of {n_vocab}")]
    BadToken { id: u32, n_vocab: usize },
    #[error("max_tokens must be at least 1 (0 only when scoring the prompt)")]
    ZeroMaxTokens,
    #[error("n must be between 1 and {max}, got {got}")]
    BadN { got: usize, max: usize },
    #[error("at most {max} stop sequences of at most {max_bytes} bytes each")]
    BadStop { max: usize, max_bytes: usize },
    #[error("stop_token_ids: token id {id} is outside the vocabulary of {n_vocab}")]
    BadStopToken { id: u32, n_vocab: usize },
    /// The prompt, or the prompt plus max_tokens, does not fit the context.
    #[error("{0}")]
    ContextLength(AdmitError),
    /// It fits the context but not the whole KV cache: it could never run.
    #[error("{0}")]
    KvCapacity(AdmitError),
    /// The waiting queue is full: try again later.
    #[error("the server is overloaded ({waiting} requests waiting); retry after {retry_after:?}")]
    Overloaded {
        waiting: usize,
        retry_after: Duration,
    },
    /// The engine is shutting down or has failed.
    #[error("the engine is not accepting requests: {0}")]
    Unavailable(&'static str),
}

impl SubmitError {
    /// The OpenAI request field at fault, if any.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            SubmitError::Sampling(e) => Some(e.param()),
            SubmitError::EmptyPrompt | SubmitError::BadToken { .. } => Some("prompt"),
            SubmitError::ZeroMaxTokens => Some("max_tokens"),
            SubmitError::BadN { .. } => Some("n"),
            SubmitError::BadStop { .. } => Some("stop"),
            SubmitError::BadStopToken { .. } => Some("stop_token_ids"),
            SubmitError::ContextLength(_) | SubmitError::KvCapacity(_) => Some("messages"),
            SubmitError::Overloaded { .. } | SubmitError::Unavailable(_) => None,
        }
    }
}

/// One generated token's log-probability, with the most likely alternatives when asked.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// Generated over all choices.
    pub completion_tokens: usize,
    /// Speculative decoding, over all choices: guessed tokens verified, and those kept (part
    /// of `completion_tokens`, each produced without a step of its own).
    pub draft_tokens: usize,
    pub accepted_tokens: usize,
}

/// Where a finished request's time went, measured on the engine thread from submission.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    /// Submission to its first scheduled step.
    pub queue: Duration,
    /// Submission to its first generated token (None if none was generated).
    pub ttft: Option<Duration>,
    /// Every gap between two consecutive tokens of a choice, in the order they happened.
    pub itl: Vec<Duration>,
    /// Submission to the end.
    pub duration: Duration,
}

/// What a request's stream yields. Every stream ends with exactly one [`Event::Done`] or
/// [`Event::Error`], unless the caller dropped it first.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// New output of one choice: the tokens sampled since its last delta, the text that is now
    /// safe to show (whole characters; text that may start a stop string is held back, so it
    /// can be empty) and, when asked, one logprob entry per token. An end-of-generation token
    /// ends the choice without a delta (it still counts in `Usage::completion_tokens`).
    Delta {
        choice: usize,
        ids: Vec<u32>,
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    /// The prompt's logprobs (see [`PromptOutput::Logprobs`]): entry `i` is prompt token
    /// `i + 1`'s (the first prompt token has none). Sent once, before any delta.
    PromptLogprobs { logprobs: Vec<TokenLogprob> },
    /// The prompt's embedding (see [`PromptOutput::Embedding`]), unit length. Sent once,
    /// before the request's Finished and Done.
    Embedding { embedding: Vec<f32> },
    /// A choice ended; no more deltas for it. `stop` is the stop string that ended it, if
    /// one did.
    Finished {
        choice: usize,
        reason: FinishReason,
        stop: Option<String>,
    },
    /// Every choice ended.
    Done { usage: Usage, timings: Timings },
    /// The engine failed while running the request (a fault in a step).
    Error { message: String },
}
