//! The sampling fields chat and completions share, checked and turned into an engine
//! [`GenerationRequest`]. Everything whose size a client picks (`n`, `top_logprobs`, the stop
//! list, `logit_bias`) is checked here against the configured limits before anything is
//! allocated in proportion to it, and before the prompt is tokenized.

use crate::config::ServerSettings;
use crate::scheduler::request::{MAX_N, MAX_STOPS, MAX_STOP_BYTES};
use crate::scheduler::sampling::{MAX_LOGIT_BIAS, MAX_TOP_LOGPROBS};
use crate::scheduler::speculative::SpecRequest;
use crate::scheduler::{EngineInfo, GenerationRequest, PromptOutput, SamplingParams};
use crate::server::error::ApiError;
use crate::server::types::{SamplingFields, StopSpec};
use std::collections::HashMap;

/// The request fields behind a [`SamplingPlan`], borrowed from either endpoint's request.
#[derive(Debug, Default)]
pub struct Fields<'a> {
    pub max_tokens: Option<i64>,
    /// The field `max_tokens` came from (`max_tokens` or `max_completion_tokens`).
    pub max_tokens_param: &'static str,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub n: Option<i64>,
    pub stop: Option<&'a StopSpec>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logit_bias: Option<&'a HashMap<String, f64>>,
    pub logprobs: bool,
    pub top_logprobs: Option<i64>,
    /// The field `top_logprobs` came from (`top_logprobs`, or `logprobs` for completions).
    pub top_logprobs_param: &'static str,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub ignore_eos: bool,
    /// `max_tokens` may be 0: the request scores its prompt only (completions with `echo`).
    pub zero_max_tokens: bool,
    /// llama-server's `speculative.n_max` / `speculative.n_min`.
    pub speculative_n_max: Option<i64>,
    pub speculative_n_min: Option<i64>,
}

impl<'a> Fields<'a> {
    /// The fields chat and completions share; the logprob fields are the caller's (their
    /// names differ), `max_tokens` comes from `max_tokens` until the caller says otherwise.
    pub fn shared(s: &'a SamplingFields) -> Fields<'a> {
        Fields {
            max_tokens: s.max_tokens,
            max_tokens_param: "max_tokens",
            temperature: s.temperature,
            top_p: s.top_p,
            n: s.n,
            stop: s.stop.as_ref(),
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            logit_bias: s.logit_bias.as_ref(),
            logprobs: false,
            top_logprobs: None,
            top_logprobs_param: "top_logprobs",
            top_k: s.top_k,
            min_p: s.min_p,
            repetition_penalty: s.repetition_penalty,
            ignore_eos: s.ignore_eos.unwrap_or(false),
            zero_max_tokens: false,
            speculative_n_max: s.speculative_n_max,
            speculative_n_min: s.speculative_n_min,
        }
    }
}

/// Checked sampling settings, waiting for the prompt.
#[derive(Debug, Clone)]
pub struct SamplingPlan {
    pub params: SamplingParams,
    /// None: the server's default, resolved with the prompt's length.
    pub max_tokens: Option<usize>,
    pub max_tokens_param: &'static str,
    pub n: usize,
    pub stop: Vec<String>,
    pub logprobs: bool,
    pub ignore_eos: bool,
    pub speculative: SpecRequest,
}

/// A guess count (`speculative.n_max`, `speculative.n_min`): 0 or more; values above the
/// server's `speculative.max_draft` act as it.
fn draft_count(param: &'static str, v: Option<i64>) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(k) if k >= 0 => Ok(Some(usize::try_from(k).unwrap_or(usize::MAX))),
        Some(k) => Err(ApiError::bad(
            param,
            format!("{param} must be 0 or more, got {k}"),
        )),
    }
}

/// Most `n` this server accepts.
pub fn max_n(settings: &ServerSettings, info: &EngineInfo) -> usize {
    settings.max_n.min(MAX_N).min(info.max_num_seqs).max(1)
}

fn float(v: Option<f64>, default: f32) -> f32 {
    // Out-of-range values become infinities or stay out of range: validate() names them.
    v.map(|x| x as f32).unwrap_or(default)
}

impl SamplingPlan {
    /// Checks `f` against the limits and the vocabulary; the first fault is a 400 naming its
    /// field.
    pub fn new(
        f: &Fields<'_>,
        settings: &ServerSettings,
        info: &EngineInfo,
    ) -> Result<SamplingPlan, ApiError> {
        let max_n = max_n(settings, info);
        let n = match f.n {
            None => 1,
            Some(n) if (1..=max_n as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(ApiError::bad(
                    "n",
                    format!("n must be between 1 and {max_n}, got {n}"),
                ))
            }
        };
        let max_tokens = match f.max_tokens {
            None => None,
            Some(0) if f.zero_max_tokens => Some(0),
            Some(v) if v < 1 => {
                let least = if f.zero_max_tokens { "0" } else { "1" };
                return Err(ApiError::bad(
                    f.max_tokens_param,
                    format!("{} must be at least {least}, got {v}", f.max_tokens_param),
                ));
            }
            Some(v) if v as u64 > settings.max_tokens_cap as u64 => {
                return Err(ApiError::bad(
                    f.max_tokens_param,
                    format!(
                        "{} is {v}, above this server's limit of {}",
                        f.max_tokens_param, settings.max_tokens_cap
                    ),
                ))
            }
            Some(v) => Some(v as usize),
        };
        let top_logprobs = match f.top_logprobs {
            None => 0,
            Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => k as usize,
            Some(k) => {
                return Err(ApiError::bad(
                    f.top_logprobs_param,
                    format!(
                        "{} must be between 0 and {MAX_TOP_LOGPROBS}, got {k}",
                        f.top_logprobs_param
                    ),
                ))
            }
        };
        let stop = stop_list(f.stop, settings.max_stop_strings.min(MAX_STOPS))?;
        let logit_bias = logit_bias(f.logit_bias, settings.max_logit_bias.min(MAX_LOGIT_BIAS))?;
        let top_k = match f.top_k {
            None => 0,
            Some(k) if k >= 0 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => {
                return Err(ApiError::bad(
                    "top_k",
                    format!("top_k must be 0 (off) or more, got {k}"),
                ))
            }
        };
        let params = SamplingParams {
            temperature: float(f.temperature, 1.0),
            top_k,
            top_p: float(f.top_p, 1.0),
            min_p: float(f.min_p, 0.0),
            presence_penalty: float(f.presence_penalty, 0.0),
            frequency_penalty: float(f.frequency_penalty, 0.0),
            repetition_penalty: float(f.repetition_penalty, 1.0),
            logit_bias,
            seed: f.seed.map(|s| s as u64),
            top_logprobs: if f.logprobs { top_logprobs } else { 0 },
        };
        params
            .validate(info.n_vocab)
            .map_err(|e| ApiError::bad(e.param(), e.to_string()))?;
        let speculative = SpecRequest {
            n_max: draft_count("speculative.n_max", f.speculative_n_max)?,
            n_min: draft_count("speculative.n_min", f.speculative_n_min)?,
        };
        Ok(SamplingPlan {
            params,
            max_tokens,
            max_tokens_param: f.max_tokens_param,
            n,
            stop,
            logprobs: f.logprobs,
            ignore_eos: f.ignore_eos,
            speculative,
        })
    }

    /// The engine request for `prompt`. Without `max_tokens` in the request, the default is
    /// `server.max_tokens_default`, lowered to what the context and the KV cache leave.
    /// A prompt over `server.max_prompt_tokens` is a 400 `context_length_exceeded`.
    pub fn request(
        &self,
        prompt: Vec<u32>,
        prompt_param: &str,
        settings: &ServerSettings,
        info: &EngineInfo,
    ) -> Result<GenerationRequest, ApiError> {
        let limit = match settings.max_prompt_tokens {
            0 => info.n_ctx,
            m => m.min(info.n_ctx),
        };
        if prompt.len() > limit {
            return Err(ApiError::context_overflow(
                prompt_param,
                limit,
                prompt.len(),
                None,
            ));
        }
        let max_tokens = self.max_tokens.unwrap_or_else(|| {
            default_max_tokens(settings.max_tokens_default, prompt.len(), self.n, info)
        });
        Ok(GenerationRequest {
            prompt,
            params: self.params.clone(),
            max_tokens,
            stop: self.stop.clone(),
            stop_token_ids: Vec::new(),
            ignore_eos: self.ignore_eos,
            n: self.n,
            logprobs: self.logprobs,
            constraint: None,
            prompt_output: PromptOutput::None,
            speculative: self.speculative,
            api_key_id: crate::server::auth::caller_key_id(),
        })
    }
}

/// `default`, capped by the context left after the prompt and by what the KV cache can hold
/// for `n` choices (the engine's admission rule), at least 1 (a prompt that leaves no room is
/// then refused by the engine with the counts).
pub fn default_max_tokens(default: usize, prompt: usize, n: usize, info: &EngineInfo) -> usize {
    let ctx_left = info.n_ctx.saturating_sub(prompt);
    let bs = info.block_size.max(1);
    let kv_blocks = info.kv_positions_per_worker / bs;
    let per_choice = kv_blocks.saturating_sub(prompt.div_ceil(bs)) / n.max(1);
    let kv_left = per_choice.saturating_sub(1) * bs;
    default.min(ctx_left).min(kv_left).max(1)
}

fn stop_list(stop: Option<&StopSpec>, max: usize) -> Result<Vec<String>, ApiError> {
    let list: &[String] = match stop {
        None => &[],
        Some(StopSpec::One(s)) => std::slice::from_ref(s),
        Some(StopSpec::Many(v)) => v,
    };
    if list.len() > max {
        return Err(ApiError::bad(
            "stop",
            format!(
                "at most {max} stop sequences are allowed, got {}",
                list.len()
            ),
        ));
    }
    if let Some(s) = list.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad(
            "stop",
            format!(
                "a stop sequence is {} bytes long; at most {MAX_STOP_BYTES} are allowed",
                s.len()
            ),
        ));
    }
    Ok(list.iter().filter(|s| !s.is_empty()).cloned().collect())
}

fn logit_bias(
    bias: Option<&HashMap<String, f64>>,
    max: usize,
) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(bias) = bias else {
        return Ok(Vec::new());
    };
    if bias.len() > max {
        return Err(ApiError::bad(
            "logit_bias",
            format!(
                "logit_bias has {} entries; at most {max} are allowed",
                bias.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(bias.len());
    for (k, &v) in bias {
        let id: u32 = k.trim().parse().map_err(|_| {
            let shown: String = k.chars().take(20).collect();
            ApiError::bad(
                "logit_bias",
                format!("logit_bias keys must be token ids, got {shown:?}"),
            )
        })?;
        out.push((id, v as f32));
    }
    out.sort_unstable_by_key(|e| e.0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> EngineInfo {
        EngineInfo {
            n_ctx: 2048,
            n_vocab: 1000,
            n_embd: 64,
            pooling: crate::scheduler::PoolingType::Mean,
            workers: 1,
            threads_per_worker: 1,
            kv_positions_per_worker: 4096,
            block_size: 16,
            max_num_seqs: 8,
            max_batch_tokens: 256,
            max_waiting: 8,
            recurrent_state_bytes_per_seq: 0,
        }
    }

    fn param(f: Fields<'_>) -> String {
        match SamplingPlan::new(&f, &ServerSettings::default(), &info()) {
            Err(ApiError::BadRequest { param, .. }) => param.unwrap_or_default(),
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    fn fields() -> Fields<'static> {
        Fields {
            max_tokens_param: "max_tokens",
            top_logprobs_param: "top_logprobs",
            ..Fields::default()
        }
    }

    #[test]
    fn each_limit_names_its_field() {
        assert_eq!(
            param(Fields {
                n: Some(1_000_000_000),
                ..fields()
            }),
            "n"
        );
        assert_eq!(
            param(Fields {
                n: Some(0),
                ..fields()
            }),
            "n"
        );
        assert_eq!(
            param(Fields {
                max_tokens: Some(0),
                ..fields()
            }),
            "max_tokens"
        );
        assert_eq!(
            param(Fields {
                max_tokens: Some(-1),
                ..fields()
            }),
            "max_tokens"
        );
        assert_eq!(
            param(Fields {
                max_tokens: Some(i64::MAX),
                ..fields()
            }),
            "max_tokens"
        );
        assert_eq!(
            param(Fields {
                top_logprobs: Some(1_000_000),
                ..fields()
            }),
            "top_logprobs"
        );
        assert_eq!(
            param(Fields {
                top_logprobs: Some(-1),
                ..fields()
            }),
            "top_logprobs"
        );
        assert_eq!(
            param(Fields {
                temperature: Some(3.0),
                ..fields()
            }),
            "temperature"
        );
        assert_eq!(
            param(Fields {
                temperature: Some(1e300),
                ..fields()
            }),
            "temperature"
        );
        assert_eq!(
            param(Fields {
                top_k: Some(-2),
                ..fields()
            }),
            "top_k"
        );
        let many = StopSpec::Many(vec!["x".to_string(); 100_000]);
        assert_eq!(
            param(Fields {
                stop: Some(&many),
                ..fields()
            }),
            "stop"
        );
        let oov: HashMap<String, f64> = [("5000".to_string(), 1.0)].into();
        assert_eq!(
            param(Fields {
                logit_bias: Some(&oov),
                ..fields()
            }),
            "logit_bias"
        );
        let word: HashMap<String, f64> = [("hello".to_string(), 1.0)].into();
        assert_eq!(
            param(Fields {
                logit_bias: Some(&word),
                ..fields()
            }),
            "logit_bias"
        );
    }

    #[test]
    fn default_max_tokens_fits_context_and_kv() {
        let i = info();
        assert_eq!(default_max_tokens(1024, 10, 1, &i), 1024);
        assert_eq!(default_max_tokens(1024, 2000, 1, &i), 48);
        // 4096 positions = 256 blocks; a 100-token prompt takes 7; 4 choices share the rest.
        assert_eq!(default_max_tokens(4096, 100, 4, &i), (249 / 4 - 1) * 16);
        assert_eq!(default_max_tokens(1024, 5000, 1, &i), 1);
    }
}
