//! Token sampling for the continuous-batching scheduler: one [`Sampler`] per sequence, one
//! [`SampleScratch`] per engine thread.
//!
//! # What happens to a row of logits
//!
//! [`Sampler::sample`] reads one row of raw logits (never modifying it) and, in this order:
//!
//! 1. **logit bias**: adds each `logit_bias` entry; a bias of -100 (or below) makes the logit
//!    `-inf`, so a banned token is never drawn, whatever the temperature;
//! 2. **repetition penalty** (`repetition_penalty`, 1 = off), over the distinct tokens of the
//!    prompt and of the generated text: a positive logit is divided by it, a negative one
//!    multiplied (Hugging Face / llama.cpp);
//! 3. **presence and frequency penalties** (OpenAI), over the generated tokens only (those
//!    `sample` returned and those passed to [`Sampler::observe`]): a token generated `c > 0`
//!    times loses `presence_penalty + c * frequency_penalty`;
//! 4. **logprobs** are taken here: the log-softmax of this processed row at temperature 1,
//!    untruncated. Reported logprobs (of the drawn token and of the `top_logprobs`
//!    alternatives) are therefore those of the penalised, biased distribution *before*
//!    temperature and truncation; greedy decoding (temperature 0) reports real logprobs too;
//! 5. **temperature**: below 1e-5 (0 included) the token is the argmax of the processed row
//!    (the first index on ties, NaN never wins; on a row without bias or penalties exactly
//!    `engine::token_choice::argmax`) and steps 6-9 are skipped. Otherwise the logits are divided
//!    by the temperature;
//! 6. **top-k** (0 = off) keeps the `top_k` most likely tokens;
//! 7. **top-p** (1 = off) keeps, of what is left and renormalized, the smallest prefix of most
//!    likely tokens whose probability reaches `top_p` (the nucleus);
//! 8. **min-p** (0 = off) keeps, of what is left, the tokens at least `min_p` times as likely
//!    as the most likely one (at this temperature);
//! 9. **draw**: one uniform number from the sequence's generator picks a token in proportion
//!    to the probabilities left.
//!
//! Ranking ties (top-k, top-p, the `top_logprobs` list) go to the lower token id. NaN logits
//! count as `-inf`. A row with no finite maximum (empty, all `-inf`/NaN, or holding `+inf`)
//! gives its first maximal entry (token 0 if there is none).
//!
//! # Reproducibility
//!
//! The same parameters, seed and sequence of rows give the same tokens, always: a sampler's
//! only state is its PCG generator ([`crate::engine::token_choice::Rng`]) and its token history;
//! the scratch carries nothing from one call to the next; every sum runs in an order fixed by
//! the code and `exp` is our own polynomial without fused multiply-adds, so nothing depends
//! on threads, on the batch or on the CPU's vector width. (Only `ln`, for min-p and the
//! logprobs, comes from the platform's libm.) The scheduler resolves `seed: None` into a seed
//! before creating the [`Sampler`].
//!
//! # Cost
//!
//! Nothing sorts the vocabulary. Plain temperature sampling is one pass for the maximum, one
//! computing the weights (a vectorizable `exp`) and their per-block sums, and a draw that
//! walks the block sums; a temperature other than 1 adds one `exp` pass for the logprobs,
//! greedy is the maximum and that pass. That logprob pass runs only when the logprobs are
//! read (`top_logprobs`, or a sampler not told otherwise by [`Sampler::with_logprob`]): the
//! scheduler tells it for requests that ask for none. Top-k and `top_logprobs` gather the entries at or
//! above a threshold taken from the per-block maxima, then select and sort only those. Top-p
//! ranks the 64 most likely tokens, then 512; a wider nucleus (a flat distribution) is found
//! by binning the probability mass by logit and sorting only the bin where it crosses
//! `top_p`. Bias and penalties copy the row once and touch only the listed tokens. The
//! scratch buffers grow to what the rows need and are reused: in steady state a call
//! allocates nothing but the returned `top` list.

mod filter;
mod params;
mod passes;
mod penalties;
mod rank;
mod sampler;
#[cfg(test)]
mod tests;
mod wide;

pub use params::{SamplingError, SamplingParams, GREEDY_BELOW, MAX_LOGIT_BIAS, MAX_TOP_LOGPROBS};
pub use penalties::BAN_BIAS;
pub use sampler::{score, SampleScratch, Sampled, Sampler};
