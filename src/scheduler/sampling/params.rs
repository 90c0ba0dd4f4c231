//! Per-request sampling parameters and their validation.

/// At most this many `logit_bias` entries per request.
pub const MAX_LOGIT_BIAS: usize = 1024;
/// At most this many alternatives reported per token (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Temperatures below this are greedy.
pub const GREEDY_BELOW: f32 = 1e-5;

/// Per-request sampling parameters (OpenAI semantics plus `top_k`, `min_p` and
/// `repetition_penalty`). The default samples at temperature 1 with nothing else applied.
/// Check a request's parameters with [`SamplingParams::validate`] before sampling with them.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature in [0, 2]; below [`GREEDY_BELOW`] (0 included) is greedy: the
    /// argmax of the biased, penalised row.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in
    /// (0, 1]; 1 = off.
    pub top_p: f32,
    /// Keep tokens at least `min_p` times as likely as the most likely one, in [0, 1]; 0 = off.
    pub min_p: f32,
    /// In [-2, 2]: subtracted once from the logit of every token already generated.
    pub presence_penalty: f32,
    /// In [-2, 2]: subtracted `count` times from the logit of a token generated `count` times.
    pub frequency_penalty: f32,
    /// In (0, 2]; 1 = off. Over prompt and generated tokens (each distinct token once): a
    /// positive logit is divided by it, a negative one multiplied (HF / llama.cpp).
    pub repetition_penalty: f32,
    /// `(token id, bias)` with bias in [-100, 100], added to the logit; -100 bans the token.
    /// At most [`MAX_LOGIT_BIAS`] entries, each id once.
    pub logit_bias: Vec<(u32, f32)>,
    /// The generator's seed; `None` lets the scheduler pick one.
    pub seed: Option<u64>,
    /// How many alternatives to report with each token's logprob, at most [`MAX_TOP_LOGPROBS`].
    pub top_logprobs: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            seed: None,
            top_logprobs: 0,
        }
    }
}

/// A sampling parameter out of its range. [`SamplingError::param`] names the field as the
/// OpenAI API spells it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature must be a number from 0 to 2, got {0}")]
    Temperature(f32),
    #[error("top_p must be a number above 0 and at most 1, got {0}")]
    TopP(f32),
    #[error("min_p must be a number from 0 to 1, got {0}")]
    MinP(f32),
    #[error("presence_penalty must be a number from -2 to 2, got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be a number from -2 to 2, got {0}")]
    FrequencyPenalty(f32),
    #[error("repetition_penalty must be a number above 0 and at most 2, got {0}")]
    RepetitionPenalty(f32),
    #[error("logit_bias has {got} entries; at most {max} are allowed")]
    TooManyLogitBias { got: usize, max: usize },
    #[error("logit_bias token {id} is outside the vocabulary of {n_vocab} tokens")]
    LogitBiasToken { id: u32, n_vocab: usize },
    #[error("logit_bias for token {id} must be a number from -100 to 100, got {bias}")]
    LogitBiasValue { id: u32, bias: f32 },
    #[error("logit_bias lists token {id} more than once")]
    DuplicateLogitBias { id: u32 },
    #[error("top_logprobs must be at most {max}, got {got}")]
    TopLogprobs { got: usize, max: usize },
}

impl SamplingError {
    /// The request field at fault, as the OpenAI API names it (for the error's `param`).
    pub fn param(&self) -> &'static str {
        match self {
            SamplingError::Temperature(_) => "temperature",
            SamplingError::TopP(_) => "top_p",
            SamplingError::MinP(_) => "min_p",
            SamplingError::PresencePenalty(_) => "presence_penalty",
            SamplingError::FrequencyPenalty(_) => "frequency_penalty",
            SamplingError::RepetitionPenalty(_) => "repetition_penalty",
            SamplingError::TooManyLogitBias { .. }
            | SamplingError::LogitBiasToken { .. }
            | SamplingError::LogitBiasValue { .. }
            | SamplingError::DuplicateLogitBias { .. } => "logit_bias",
            SamplingError::TopLogprobs { .. } => "top_logprobs",
        }
    }
}

/// `lo <= x <= hi` (or `lo < x` when `open_lo`), false for NaN.
fn within(x: f32, lo: f32, open_lo: bool, hi: f32) -> bool {
    (if open_lo { x > lo } else { x >= lo }) && x <= hi
}

impl SamplingParams {
    /// Checks every field (finite and in range, bias ids `< n_vocab` and unique, at most
    /// [`MAX_LOGIT_BIAS`] bias entries and [`MAX_TOP_LOGPROBS`] alternatives) and returns the
    /// first fault in field order. `top_k` and `seed` take any value.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplingError> {
        let t = self.temperature;
        if !within(t, 0.0, false, 2.0) {
            return Err(SamplingError::Temperature(t));
        }
        if !within(self.top_p, 0.0, true, 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !within(self.min_p, 0.0, false, 1.0) {
            return Err(SamplingError::MinP(self.min_p));
        }
        if !within(self.presence_penalty, -2.0, false, 2.0) {
            return Err(SamplingError::PresencePenalty(self.presence_penalty));
        }
        if !within(self.frequency_penalty, -2.0, false, 2.0) {
            return Err(SamplingError::FrequencyPenalty(self.frequency_penalty));
        }
        if !within(self.repetition_penalty, 0.0, true, 2.0) {
            return Err(SamplingError::RepetitionPenalty(self.repetition_penalty));
        }
        self.validate_logit_bias(n_vocab)?;
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(SamplingError::TopLogprobs {
                got: self.top_logprobs,
                max: MAX_TOP_LOGPROBS,
            });
        }
        Ok(())
    }

    fn validate_logit_bias(&self, n_vocab: usize) -> Result<(), SamplingError> {
        let bias = &self.logit_bias;
        if bias.len() > MAX_LOGIT_BIAS {
            return Err(SamplingError::TooManyLogitBias {
                got: bias.len(),
                max: MAX_LOGIT_BIAS,
            });
        }
        for &(id, b) in bias {
            if id as usize >= n_vocab {
                return Err(SamplingError::LogitBiasToken { id, n_vocab });
            }
            if !within(b, -100.0, false, 100.0) {
                return Err(SamplingError::LogitBiasValue { id, bias: b });
            }
        }
        let mut ids: Vec<u32> = bias.iter().map(|e| e.0).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(SamplingError::DuplicateLogitBias { id: w[0] });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N_VOCAB: usize = 1000;

    fn check(p: SamplingParams) -> Result<(), SamplingError> {
        p.validate(N_VOCAB)
    }

    fn fault(p: SamplingParams) -> SamplingError {
        match check(p) {
            Err(e) => e,
            Ok(()) => panic!("accepted"),
        }
    }

    fn d() -> SamplingParams {
        SamplingParams::default()
    }

    #[test]
    fn default_and_boundaries_are_valid() {
        assert_eq!(check(d()), Ok(()));
        let edges = [
            SamplingParams {
                temperature: 0.0,
                top_p: 1e-6,
                min_p: 1.0,
                presence_penalty: -2.0,
                frequency_penalty: 2.0,
                repetition_penalty: 2.0,
                top_logprobs: MAX_TOP_LOGPROBS,
                top_k: usize::MAX,
                seed: Some(u64::MAX),
                logit_bias: vec![(0, -100.0), (999, 100.0)],
            },
            SamplingParams {
                temperature: 2.0,
                min_p: 0.0,
                presence_penalty: 2.0,
                frequency_penalty: -2.0,
                repetition_penalty: 1e-3,
                logit_bias: (0..N_VOCAB as u32).map(|i| (i, -0.5)).collect(),
                ..d()
            },
        ];
        for p in edges {
            assert_eq!(check(p.clone()), Ok(()), "{p:?}");
        }
        let full = SamplingParams {
            logit_bias: (0..MAX_LOGIT_BIAS as u32).map(|i| (i, 1.0)).collect(),
            ..d()
        };
        assert_eq!(full.validate(MAX_LOGIT_BIAS), Ok(()));
    }

    #[test]
    fn each_bad_value_is_named() {
        let nan = f32::NAN;
        let inf = f32::INFINITY;
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: nan,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: -0.1,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: 2.01,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: inf,
                    ..d()
                },
                "temperature",
            ),
            (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
            (SamplingParams { top_p: 1.01, ..d() }, "top_p"),
            (SamplingParams { top_p: nan, ..d() }, "top_p"),
            (
                SamplingParams {
                    min_p: -0.01,
                    ..d()
                },
                "min_p",
            ),
            (SamplingParams { min_p: 1.5, ..d() }, "min_p"),
            (SamplingParams { min_p: nan, ..d() }, "min_p"),
            (
                SamplingParams {
                    presence_penalty: 2.5,
                    ..d()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    presence_penalty: -inf,
                    ..d()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    presence_penalty: nan,
                    ..d()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: -2.5,
                    ..d()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: nan,
                    ..d()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: 0.0,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: -1.0,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: 2.5,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: nan,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    logit_bias: vec![(1000, 1.0)],
                    ..d()
                },
                "logit_bias",
            ),
            (
                SamplingParams {
                    logit_bias: vec![(1, 100.5)],
                    ..d()
                },
                "logit_bias",
            ),
            (
                SamplingParams {
                    logit_bias: vec![(1, -101.0)],
                    ..d()
                },
                "logit_bias",
            ),
            (
                SamplingParams {
                    logit_bias: vec![(1, nan)],
                    ..d()
                },
                "logit_bias",
            ),
            (
                SamplingParams {
                    logit_bias: vec![(1, 1.0), (2, 0.0), (1, 2.0)],
                    ..d()
                },
                "logit_bias",
            ),
            (
                SamplingParams {
                    top_logprobs: 21,
                    ..d()
                },
                "top_logprobs",
            ),
        ];
        for (p, name) in cases {
            let e = fault(p.clone());
            assert_eq!(e.param(), name, "{p:?}: {e}");
            assert!(e.to_string().starts_with(name), "{e}");
        }
    }

    #[test]
    fn errors_carry_the_offending_value() {
        assert_eq!(
            fault(SamplingParams {
                logit_bias: vec![(5, 0.0), (1000, 1.0)],
                ..d()
            }),
            SamplingError::LogitBiasToken {
                id: 1000,
                n_vocab: N_VOCAB
            }
        );
        assert_eq!(
            fault(SamplingParams {
                logit_bias: vec![(7, 1.0), (7, 2.0)],
                ..d()
            }),
            SamplingError::DuplicateLogitBias { id: 7 }
        );
        let many = SamplingParams {
            logit_bias: (0..=MAX_LOGIT_BIAS as u32).map(|i| (i, 1.0)).collect(),
            ..d()
        };
        assert_eq!(
            many.validate(100_000),
            Err(SamplingError::TooManyLogitBias {
                got: MAX_LOGIT_BIAS + 1,
                max: MAX_LOGIT_BIAS
            })
        );
        assert_eq!(
            fault(SamplingParams {
                top_logprobs: 21,
                ..d()
            }),
            SamplingError::TopLogprobs {
                got: 21,
                max: MAX_TOP_LOGPROBS
            }
        );
        assert_eq!(
            fault(SamplingParams {
                temperature: 3.0,
                ..d()
            }),
            SamplingError::Temperature(3.0)
        );
        // First fault in field order.
        assert_eq!(
            fault(SamplingParams {
                temperature: 3.0,
                top_p: 0.0,
                ..d()
            })
            .param(),
            "temperature"
        );
    }
}
