//! Configuration: the raw TOML file (`config/default.toml`) deserialized, then validated into
//! [`Config`]. Every setting has a default, so an empty file is a valid configuration.

use serde::Deserialize;
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

/// The file as written: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    model: RawModel,
    #[serde(default)]
    engine: RawEngine,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    path: Option<PathBuf>,
    chat_template: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    threads: Option<usize>,
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// GGUF model file.
    pub model_path: PathBuf,
    /// Chat template overriding the model's `tokenizer.chat_template`, if any.
    pub chat_template: Option<PathBuf>,
    /// Worker threads for the engine's pool; 0 means one per physical core.
    pub threads: usize,
}

/// The default model path, relative to the working directory.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Upper bound on `engine.threads`, to catch typos such as 20000.
const MAX_THREADS: usize = 1024;

impl Default for Config {
    fn default() -> Self {
        Config {
            model_path: PathBuf::from(DEFAULT_MODEL_PATH),
            chat_template: None,
            threads: 0,
        }
    }
}

impl Config {
    /// Reads and validates a TOML configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string(),
        })?;
        let d = Config::default();
        let threads = raw.engine.threads.unwrap_or(d.threads);
        if threads > MAX_THREADS {
            return Err(ConfigError::Invalid {
                key: "engine.threads",
                message: format!("{threads} is above the limit of {MAX_THREADS}"),
            });
        }
        Ok(Config {
            model_path: raw.model.path.unwrap_or(d.model_path),
            chat_template: raw.model.chat_template,
            threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_default() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_default_parses() {
        let text = include_str!("../config/default.toml");
        let c = Config::parse(text).unwrap();
        assert_eq!(c.model_path, PathBuf::from(DEFAULT_MODEL_PATH));
    }

    #[test]
    fn unknown_key_is_rejected() {
        let e = Config::parse("[engine]\nthreadz = 2\n").unwrap_err();
        assert!(e.to_string().contains("threadz"), "{e}");
    }

    #[test]
    fn absurd_threads_rejected() {
        let e = Config::parse("[engine]\nthreads = 100000\n").unwrap_err();
        assert!(e.to_string().contains("engine.threads"), "{e}");
    }
}
