//! Validates `[speculative]` (speculative decoding: guessed tokens verified in the batch;
//! replies are the same with or without it, only faster when the reply repeats its context).

use super::check::{in_range, invalid};
use super::raw::RawSpeculative;
use super::settings::{SpeculativeMethod, SpeculativeSettings};
use super::ConfigError;

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
