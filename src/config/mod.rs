//! Configuration: [`raw`] is the TOML file as written (`config/default.toml`), every field
//! optional; [`settings`] the validated [`Config`] the program uses; [`validate`] turns one
//! into the other. Every setting has a default, so an empty file is a valid configuration.
//! [`Config::load`] is the one way in: a file (or none), command-line overrides over it, then
//! validation.

mod check;
mod models;
mod raw;
mod settings;
mod speculative;
mod validate;

pub use settings::{
    CacheSettings, Config, KvBudget, LogFormat, LogSettings, ModelSpec, RamCompress,
    SchedulerSettings, ServerSettings, SpeculativeMethod, SpeculativeSettings, DEFAULT_MODEL_PATH,
    KV_AUTO_CAP_BYTES, KV_AUTO_SHARE_PERCENT,
};
pub use speculative::MAX_DRAFT;

use raw::RawConfig;
use std::path::{Path, PathBuf};

/// A configuration problem, naming the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

/// The file the command line reads when `--config` is not given (and it exists), relative to
/// the working directory.
pub const DEFAULT_FILE: &str = "config/default.toml";

/// `explicit`, else [`DEFAULT_FILE`] when it exists, else None (the built-in defaults).
pub fn config_file(explicit: Option<&Path>) -> Option<&Path> {
    let default = Path::new(DEFAULT_FILE);
    explicit.or_else(|| default.is_file().then_some(default))
}

impl Config {
    /// Reads the TOML file at `path` (None: an empty file, that is the defaults), sets each
    /// `("section.key", value)` of `overrides` over it (how command-line flags and `KILN_...`
    /// variables win over the file), then validates the result, so an override is checked
    /// exactly like the file's own setting.
    pub fn load(
        path: Option<&Path>,
        overrides: &[(&str, toml::Value)],
    ) -> Result<Config, ConfigError> {
        let text = match path {
            None => String::new(),
            Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
        };
        let shown = path.unwrap_or(Path::new("<defaults>"));
        Config::try_from(RawConfig::parse(&text, shown, overrides)?)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::try_from(RawConfig::parse(text, Path::new("<text>"), &[])?)
    }
}

/// Parses "2GiB", "512 MiB", "1.5GB", "1048576B" into bytes.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        _ => return None,
    };
    let v = num * mult;
    (v.is_finite() && (0.0..1.8e19).contains(&v)).then_some(v as u64)
}

#[cfg(test)]
mod tests;
