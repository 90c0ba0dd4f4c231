//! `[speculative]`: speculative decoding (guessed tokens verified in the batch; replies are
//! the same with or without it, only faster when the reply repeats its context).

use super::check::{in_range, invalid};
use super::ConfigError;
use serde::Deserialize;

/// Where guesses come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeculativeMethod {
    Off,
    /// Prompt lookup: the sequence's last tokens found earlier in its own prompt or output.
    Ngram,
}

/// `[speculative]`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeSettings {
    pub method: SpeculativeMethod,
    /// Most tokens guessed for one sequence in one step.
    pub max_draft: usize,
    /// Fewest guesses worth verifying (a shorter proposal is not used).
    pub min_draft: usize,
    /// N-gram sizes prompt lookup tries, the longest first.
    pub ngram_min: usize,
    pub ngram_max: usize,
    /// Guess only in steps where at most this many sequences decode (a bigger batch is
    /// compute-bound: a guess costs its full price there).
    pub max_seqs: usize,
}

impl Default for SpeculativeSettings {
    fn default() -> Self {
        SpeculativeSettings {
            method: SpeculativeMethod::Ngram,
            max_draft: 8,
            min_draft: 1,
            ngram_min: 2,
            ngram_max: 4,
            max_seqs: 4,
        }
    }
}

/// `[speculative]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpeculative {
    pub method: Option<String>,
    pub max_draft: Option<usize>,
    pub min_draft: Option<usize>,
    pub ngram_min: Option<usize>,
    pub ngram_max: Option<usize>,
    pub max_seqs: Option<usize>,
    /// A draft model file: not run by this version (refused with a clear message).
    pub draft_model: Option<std::path::PathBuf>,
}

/// Most guesses per step for one sequence.
pub const MAX_DRAFT: usize = 32;

/// Validates `[speculative]`.
pub(super) fn speculative_settings(
    raw: RawSpeculative,
) -> Result<SpeculativeSettings, ConfigError> {
    let d = SpeculativeSettings::default();
    let method = match raw.method.as_deref().map(str::trim) {
        None => d.method,
        // llama-server's --spec-type spellings are accepted too.
        Some("ngram" | "ngram-simple") => SpeculativeMethod::Ngram,
        Some("off" | "none") => SpeculativeMethod::Off,
        Some("draft") => return Err(invalid(
            "speculative.method",
            "\"draft\" (a draft model) is not supported by this version: use \"ngram\" or \"off\"",
        )),
        Some(other) => {
            return Err(invalid(
                "speculative.method",
                format!("{other:?} is not a method (ngram, off)"),
            ))
        }
    };
    if raw.draft_model.is_some() {
        return Err(invalid(
            "speculative.draft_model",
            "draft models are not supported by this version (speculative.method = \"ngram\" needs none)",
        ));
    }
    let max_draft = in_range(
        "speculative.max_draft",
        raw.max_draft.unwrap_or(d.max_draft),
        0,
        MAX_DRAFT,
    )?;
    let min_draft = in_range(
        "speculative.min_draft",
        raw.min_draft.unwrap_or(d.min_draft),
        1,
        MAX_DRAFT,
    )?;
    let ngram_max = in_range(
        "speculative.ngram_max",
        raw.ngram_max.unwrap_or(d.ngram_max),
        1,
        16,
    )?;
    let ngram_min = in_range(
        "speculative.ngram_min",
        raw.ngram_min.unwrap_or(d.ngram_min.min(ngram_max)),
        1,
        ngram_max,
    )?;
    let max_seqs = in_range(
        "speculative.max_seqs",
        raw.max_seqs.unwrap_or(d.max_seqs),
        1,
        1024,
    )?;
    Ok(SpeculativeSettings {
        method,
        max_draft,
        min_draft,
        ngram_min,
        ngram_max,
        max_seqs,
    })
}
