//! One sequence's sampler and the scratch it draws with.

use super::filter::{self, Ranked, Truncation, Work};
use super::params::{SamplingParams, GREEDY_BELOW};
use super::passes;
use super::penalties::Penalties;
use crate::engine::token_choice::Rng;

/// One sequence's sampler: its parameters, its own seeded generator and the token history the
/// penalties read. Cloning it clones the generator state and the history.
#[derive(Clone, Debug)]
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    top_logprobs: usize,
    /// [`Sampled::logprob`] is wanted (see [`Sampler::with_logprob`]).
    logprob: bool,
    penalties: Penalties,
    rng: Rng,
}

/// Buffers reused across [`Sampler::sample`] calls: one per thread that samples, shared by
/// all the sequences it samples for. They grow to what the rows need (a few times the
/// vocabulary in bytes); from then on a call allocates nothing but the returned `top` list.
/// Nothing carries over from one call to the next.
#[derive(Default)]
pub struct SampleScratch {
    /// The biased, penalised copy of the row.
    row: Vec<f32>,
    block_max: Vec<f32>,
    ranked: Ranked,
    work: Work,
}

impl SampleScratch {
    pub fn new() -> Self {
        Self::default()
    }
}

/// A drawn token.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub id: u32,
    /// The log-probability of `id` under the biased, penalised distribution at temperature 1,
    /// before truncation (see the module docs); NaN from a sampler that was told it is not
    /// wanted ([`Sampler::with_logprob`]).
    pub logprob: f32,
    /// The `top_logprobs` most likely tokens with their log-probabilities (same distribution),
    /// most likely first, lower id first on ties; empty when `top_logprobs` is 0, shorter when
    /// the row has fewer tokens that are not NaN.
    pub top: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for one sequence. `seed` is the effective seed (the scheduler resolves
    /// `params.seed == None`); `prompt` starts the repetition penalty's history. `params`
    /// should have passed [`SamplingParams::validate`]: other values never panic but their
    /// results are unspecified.
    pub fn new(params: &SamplingParams, seed: u64, prompt: &[u32]) -> Sampler {
        Sampler {
            temperature: params.temperature,
            top_k: params.top_k,
            top_p: params.top_p,
            min_p: params.min_p,
            top_logprobs: params.top_logprobs,
            logprob: true,
            penalties: Penalties::new(params, prompt),
            rng: Rng::new(seed),
        }
    }

    /// Whether the caller reads [`Sampled::logprob`] (true unless set otherwise). Without it
    /// (and with `top_logprobs` 0) a draw skips the `exp` pass over the whole row that only
    /// the temperature-1 log-softmax needs (greedy, and any temperature other than 1), and
    /// `logprob` is NaN. The tokens drawn and the generator's use are the same either way.
    pub fn with_logprob(mut self, wanted: bool) -> Sampler {
        self.logprob = wanted;
        self
    }

    /// Adds a generated token to the penalty history without drawing it (for a token chosen
    /// elsewhere, e.g. the first token of a forked sequence). [`Sampler::sample`] records its
    /// own tokens.
    pub fn observe(&mut self, id: u32) {
        self.penalties.observe(id);
    }

    /// Draws the next token from `logits` (one row, `n_vocab` long; not modified) and records
    /// it in the penalty history. A pure function of the parameters, the seed and the tokens
    /// and rows so far, whatever `scratch` was used for before. A greedy sampler never uses
    /// its generator; any other takes exactly one number from it per call. A row with no
    /// candidate (empty, or no finite logit and no `+inf`) gives None: there is no token to
    /// draw, and inventing one (token 0) would emit text the model never chose.
    pub fn sample(&mut self, logits: &[f32], scratch: &mut SampleScratch) -> Option<Sampled> {
        self.sample_masked(logits, None, scratch)
    }

    /// [`Sampler::sample`] under a grammar's mask: `allowed` holds one bit per token (bit
    /// `i % 32` of word `i / 32`); every other token's logit is `-inf` before anything else
    /// (bias, penalties, logprobs and draw all see the masked row), tokens past the end of
    /// `allowed` included. `None` masks nothing. The draw takes the same one number from the
    /// generator, so a seed reproduces masked sampling too. None when the mask (with the
    /// bias and penalties) leaves no candidate.
    pub fn sample_masked(
        &mut self,
        logits: &[f32],
        allowed: Option<&[u32]>,
        scratch: &mut SampleScratch,
    ) -> Option<Sampled> {
        let SampleScratch {
            row: buf,
            block_max,
            ranked,
            work,
        } = scratch;
        let row: &[f32] = if self.penalties.is_active() || allowed.is_some() {
            buf.clear();
            buf.extend_from_slice(logits);
            if let Some(bits) = allowed {
                passes::apply_mask(buf, bits);
            }
            self.penalties.apply(buf);
            buf
        } else {
            logits
        };
        ranked.reset();
        let max = passes::block_max(row, block_max);
        let greedy = self.temperature.is_nan() || self.temperature < GREEDY_BELOW;
        // The temperature-1 normalizer is needed only for reported log-probabilities.
        let lp = self.logprob || self.top_logprobs > 0;
        let u = if greedy { 0.0 } else { self.rng.next_f64() };

        // `lse`: log of the softmax denominator at temperature 1, for the logprobs.
        let (id, lse) = if max == f32::INFINITY {
            // A +inf: the first maximal entry.
            let id = passes::first_index_of(row, block_max, max);
            (id as u32, f64::from(max))
        } else if !max.is_finite() {
            // Nothing finite (empty, all -inf/NaN): no candidate. The generator still
            // advances, as for any draw.
            return None;
        } else if greedy {
            let id = passes::first_index_of(row, block_max, max);
            let lse = if lp {
                f64::from(max) + passes::exp_sum(row, max, 1.0, f32::NEG_INFINITY).ln()
            } else {
                f64::NAN
            };
            (id as u32, lse)
        } else {
            let t = self.temperature;
            // Min-p keeps p_T(v) >= min_p * p_T(max), that is v >= max + T ln(min_p).
            let floor = if self.min_p > 0.0 {
                max + t * self.min_p.ln()
            } else {
                f32::NEG_INFINITY
            };
            let trunc = Truncation {
                top_k: self.top_k,
                top_p: self.top_p,
                floor,
            };
            let (id, z1) = filter::draw(row, block_max, max, 1.0 / t, trunc, ranked, work, u, lp);
            (id, f64::from(max) + z1.ln())
        };

        let logprob = if lp {
            row.get(id as usize)
                .map_or(f32::NEG_INFINITY, |&v| log_prob(v, lse))
        } else {
            f32::NAN
        };
        let top = if self.top_logprobs > 0 {
            ranked
                .top(row, block_max, self.top_logprobs)
                .iter()
                .map(|&(v, i)| (i, log_prob(v, lse)))
                .collect()
        } else {
            Vec::new()
        };
        self.penalties.observe(id);
        Some(Sampled { id, logprob, top })
    }
}

/// Token `id`'s log-probability in `row` and the `top` most likely tokens' (most likely
/// first), under the model's own distribution: temperature 1, no penalty, bias or mask. This
/// is a prompt token's score (prompt logprobs); it draws nothing.
pub fn score(row: &[f32], id: u32, top: usize, scratch: &mut SampleScratch) -> Sampled {
    let SampleScratch {
        block_max, ranked, ..
    } = scratch;
    ranked.reset();
    let max = passes::block_max(row, block_max);
    let lse = if max.is_finite() {
        f64::from(max) + passes::exp_sum(row, max, 1.0, f32::NEG_INFINITY).ln()
    } else {
        f64::from(max)
    };
    let logprob = row
        .get(id as usize)
        .map_or(f32::NEG_INFINITY, |&v| log_prob(v, lse));
    let top = if top > 0 {
        ranked
            .top(row, block_max, top)
            .iter()
            .map(|&(v, i)| (i, log_prob(v, lse)))
            .collect()
    } else {
        Vec::new()
    };
    Sampled { id, logprob, top }
}

/// `v - lse` as a log-probability: NaN logits count as `-inf`; when the row has no finite
/// maximum (`lse` is `+inf` or `-inf`) a `+inf` logit gets 0 and every other `-inf`.
fn log_prob(v: f32, lse: f64) -> f32 {
    if v.is_nan() {
        f32::NEG_INFINITY
    } else if lse.is_finite() {
        (f64::from(v) - lse) as f32
    } else if v == f32::INFINITY {
        0.0
    } else {
        f32::NEG_INFINITY
    }
}
