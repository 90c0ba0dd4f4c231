//! Logit bias and the three repetition penalties, applied to a copy of the row in that order.
//!
//! The histories are sorted vectors of the ids a sequence has seen, not arrays over the
//! vocabulary: a sequence sees a few hundred distinct tokens, the vocabulary has 49,152.

use super::params::SamplingParams;

/// A bias at or below this bans the token (its logit becomes `-inf`).
pub const BAN_BIAS: f32 = -100.0;

/// What one sequence adds to its raw logits: the bias table and the token histories the
/// penalties read.
#[derive(Clone, Debug, Default)]
pub struct Penalties {
    /// `(id, bias)` sorted by id; bans already `-inf`.
    bias: Vec<(u32, f32)>,
    /// Repetition penalty (1 = off) over `seen`.
    repetition: f32,
    /// Distinct ids of prompt and generated tokens, sorted (kept only if `repetition != 1`).
    seen: Vec<u32>,
    presence: f32,
    frequency: f32,
    /// `(id, count)` of generated tokens, sorted by id (kept only if presence or frequency
    /// is on).
    generated: Vec<(u32, u32)>,
}

impl Penalties {
    /// The bias table and penalties of `params`, with `prompt` as the repetition history.
    pub fn new(params: &SamplingParams, prompt: &[u32]) -> Penalties {
        let mut bias: Vec<(u32, f32)> = params
            .logit_bias
            .iter()
            .map(|&(id, b)| (id, if b <= BAN_BIAS { f32::NEG_INFINITY } else { b }))
            .collect();
        // Stable: of duplicate ids (which validation rejects) the last one wins.
        bias.sort_by_key(|e| e.0);
        bias.reverse();
        bias.dedup_by_key(|e| e.0);
        bias.reverse();
        let repetition = params.repetition_penalty;
        let mut seen = Vec::new();
        if repetition != 1.0 {
            seen.extend_from_slice(prompt);
            seen.sort_unstable();
            seen.dedup();
        }
        Penalties {
            bias,
            repetition,
            seen,
            presence: params.presence_penalty,
            frequency: params.frequency_penalty,
            generated: Vec::new(),
        }
    }

    fn counts_generated(&self) -> bool {
        self.presence != 0.0 || self.frequency != 0.0
    }

    /// Records a generated token.
    pub fn observe(&mut self, id: u32) {
        if self.repetition != 1.0 {
            if let Err(at) = self.seen.binary_search(&id) {
                self.seen.insert(at, id);
            }
        }
        if self.counts_generated() {
            match self.generated.binary_search_by_key(&id, |e| e.0) {
                Ok(at) => self.generated[at].1 = self.generated[at].1.saturating_add(1),
                Err(at) => self.generated.insert(at, (id, 1)),
            }
        }
    }

    /// Whether [`Penalties::apply`] would change anything (if not, the raw row is used as is).
    pub fn is_active(&self) -> bool {
        !self.bias.is_empty()
            || (self.repetition != 1.0 && !self.seen.is_empty())
            || (self.counts_generated() && !self.generated.is_empty())
    }

    /// Applies, in order: the logit bias (`+= bias`, or `-inf` for a ban); the repetition
    /// penalty over prompt and generated tokens (`logit > 0 ? logit / p : logit * p`); the
    /// presence and frequency penalties over generated tokens (`-= presence + count *
    /// frequency`). Ids beyond the row are skipped.
    pub fn apply(&self, row: &mut [f32]) {
        for &(id, b) in &self.bias {
            if let Some(v) = row.get_mut(id as usize) {
                *v = if b == f32::NEG_INFINITY { b } else { *v + b };
            }
        }
        if self.repetition != 1.0 {
            let p = self.repetition;
            for &id in &self.seen {
                if let Some(v) = row.get_mut(id as usize) {
                    *v = if *v > 0.0 { *v / p } else { *v * p };
                }
            }
        }
        if self.counts_generated() {
            for &(id, count) in &self.generated {
                if let Some(v) = row.get_mut(id as usize) {
                    *v -= self.presence + count as f32 * self.frequency;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams::default()
    }

    #[test]
    fn order_and_values_by_hand() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            logit_bias: vec![(4, -100.0), (3, 1.0), (9, 5.0)],
            ..params()
        };
        let mut pen = Penalties::new(&p, &[0, 2, 0]);
        for id in [1, 3, 1] {
            pen.observe(id);
        }
        let mut row = [1.0, 2.0, -1.0, 0.5, 3.0];
        pen.apply(&mut row);
        // bias:        [1, 2, -1, 1.5, -inf]
        // repetition:  [0.5, 1, -2, 0.75, -inf]   (seen {0, 1, 2, 3})
        // presence/frequency on generated {1: 2, 3: 1}:
        //   1: 1 - 0.5 - 2 * 0.25 = 0;  3: 0.75 - 0.5 - 0.25 = 0
        assert_eq!(row, [0.5, 0.0, -2.0, 0.0, f32::NEG_INFINITY]);
    }

    #[test]
    fn presence_ignores_the_prompt_and_repetition_reads_it() {
        let p = SamplingParams {
            presence_penalty: 1.0,
            ..params()
        };
        let pen = Penalties::new(&p, &[0, 1]);
        assert!(!pen.is_active());
        let p = SamplingParams {
            repetition_penalty: 1.25,
            ..params()
        };
        let pen = Penalties::new(&p, &[0, 1]);
        assert!(pen.is_active());
        let mut row = [2.5, -2.0, 1.0];
        pen.apply(&mut row);
        assert_eq!(row, [2.0, -2.5, 1.0]);
    }

    #[test]
    fn off_by_default_and_histories_stay_empty() {
        let mut pen = Penalties::new(&params(), &[1, 2, 3]);
        pen.observe(5);
        assert!(!pen.is_active());
        assert!(pen.seen.is_empty() && pen.generated.is_empty());
    }

    #[test]
    fn frequency_counts_accumulate() {
        let p = SamplingParams {
            frequency_penalty: -0.5,
            ..params()
        };
        let mut pen = Penalties::new(&p, &[]);
        for _ in 0..3 {
            pen.observe(1);
        }
        pen.observe(0);
        let mut row = [0.0f32; 2];
        pen.apply(&mut row);
        assert_eq!(row, [0.5, 1.5]);
    }
}
