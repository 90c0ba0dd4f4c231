//! How a prompt's final hidden states become one embedding: the model's pooling type (GGUF
//! `{arch}.pooling_type`, as llama.cpp reads it, or the configuration's), and the pooling
//! itself over positions that arrive in chunks, L2-normalized at the end.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// A model's pooling type: llama.cpp's `llama_pooling_type` (the GGUF key's values 0..=4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolingType {
    /// 0: no pooling, one vector per position (llama.cpp refuses OpenAI embeddings for it).
    None,
    /// 1: the mean over every position.
    Mean,
    /// 2: the first position (BERT's CLS token).
    Cls,
    /// 3: the last position (decoder embedders: the only one that saw the whole input).
    Last,
    /// 4: a reranker's classifier head over the last (causal) or first position.
    Rank,
}

/// How kiln pools an embedding: the [`PoolingType`]s that give one vector per input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// kiln's default for a model whose file names no pooling type (llama-server's
    /// `--pooling mean`).
    #[default]
    Mean,
    Cls,
    Last,
}

impl PoolingType {
    /// The value of the GGUF key (`-1`, llama.cpp's "unspecified", is `Ok(None)`).
    pub fn from_code(code: i64) -> Result<Option<PoolingType>, i64> {
        Ok(Some(match code {
            -1 => return Ok(None),
            0 => PoolingType::None,
            1 => PoolingType::Mean,
            2 => PoolingType::Cls,
            3 => PoolingType::Last,
            4 => PoolingType::Rank,
            other => return Err(other),
        }))
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolingType::None => "none",
            PoolingType::Mean => "mean",
            PoolingType::Cls => "cls",
            PoolingType::Last => "last",
            PoolingType::Rank => "rank",
        }
    }

    /// How an embedding pools under this type; `None` for `none` and `rank`, which give no
    /// single vector per input.
    pub fn pooling(self) -> Option<Pooling> {
        match self {
            PoolingType::Mean => Some(Pooling::Mean),
            PoolingType::Cls => Some(Pooling::Cls),
            PoolingType::Last => Some(Pooling::Last),
            PoolingType::None | PoolingType::Rank => None,
        }
    }
}

impl From<Pooling> for PoolingType {
    fn from(p: Pooling) -> PoolingType {
        match p {
            Pooling::Mean => PoolingType::Mean,
            Pooling::Cls => PoolingType::Cls,
            Pooling::Last => PoolingType::Last,
        }
    }
}

impl fmt::Display for PoolingType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        PoolingType::from(*self).fmt(f)
    }
}

impl FromStr for Pooling {
    type Err = String;

    /// `mean`, `cls` or `last` (the configuration's names, llama-server's `--pooling`).
    fn from_str(s: &str) -> Result<Pooling, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            other => Err(format!(
                "must be \"mean\", \"cls\" or \"last\", got {other:?}"
            )),
        }
    }
}

/// One prompt's embedding being pooled: rows of final hidden states arrive in chunks of
/// positions, possibly again (a preempted prompt runs again), and are taken once each.
#[derive(Clone, Debug)]
pub struct Pooler {
    pooling: Pooling,
    /// Prompt positions.
    len: usize,
    sum: Vec<f64>,
    /// The next position to take.
    next: usize,
}

impl Pooler {
    /// An empty pool for a prompt of `len` positions and hidden states `n_embd` wide.
    pub fn new(pooling: Pooling, len: usize, n_embd: usize) -> Pooler {
        Pooler {
            pooling,
            len,
            sum: vec![0.0; n_embd],
            next: 0,
        }
    }

    /// Takes the rows of positions `start..` (`hidden` holds whole rows of `n_embd`); rows of
    /// positions taken before, or beyond the next one, are skipped.
    pub fn add(&mut self, start: usize, hidden: &[f32]) {
        let n_embd = self.sum.len();
        if n_embd == 0 {
            return;
        }
        for (j, row) in hidden.chunks_exact(n_embd).enumerate() {
            let pos = start + j;
            if pos != self.next || pos >= self.len {
                continue;
            }
            self.next += 1;
            let take = match self.pooling {
                Pooling::Mean => true,
                Pooling::Cls => pos == 0,
                Pooling::Last => pos + 1 == self.len,
            };
            if take {
                for (s, &v) in self.sum.iter_mut().zip(row) {
                    *s += f64::from(v);
                }
            }
        }
    }

    /// Whether every position has been taken.
    pub fn is_complete(&self) -> bool {
        self.next >= self.len
    }

    /// The pooled vector at unit length (all zeros when it has no length). The mean is
    /// left as a sum: normalizing removes the division.
    pub fn finish(self) -> Vec<f32> {
        let norm = self.sum.iter().map(|v| v * v).sum::<f64>().sqrt();
        let scale = if norm > 0.0 && norm.is_finite() {
            1.0 / norm
        } else {
            0.0
        };
        self.sum.iter().map(|v| (v * scale) as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three positions of width 3 whose first, last and mean directions all differ.
    const HIDDEN: [f32; 9] = [3.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, -2.0];

    fn pool(p: Pooling, chunks: &[(usize, std::ops::Range<usize>)]) -> Vec<f32> {
        let mut pooler = Pooler::new(p, 3, 3);
        for (start, rows) in chunks {
            assert!(!pooler.is_complete());
            pooler.add(*start, &HIDDEN[rows.start * 3..rows.end * 3]);
        }
        assert!(pooler.is_complete());
        pooler.finish()
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn cls_last_and_mean_take_what_they_claim_at_unit_length() {
        let whole = [(0, 0..3)];
        assert!(close(&pool(Pooling::Cls, &whole), &[1.0, 0.0, 0.0]));
        assert!(close(&pool(Pooling::Last, &whole), &[0.0, 0.0, -1.0]));
        // (3, 4, -2) / 3 normalized: the mean's direction.
        let n = 29f32.sqrt();
        assert!(close(
            &pool(Pooling::Mean, &whole),
            &[3.0 / n, 4.0 / n, -2.0 / n]
        ));
    }

    #[test]
    fn chunks_and_repeated_positions_pool_like_one_pass() {
        // Positions 0..2, then 1..3 again after a preemption: position 1 is taken once.
        let chunks = [(0, 0..2), (1, 1..3)];
        for p in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
            assert_eq!(pool(p, &chunks), pool(p, &[(0, 0..3)]), "{p}");
        }
        // A chunk that skips ahead is ignored until the gap is filled.
        let mut pooler = Pooler::new(Pooling::Mean, 3, 3);
        pooler.add(1, &HIDDEN[3..9]);
        assert!(!pooler.is_complete());
        pooler.add(0, &HIDDEN);
        assert!(close(&pooler.finish(), &pool(Pooling::Mean, &[(0, 0..3)])));
    }

    #[test]
    fn a_zero_vector_stays_zero() {
        let mut pooler = Pooler::new(Pooling::Mean, 1, 2);
        pooler.add(0, &[0.0, 0.0]);
        assert_eq!(pooler.finish(), vec![0.0, 0.0]);
    }

    #[test]
    fn names_and_codes_are_llama_cpp_s() {
        let all = [
            PoolingType::None,
            PoolingType::Mean,
            PoolingType::Cls,
            PoolingType::Last,
            PoolingType::Rank,
        ];
        for (code, t) in all.into_iter().enumerate() {
            assert_eq!(PoolingType::from_code(code as i64), Ok(Some(t)));
        }
        assert_eq!(PoolingType::from_code(-1), Ok(None));
        assert_eq!(PoolingType::from_code(5), Err(5));
        for p in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
            assert_eq!(p.to_string().parse::<Pooling>(), Ok(p));
            assert_eq!(PoolingType::from(p).pooling(), Some(p));
        }
        assert_eq!(" LAST ".parse::<Pooling>(), Ok(Pooling::Last));
        assert!("rank".parse::<Pooling>().unwrap_err().contains("\"rank\""));
        assert_eq!(PoolingType::None.pooling(), None);
        assert_eq!(PoolingType::Rank.pooling(), None);
    }
}
