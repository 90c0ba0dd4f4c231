//! The models a server serves: `[model]` with `[engine]`'s settings, or the `[[models]]`
//! entries, each checked like `[model]` and `[engine]`; every id and alias names one model.

use super::check::{in_range, invalid, kv_budget, kv_type, MAX_THREADS};
use super::raw::RawModelEntry;
use super::settings::ModelSpec;
use super::ConfigError;
use crate::engine::pooling::Pooling;
use std::collections::HashMap;
use std::path::PathBuf;

/// Trimmed aliases, blanks dropped.
pub(super) fn aliases(raw: Option<Vec<String>>) -> Vec<String> {
    raw.unwrap_or_default()
        .into_iter()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// A name trimmed; an empty one is an error naming `key`.
pub(super) fn name(key: &'static str, raw: Option<String>) -> Result<Option<String>, ConfigError> {
    let n = raw.map(|n| n.trim().to_string());
    if n.as_deref() == Some("") {
        return Err(invalid(key, "must not be empty"));
    }
    Ok(n)
}

/// `model.pooling` / `models.pooling`: mean, cls or last.
pub(super) fn pooling(
    key: &'static str,
    raw: Option<String>,
) -> Result<Option<Pooling>, ConfigError> {
    raw.map(|p| p.parse().map_err(|e: String| invalid(key, e)))
        .transpose()
}

/// One `[[models]]` entry (number `i`, for messages); unset engine settings come from
/// `[engine]` (`defaults`).
fn entry(i: usize, e: RawModelEntry, defaults: &ModelSpec) -> Result<ModelSpec, ConfigError> {
    let at = |m: String| format!("[[models]] entry {}: {m}", i + 1);
    let path = e
        .path
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| invalid("models.path", at("a model file path is required".into())))?;
    let name = name("models.name", e.name)
        .map_err(|_| invalid("models.name", at("must not be empty".into())))?;
    let threads = e.threads.unwrap_or(defaults.threads);
    in_range("models.threads", threads, 0, MAX_THREADS)?;
    let workers = in_range(
        "models.workers",
        e.workers.unwrap_or(defaults.workers),
        1,
        64,
    )?;
    let pooling = pooling("models.pooling", e.pooling).map_err(|e| match e {
        ConfigError::Invalid { key, message } => invalid(key, at(message)),
        other => other,
    })?;
    let kv_cache = match e.kv_cache {
        None => defaults.kv_cache,
        Some(k) => kv_budget("models.kv_cache", Some(k))?,
    };
    let kv_type = kv_type("models.kv_type", e.kv_type)
        .map_err(|e| match e {
            ConfigError::Invalid { key, message } => invalid(key, at(message)),
            other => other,
        })?
        .unwrap_or(defaults.kv_type);
    let draft = match e.draft {
        Some(d) if d.as_os_str().is_empty() => {
            return Err(invalid("models.draft", at("must not be empty".into())))
        }
        d => d,
    };
    Ok(ModelSpec {
        path,
        name,
        aliases: aliases(e.aliases),
        chat_template: e.chat_template,
        pooling,
        threads,
        workers,
        kv_cache,
        kv_type,
        draft,
    })
}

/// The served models: `[[models]]` when it has entries, else `[model]` (`single`), unless
/// `server.models_dir` is set and `[model]` names no file (the directory serves them all).
pub(super) fn served(
    entries: Vec<RawModelEntry>,
    single: ModelSpec,
    model_path_set: bool,
    models_dir_set: bool,
) -> Result<Vec<ModelSpec>, ConfigError> {
    let specs = if !entries.is_empty() {
        entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| entry(i, e, &single))
            .collect::<Result<Vec<_>, _>>()?
    } else if models_dir_set && !model_path_set {
        Vec::new()
    } else {
        vec![single]
    };
    check_unique(&specs)?;
    Ok(specs)
}

/// Every id and alias names one model.
fn check_unique(specs: &[ModelSpec]) -> Result<(), ConfigError> {
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    for s in specs {
        for id in s.ids() {
            if let Some(other) = seen.insert(id.clone(), s.path.clone()) {
                return Err(invalid(
                    "models.name",
                    format!(
                        "the id {id:?} names two models ({} and {}): give each a distinct \
                         `name` (ids default to the file's stem)",
                        other.display(),
                        s.path.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}
