//! The configuration file as written: every field optional, unknown keys refused. Command-line
//! flags and `KILN_...` variables are set over the parsed table before it is read into these
//! types, so an override is checked exactly like the file's own setting.

use super::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub model: RawModel,
    #[serde(default)]
    pub engine: RawEngine,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub cache: RawCache,
    #[serde(default)]
    pub speculative: RawSpeculative,
    /// `[[models]]`: several models in one server (replaces `[model]` when non-empty).
    #[serde(default)]
    pub models: Vec<RawModelEntry>,
}

/// One `[[models]]` entry: `[model]`'s keys plus the engine settings it may set for itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModelEntry {
    pub path: Option<PathBuf>,
    pub chat_template: Option<PathBuf>,
    pub name: Option<String>,
    pub aliases: Option<Vec<String>>,
    pub pooling: Option<String>,
    pub threads: Option<usize>,
    pub workers: Option<usize>,
    pub kv_cache: Option<RawSize>,
    pub kv_type: Option<String>,
    /// This model's draft model file (speculative decoding with `method = "draft"`).
    pub draft: Option<PathBuf>,
}

/// `[model]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub path: Option<PathBuf>,
    pub chat_template: Option<PathBuf>,
    pub name: Option<String>,
    pub aliases: Option<Vec<String>>,
    pub pooling: Option<String>,
}

/// `[engine]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngine {
    pub threads: Option<usize>,
    pub workers: Option<usize>,
    pub kv_cache: Option<RawSize>,
    pub kv_type: Option<String>,
}

/// A size with a unit ("2GiB", "512MiB", "auto") or a plain number (positions for
/// `engine.kv_cache`, bytes elsewhere).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Number(u64),
    Text(String),
}

/// `[cache]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub ram_bytes: Option<RawSize>,
    pub dir: Option<PathBuf>,
    pub disk_bytes: Option<RawSize>,
    pub namespace_by_key: Option<bool>,
    pub ram_compress: Option<String>,
}

/// `[scheduler]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub max_num_seqs: Option<usize>,
    pub max_batch_tokens: Option<usize>,
    pub max_prefill_while_decoding: Option<usize>,
    pub max_waiting: Option<usize>,
    pub max_preemptions: Option<u32>,
    pub prefix_cache: Option<bool>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub max_body_bytes: Option<RawSize>,
    pub max_body_bytes_in_flight: Option<RawSize>,
    pub max_in_flight_requests: Option<usize>,
    pub cors_allowed_origins: Option<Vec<String>>,
    pub max_prompt_tokens: Option<usize>,
    pub max_tokens_default: Option<usize>,
    pub max_tokens_cap: Option<usize>,
    pub max_n: Option<usize>,
    pub max_stop_strings: Option<usize>,
    pub max_logit_bias: Option<usize>,
    pub request_timeout: Option<f64>,
    pub drain_timeout: Option<f64>,
    pub sse_keep_alive: Option<f64>,
    pub api_keys: Option<Vec<String>>,
    pub api_keys_file: Option<PathBuf>,
    pub metrics_public: Option<bool>,
    pub models_dir: Option<PathBuf>,
    pub models_memory_budget: Option<RawSize>,
    pub models_keep_alive: Option<f64>,
    pub models_load_timeout: Option<f64>,
    pub responses_store_entries: Option<usize>,
    pub responses_store_ttl: Option<f64>,
    pub default_model: Option<String>,
    pub strict_model_names: Option<bool>,
}

/// `[speculative]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpeculative {
    pub method: Option<String>,
    pub max_draft: Option<usize>,
    pub min_draft: Option<usize>,
    pub ngram_min: Option<usize>,
    pub ngram_max: Option<usize>,
    pub max_seqs: Option<usize>,
    /// The draft model file (`method = "draft"`).
    pub draft_model: Option<std::path::PathBuf>,
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub level: Option<String>,
    pub format: Option<String>,
}

impl RawConfig {
    /// Parses `text` (read from `path`, for messages), sets each `("section.key", value)` of
    /// `overrides` over it, and reads the result.
    pub fn parse(
        text: &str,
        path: &Path,
        overrides: &[(&str, toml::Value)],
    ) -> Result<RawConfig, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        for (key, value) in overrides {
            let (section, name) = key.split_once('.').unwrap_or(("", key));
            let slot = if section.is_empty() {
                &mut table
            } else {
                match table
                    .entry(section.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                {
                    toml::Value::Table(t) => t,
                    _ => return Err(parse_err(format!("{section} is not a table"))),
                }
            };
            slot.insert(name.to_string(), value.clone());
        }
        table
            .try_into()
            .map_err(|e: toml::de::Error| parse_err(e.to_string()))
    }
}
