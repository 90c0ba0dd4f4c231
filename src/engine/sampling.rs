//! Choosing the next token from a row of logits: greedy, or temperature sampling driven by a
//! seeded generator so that a (seed, logits) pair always gives the same token.

use crate::engine::ops::softmax::log_sum_exp;

/// A small, seedable PCG-XSH-RR 32-bit generator (O'Neill 2014). Not cryptographic.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

const PCG_MUL: u64 = 6_364_136_223_846_793_005;
const PCG_INC: u64 = 1_442_695_040_888_963_407;

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng { state: 0 };
        r.next_u32();
        r.state = r.state.wrapping_add(seed);
        r.next_u32();
        r
    }

    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(PCG_MUL).wrapping_add(PCG_INC);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        let hi = u64::from(self.next_u32()) << 21;
        let lo = u64::from(self.next_u32()) >> 11;
        (hi | lo) as f64 / (1u64 << 53) as f64
    }
}

/// The index of the largest logit (the first one on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// How to pick tokens.
#[derive(Clone, Debug)]
pub struct Sampler {
    /// 0 (or below ~1e-6) means greedy.
    pub temperature: f32,
    rng: Rng,
}

impl Sampler {
    pub fn new(temperature: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            rng: Rng::new(seed),
        }
    }

    /// Picks a token from `logits`. Temperature sampling draws from `softmax(logits / T)`
    /// without allocating (two passes over the row).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temperature.is_nan() || self.temperature <= 1e-6 || logits.is_empty() {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let weight = |v: f32| f64::from((v - max) * inv_t).exp();
        let total: f64 = logits.iter().map(|&v| weight(v)).sum();
        let target = self.rng.next_f64() * total;
        let mut acc = 0.0;
        for (i, &v) in logits.iter().enumerate() {
            acc += weight(v);
            if acc > target {
                return i as u32;
            }
        }
        argmax(logits)
    }
}

/// The log-softmax of the raw logits at `id` (what `--json` reports as a token's logprob).
pub fn logprob(logits: &[f32], id: u32) -> f32 {
    (f64::from(logits[id as usize]) - log_sum_exp(logits)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_max() {
        assert_eq!(argmax(&[0.1, 3.0, 3.0, -1.0]), 1);
        assert_eq!(Sampler::new(0.0, 0).sample(&[0.0, -1.0, 5.0]), 2);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_probabilities() {
        let logits = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY];
        let mut a = Sampler::new(1.0, 42);
        let mut b = Sampler::new(1.0, 42);
        let mut counts = [0usize; 3];
        for _ in 0..4000 {
            let x = a.sample(&logits);
            assert_eq!(x, b.sample(&logits));
            counts[x as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        let frac = counts[1] as f64 / 4000.0;
        assert!((frac - 0.75).abs() < 0.04, "{frac}");
    }

    #[test]
    fn uniform_in_unit_interval() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
