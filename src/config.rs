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
    #[serde(default)]
    scheduler: RawScheduler,
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
    workers: Option<usize>,
    kv_cache: Option<RawKv>,
}

/// `engine.kv_cache`: a size with a unit ("2GiB", "512MiB", "auto") or a number of positions.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawKv {
    Positions(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    max_num_seqs: Option<usize>,
    max_batch_tokens: Option<usize>,
    max_prefill_while_decoding: Option<usize>,
    max_waiting: Option<usize>,
    max_preemptions: Option<u32>,
    prefix_cache: Option<bool>,
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// GGUF model file.
    pub model_path: PathBuf,
    /// Chat template overriding the model's `tokenizer.chat_template`, if any.
    pub chat_template: Option<PathBuf>,
    /// Threads per engine worker's team; 0 means the physical cores divided among the workers.
    pub threads: usize,
    /// Engine workers (replicas sharing the weights, each with its own KV cache and batch).
    pub workers: usize,
    /// The KV cache budget over all workers.
    pub kv_cache: KvBudget,
    pub scheduler: SchedulerSettings,
}

/// How much KV cache to allocate (over all workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvBudget {
    /// [`KV_AUTO_SHARE_PERCENT`] of the machine's memory, at most [`KV_AUTO_CAP_BYTES`].
    Auto,
    Bytes(u64),
    Positions(u64),
}

/// The automatic KV budget: this share of total memory...
pub const KV_AUTO_SHARE_PERCENT: u64 = 10;
/// ...capped at 2 GiB (~93k positions of the default model, 22.5 KiB each): room for a few
/// dozen long conversations on a small CPU model without taking the machine's memory.
pub const KV_AUTO_CAP_BYTES: u64 = 2 << 30;

impl KvBudget {
    /// Bytes, given the bytes one position takes and the machine's memory (None: unknown).
    pub fn bytes(self, bytes_per_position: u64, mem_total: Option<u64>) -> u64 {
        match self {
            KvBudget::Bytes(b) => b,
            KvBudget::Positions(p) => p.saturating_mul(bytes_per_position),
            KvBudget::Auto => mem_total
                .map(|m| m / 100 * KV_AUTO_SHARE_PERCENT)
                .unwrap_or(KV_AUTO_CAP_BYTES)
                .min(KV_AUTO_CAP_BYTES),
        }
    }
}

/// `[scheduler]`: continuous batching limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Sequences decoding together in one step.
    pub max_num_seqs: usize,
    /// New tokens per step (decode tokens + prefill chunks).
    pub max_batch_tokens: usize,
    /// Prompt tokens per step while any sequence is decoding: bounds a step's time, and so
    /// the inter-token latency running streams see while prompts are read in.
    pub max_prefill_while_decoding: usize,
    /// Requests accepted but not yet running; beyond it new requests are refused (HTTP 429).
    pub max_waiting: usize,
    /// Preemptions one sequence may suffer before others are chosen instead.
    pub max_preemptions: u32,
    /// Reuse the KV of prompt prefixes seen before.
    pub prefix_cache: bool,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            max_num_seqs: 32,
            max_batch_tokens: 512,
            max_prefill_while_decoding: 64,
            max_waiting: 256,
            max_preemptions: 4,
            prefix_cache: true,
        }
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
            workers: 1,
            kv_cache: KvBudget::Auto,
            scheduler: SchedulerSettings::default(),
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
        let workers = raw.engine.workers.unwrap_or(d.workers);
        if !(1..=64).contains(&workers) {
            return Err(ConfigError::Invalid {
                key: "engine.workers",
                message: format!("{workers} is not between 1 and 64"),
            });
        }
        let kv_cache = match raw.engine.kv_cache {
            None => KvBudget::Auto,
            Some(RawKv::Positions(p)) => KvBudget::Positions(p),
            Some(RawKv::Text(t)) if t.trim().eq_ignore_ascii_case("auto") => KvBudget::Auto,
            Some(RawKv::Text(t)) => {
                KvBudget::Bytes(parse_bytes(&t).ok_or_else(|| ConfigError::Invalid {
                    key: "engine.kv_cache",
                    message: format!(
                        "{t:?} is not a size (\"2GiB\", \"512MiB\"), \"auto\" or a number of positions"
                    ),
                })?)
            }
        };
        let ds = SchedulerSettings::default();
        let rs = raw.scheduler;
        let scheduler = SchedulerSettings {
            max_num_seqs: rs.max_num_seqs.unwrap_or(ds.max_num_seqs),
            max_batch_tokens: rs.max_batch_tokens.unwrap_or(ds.max_batch_tokens),
            max_prefill_while_decoding: rs
                .max_prefill_while_decoding
                .unwrap_or(ds.max_prefill_while_decoding),
            max_waiting: rs.max_waiting.unwrap_or(ds.max_waiting),
            max_preemptions: rs.max_preemptions.unwrap_or(ds.max_preemptions),
            prefix_cache: rs.prefix_cache.unwrap_or(ds.prefix_cache),
        };
        let range = |key, v: usize, lo: usize, hi: usize| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::Invalid {
                    key,
                    message: format!("{v} is not between {lo} and {hi}"),
                })
            }
        };
        range("scheduler.max_num_seqs", scheduler.max_num_seqs, 1, 1024)?;
        range(
            "scheduler.max_batch_tokens",
            scheduler.max_batch_tokens,
            1,
            65536,
        )?;
        range("scheduler.max_waiting", scheduler.max_waiting, 0, 1 << 20)?;
        range(
            "scheduler.max_prefill_while_decoding",
            scheduler.max_prefill_while_decoding,
            1,
            65536,
        )?;
        if scheduler.max_batch_tokens < scheduler.max_num_seqs {
            return Err(ConfigError::Invalid {
                key: "scheduler.max_batch_tokens",
                message: format!(
                    "{} is below scheduler.max_num_seqs ({}): every running sequence needs a token per step",
                    scheduler.max_batch_tokens, scheduler.max_num_seqs
                ),
            });
        }
        Ok(Config {
            model_path: raw.model.path.unwrap_or(d.model_path),
            chat_template: raw.model.chat_template,
            threads,
            workers,
            kv_cache,
            scheduler,
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
    fn kv_budget_forms() {
        let c = Config::parse("[engine]\nkv_cache = \"512MiB\"\n").unwrap();
        assert_eq!(c.kv_cache, KvBudget::Bytes(512 << 20));
        let c = Config::parse("[engine]\nkv_cache = 4096\n").unwrap();
        assert_eq!(c.kv_cache, KvBudget::Positions(4096));
        assert_eq!(c.kv_cache.bytes(100, None), 409_600);
        let c = Config::parse("[engine]\nkv_cache = \"auto\"\n").unwrap();
        assert_eq!(c.kv_cache.bytes(1, Some(8 << 30)), (8u64 << 30) / 100 * 10);
        assert_eq!(c.kv_cache.bytes(1, Some(1 << 40)), KV_AUTO_CAP_BYTES);
        let e = Config::parse("[engine]\nkv_cache = \"lots\"\n").unwrap_err();
        assert!(e.to_string().contains("engine.kv_cache"), "{e}");
        assert_eq!(parse_bytes("1.5GB"), Some(1_500_000_000));
        assert_eq!(parse_bytes("2 GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("-1GiB"), None);
    }

    #[test]
    fn scheduler_limits_are_checked() {
        let e = Config::parse("[scheduler]\nmax_num_seqs = 0\n").unwrap_err();
        assert!(e.to_string().contains("scheduler.max_num_seqs"), "{e}");
        let e =
            Config::parse("[scheduler]\nmax_num_seqs = 64\nmax_batch_tokens = 32\n").unwrap_err();
        assert!(e.to_string().contains("max_batch_tokens"), "{e}");
        let e = Config::parse("[scheduler]\nmax_nums_seqs = 4\n").unwrap_err();
        assert!(e.to_string().contains("max_nums_seqs"), "{e}");
    }

    #[test]
    fn absurd_threads_rejected() {
        let e = Config::parse("[engine]\nthreads = 100000\n").unwrap_err();
        assert!(e.to_string().contains("engine.threads"), "{e}");
    }
}
