//! Speculative decoding: guess a sequence's next tokens cheaply, verify them all in one
//! chunk of the ragged batch, keep the ones the model itself would have produced.
//!
//! A decoding sequence whose last token is `t` normally runs one token per step. With `k`
//! guesses `g1..gk` it runs the chunk `t g1 .. gk` instead (positions `computed..`), asking
//! for a logits row at every position. Row `j` is the distribution the non-speculative run
//! would sample its token from after `g1..gj` — bit for bit, because kiln's logits do not
//! depend on the batch or the chunking — so the worker samples row 0, then row 1 only while
//! the token it drew equals the guess, and so on: each drawn token is exactly the token the
//! plain run would have produced (same row, same sampler state, the same random draw, the
//! same penalties, bias and grammar mask), and the first token that differs from its guess
//! (or the token after the last guess) ends the run. Everything that shapes a reply (stop
//! strings, `max_tokens`, grammars, logprobs, cancellation) sees the drawn tokens one by one,
//! as without speculation. Positions after the last kept token were computed but are never
//! read: the sequence's `computed` count stops before them and the blocks that only they used
//! go back to the pool ([`crate::scheduler::state::Scheduler::verified`]), so the prefix cache
//! never sees them.
//!
//! - [`ngram`]: where the guesses come from (prompt lookup);
//! - [`SpecConfig`]: the server's settings, [`SpecRequest`] a request's own bounds;
//! - [`SpecState`]: per sequence, how many tokens to guess from its recent acceptance.
//!
//! The scheduler guesses only in steps where few sequences decode ([`SpecConfig::max_seqs`]):
//! a bigger batch is compute-bound already, and a guess would cost its full price there.

pub mod ngram;

/// Where guesses come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecMethod {
    /// No speculation.
    Off,
    /// Prompt lookup over the sequence's own tokens ([`ngram`]).
    #[default]
    Ngram,
    /// A draft model's greedy continuation (run by the worker before planning, see
    /// [`crate::scheduler::state::Scheduler::draft_wanted`]).
    Draft,
}

impl SpecMethod {
    /// The name in configuration, flags and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::Off => "off",
            SpecMethod::Ngram => "ngram",
            SpecMethod::Draft => "draft",
        }
    }
}

/// The server's speculation settings (`[speculative]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecConfig {
    pub method: SpecMethod,
    /// Most tokens guessed for one sequence in one step.
    pub max_draft: usize,
    /// Fewest: a shorter proposal is not verified (the sequence decodes one token instead).
    pub min_draft: usize,
    /// N-gram sizes tried, the longest first.
    pub ngram_min: usize,
    pub ngram_max: usize,
    /// Guess only in steps where at most this many sequences decode.
    pub max_seqs: usize,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            method: SpecMethod::Ngram,
            max_draft: 8,
            min_draft: 1,
            ngram_min: 2,
            ngram_max: 4,
            max_seqs: 4,
        }
    }
}

impl SpecConfig {
    /// No speculation.
    pub fn off() -> SpecConfig {
        SpecConfig {
            method: SpecMethod::Off,
            ..SpecConfig::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.method != SpecMethod::Off && self.max_draft > 0
    }

    /// Logits rows guesses may add to one step (the forward scratch is sized for them).
    pub fn max_rows(&self) -> usize {
        if self.enabled() {
            self.max_seqs * self.max_draft
        } else {
            0
        }
    }
}

/// A request's own bounds (llama-server's `speculative.n_max` / `speculative.n_min`): they
/// replace the server's `max_draft` / `min_draft` for its sequences, within `max_draft`
/// (the step's rows are sized for it). `n_max` 0 turns speculation off for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpecRequest {
    pub n_max: Option<usize>,
    pub n_min: Option<usize>,
}

/// Steps a sequence waits before guessing again after its `misses`-th verify in a row that
/// kept no guess: 1, 2, 4, ... up to 32 (a sequence with nothing to copy stops paying for
/// guesses; one that starts copying again is found within a few dozen tokens).
fn cooldown_after(misses: u32) -> u32 {
    1u32 << misses.min(5)
}

/// One sequence's speculation: its bounds and how many tokens to guess next, adapted to its
/// recent acceptance (Hugging Face's heuristic: two more after a run that kept every guess,
/// one fewer after one that did not), and a pause after verifies that kept nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecState {
    max: usize,
    min: usize,
    /// Guesses wanted next time (within `min..=max`).
    k: usize,
    /// Verifies in a row that kept no guess.
    misses: u32,
    /// Steps left before guessing again.
    cooldown: u32,
    /// Guesses verified and kept, over the sequence's life.
    pub drafted: u64,
    pub accepted: u64,
}

impl SpecState {
    /// A sequence's state under `cfg` and its request's bounds.
    pub fn new(cfg: &SpecConfig, req: SpecRequest) -> SpecState {
        let max = if cfg.enabled() {
            req.n_max.unwrap_or(cfg.max_draft).min(cfg.max_draft)
        } else {
            0
        };
        let min = req.n_min.unwrap_or(cfg.min_draft).clamp(1, max.max(1));
        SpecState {
            max,
            min,
            k: max.min(min.max(4)),
            misses: 0,
            cooldown: 0,
            drafted: 0,
            accepted: 0,
        }
    }

    /// Most guesses this sequence may take now (0 while pausing after misses, or off).
    pub fn want(&self) -> usize {
        if self.cooldown > 0 {
            0
        } else {
            self.k
        }
    }

    /// Fewest guesses worth verifying.
    pub fn min(&self) -> usize {
        self.min
    }

    /// A step in which the sequence decoded without guesses (counts down a pause).
    pub fn skipped(&mut self) {
        self.cooldown = self.cooldown.saturating_sub(1);
    }

    /// A verify of `drafted` guesses kept `accepted` of them.
    pub fn verified(&mut self, drafted: usize, accepted: usize) {
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
        if accepted == drafted {
            self.k = (self.k + 2).min(self.max);
        } else {
            self.k = self.k.saturating_sub(1).max(self.min).min(self.max);
        }
        if accepted == 0 {
            self.misses += 1;
            self.cooldown = cooldown_after(self.misses);
        } else {
            self.misses = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_grows_on_full_acceptance_shrinks_otherwise_and_pauses_after_misses() {
        let cfg = SpecConfig::default();
        let mut s = SpecState::new(&cfg, SpecRequest::default());
        assert_eq!(s.want(), 4);
        s.verified(4, 4);
        assert_eq!(s.want(), 6);
        s.verified(6, 6);
        s.verified(8, 8);
        assert_eq!(s.want(), 8, "never past max_draft");
        s.verified(8, 3);
        assert_eq!(s.want(), 7);
        s.verified(7, 0);
        assert_eq!(s.want(), 0, "a verify that kept nothing pauses");
        s.skipped();
        assert_eq!(s.want(), 0, "first pause is 2 steps");
        s.skipped();
        assert_eq!(s.want(), 6);
        s.verified(6, 0);
        for _ in 0..4 {
            assert_eq!(s.want(), 0, "second pause is 4 steps");
            s.skipped();
        }
        assert_eq!(s.want(), 5);
        assert_eq!((s.drafted, s.accepted), (39, 21));
    }

    #[test]
    fn request_bounds_replace_the_servers_within_max_draft() {
        let cfg = SpecConfig::default();
        let s = SpecState::new(
            &cfg,
            SpecRequest {
                n_max: Some(2),
                n_min: Some(2),
            },
        );
        assert_eq!((s.want(), s.min()), (2, 2));
        let s = SpecState::new(
            &cfg,
            SpecRequest {
                n_max: Some(100),
                n_min: None,
            },
        );
        assert_eq!(s.max, 8);
        let s = SpecState::new(
            &cfg,
            SpecRequest {
                n_max: Some(0),
                n_min: None,
            },
        );
        assert_eq!(s.want(), 0);
        assert_eq!(
            SpecState::new(&SpecConfig::off(), SpecRequest::default()).want(),
            0
        );
    }
}
