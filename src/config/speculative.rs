//! Validates `[speculative]` (speculative decoding: guessed tokens verified in the batch;
//! replies are the same with or without it, only faster when the reply repeats its context).

use super::check::{in_range, invalid};
use super::raw::RawSpeculative;
use super::settings::{ModelSpec, SpeculativeMethod, SpeculativeSettings};
use super::ConfigError;

/// Most guesses per step for one sequence.
pub const MAX_DRAFT: usize = 32;

/// Validates `[speculative]`.
pub(super) fn speculative_settings(
    raw: RawSpeculative,
) -> Result<SpeculativeSettings, ConfigError> {
    let d = SpeculativeSettings::default();
    let draft_model = match raw.draft_model {
        Some(p) if p.as_os_str().is_empty() => {
            return Err(invalid(
                "speculative.draft_model",
                "must not be empty (omit it for no draft model)",
            ))
        }
        p => p,
    };
    let method = match raw.method.as_deref().map(str::trim) {
        // A draft model alone asks for the draft method (llama-server's --model-draft).
        None if draft_model.is_some() => SpeculativeMethod::Draft,
        None => d.method,
        // llama-server's --spec-type spellings are accepted too.
        Some("ngram" | "ngram-simple") => SpeculativeMethod::Ngram,
        Some("off" | "none") => SpeculativeMethod::Off,
        Some("draft") => SpeculativeMethod::Draft,
        Some(other) => {
            return Err(invalid(
                "speculative.method",
                format!("{other:?} is not a method (ngram, draft, off)"),
            ))
        }
    };
    if method == SpeculativeMethod::Ngram && draft_model.is_some() {
        return Err(invalid(
            "speculative.draft_model",
            "a draft model is used by speculative.method = \"draft\" only (this one is \"ngram\")",
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
        draft_model,
    })
}

/// `method = "draft"` needs a draft model for every served model: `speculative.draft_model`
/// or each `[[models]]` entry's `draft`.
pub(super) fn check_drafts(
    s: &SpeculativeSettings,
    served: &[ModelSpec],
) -> Result<(), ConfigError> {
    if s.method != SpeculativeMethod::Draft || s.draft_model.is_some() {
        return Ok(());
    }
    match served.iter().find(|m| m.draft.is_none()) {
        None if !served.is_empty() => Ok(()),
        _ => Err(invalid(
            "speculative.draft_model",
            "speculative.method = \"draft\" needs a draft model file (speculative.draft_model, \
             --draft-model, or a `draft` in every [[models]] entry)",
        )),
    }
}
