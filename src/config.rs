//! Configuration: the raw TOML file (`config/default.toml`) deserialized, then validated into
//! [`Config`]. Every setting has a default, so an empty file is a valid configuration.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    log: RawLog,
}

/// `[log]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    level: Option<String>,
    format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    path: Option<PathBuf>,
    chat_template: Option<PathBuf>,
    name: Option<String>,
    aliases: Option<Vec<String>>,
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

/// `[server]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    host: Option<String>,
    port: Option<u16>,
    max_body_bytes: Option<RawKv>,
    max_prompt_tokens: Option<usize>,
    max_tokens_default: Option<usize>,
    max_tokens_cap: Option<usize>,
    max_n: Option<usize>,
    max_stop_strings: Option<usize>,
    max_logit_bias: Option<usize>,
    request_timeout: Option<f64>,
    drain_timeout: Option<f64>,
    sse_keep_alive: Option<f64>,
    api_keys: Option<Vec<String>>,
    api_keys_file: Option<PathBuf>,
    metrics_public: Option<bool>,
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// GGUF model file.
    pub model_path: PathBuf,
    /// Chat template overriding the model's `tokenizer.chat_template`, if any.
    pub chat_template: Option<PathBuf>,
    /// The model id the API serves (default: the model file's stem).
    pub model_name: Option<String>,
    /// Other ids requests may use for the model.
    pub model_aliases: Vec<String>,
    /// Threads per engine worker's team; 0 means the physical cores divided among the workers.
    pub threads: usize,
    /// Engine workers (replicas sharing the weights, each with its own KV cache and batch).
    pub workers: usize,
    /// The KV cache budget over all workers.
    pub kv_cache: KvBudget,
    pub scheduler: SchedulerSettings,
    pub server: ServerSettings,
    pub log: LogSettings,
}

/// `[log]`: how `kiln serve` logs. `KILN_LOG` / `RUST_LOG` win over `level`, and
/// `--log-format` / `KILN_LOG_FORMAT` over `format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// A tracing env-filter directive: `info`, `warn,kiln::access=info`, ...
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: "info".to_string(),
            format: LogFormat::Text,
        }
    }
}

/// Log lines as readable text or one JSON object each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
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

/// `[server]`: the HTTP API's address, limits, keys and timeouts.
#[derive(Clone, PartialEq)]
pub struct ServerSettings {
    pub host: String,
    /// 0 picks a free port (printed at start-up).
    pub port: u16,
    /// Largest request body; a longer one is refused (413) without reading it all.
    pub max_body_bytes: usize,
    /// Longest prompt in tokens; 0 = the model's context.
    pub max_prompt_tokens: usize,
    /// `max_tokens` when a request gives none (further capped by the context left).
    pub max_tokens_default: usize,
    /// Largest `max_tokens` a request may ask for (400 above it).
    pub max_tokens_cap: usize,
    /// Largest `n` (also capped by the scheduler's max_num_seqs and the engine's 16).
    pub max_n: usize,
    /// Most stop strings per request.
    pub max_stop_strings: usize,
    /// Most `logit_bias` entries per request.
    pub max_logit_bias: usize,
    /// A request running longer is aborted; None = no limit.
    pub request_timeout: Option<Duration>,
    /// On SIGTERM, how long requests in flight may take to finish before they are aborted.
    pub drain_timeout: Duration,
    /// Idle time after which a stream gets a `: keep-alive` comment.
    pub sse_keep_alive: Duration,
    /// Accepted API keys (empty with no `api_keys_file`: no authentication).
    pub api_keys: Vec<String>,
    /// A file of API keys, one per line (blank lines and `#` comments ignored).
    pub api_keys_file: Option<PathBuf>,
    /// Serve `/metrics` without an API key.
    pub metrics_public: bool,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            host: "127.0.0.1".to_string(),
            port: 8080,
            max_body_bytes: 8 << 20,
            max_prompt_tokens: 0,
            max_tokens_default: 1024,
            max_tokens_cap: 8192,
            max_n: 16,
            max_stop_strings: 16,
            max_logit_bias: 1024,
            request_timeout: Some(Duration::from_secs(600)),
            drain_timeout: Duration::from_secs(30),
            sse_keep_alive: Duration::from_secs(5),
            api_keys: Vec::new(),
            api_keys_file: None,
            metrics_public: false,
        }
    }
}

/// Secrets stay out of logs: keys show as their count.
impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_prompt_tokens", &self.max_prompt_tokens)
            .field("max_tokens_default", &self.max_tokens_default)
            .field("max_tokens_cap", &self.max_tokens_cap)
            .field("max_n", &self.max_n)
            .field("max_stop_strings", &self.max_stop_strings)
            .field("max_logit_bias", &self.max_logit_bias)
            .field("request_timeout", &self.request_timeout)
            .field("drain_timeout", &self.drain_timeout)
            .field("sse_keep_alive", &self.sse_keep_alive)
            .field(
                "api_keys",
                &format_args!("[{} masked]", self.api_keys.len()),
            )
            .field("api_keys_file", &self.api_keys_file)
            .field("metrics_public", &self.metrics_public)
            .finish()
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
            model_name: None,
            model_aliases: Vec::new(),
            server: ServerSettings::default(),
            log: LogSettings::default(),
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

    /// Reads a configuration file (None: the defaults) and applies `overrides` on top (see
    /// [`Config::parse_with`]).
    pub fn load_with(
        path: Option<&Path>,
        overrides: &[(&str, toml::Value)],
    ) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            return Config::parse_with("", overrides);
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse_with(&text, overrides).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, &[])
    }

    /// Parses TOML text, sets each `("section.key", value)` of `overrides` over it (how
    /// command-line flags and `KILN_...` variables win over the file), then validates the
    /// result, so an override is checked exactly like the file's own setting.
    pub fn parse_with(
        text: &str,
        overrides: &[(&str, toml::Value)],
    ) -> Result<Config, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: PathBuf::from("<text>"),
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
        let raw: RawConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| parse_err(e.to_string()))?;
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
        let model_name = raw.model.name.map(|n| n.trim().to_string());
        if model_name.as_deref() == Some("") {
            return Err(ConfigError::Invalid {
                key: "model.name",
                message: "must not be empty".to_string(),
            });
        }
        let model_aliases: Vec<String> = raw
            .model
            .aliases
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        Ok(Config {
            model_path: raw.model.path.unwrap_or(d.model_path),
            chat_template: raw.model.chat_template,
            model_name,
            model_aliases,
            threads,
            workers,
            kv_cache,
            scheduler,
            server: server_settings(raw.server)?,
            log: log_settings(raw.log)?,
        })
    }
}

/// Validates `[log]` (the level's syntax is checked when logging starts).
fn log_settings(raw: RawLog) -> Result<LogSettings, ConfigError> {
    let d = LogSettings::default();
    let format = match raw.format.as_deref().map(str::trim) {
        None => d.format,
        Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
        Some(f) if f.eq_ignore_ascii_case("json") => LogFormat::Json,
        Some(f) => {
            return Err(ConfigError::Invalid {
                key: "log.format",
                message: format!("{f:?} is neither \"text\" nor \"json\""),
            })
        }
    };
    let level = raw.level.map(|l| l.trim().to_string()).unwrap_or(d.level);
    if level.is_empty() {
        return Err(ConfigError::Invalid {
            key: "log.level",
            message: "must not be empty".to_string(),
        });
    }
    Ok(LogSettings { level, format })
}

/// Validates `[server]`.
fn server_settings(raw: RawServer) -> Result<ServerSettings, ConfigError> {
    let d = ServerSettings::default();
    let invalid = |key: &'static str, message: String| ConfigError::Invalid { key, message };
    let host = raw.host.unwrap_or(d.host).trim().to_string();
    if host.is_empty() {
        return Err(invalid("server.host", "must not be empty".to_string()));
    }
    let max_body_bytes = match raw.max_body_bytes {
        None => d.max_body_bytes as u64,
        Some(RawKv::Positions(b)) => b,
        Some(RawKv::Text(t)) => parse_bytes(&t).ok_or_else(|| {
            invalid(
                "server.max_body_bytes",
                format!("{t:?} is not a size (\"8MiB\", \"65536\")"),
            )
        })?,
    };
    if !(1024..=1 << 30).contains(&max_body_bytes) {
        return Err(invalid(
            "server.max_body_bytes",
            format!("{max_body_bytes} is not between 1 KiB and 1 GiB"),
        ));
    }
    let count = |key: &'static str, v: Option<usize>, dv: usize, lo: usize, hi: usize| {
        let v = v.unwrap_or(dv);
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(invalid(key, format!("{v} is not between {lo} and {hi}")))
        }
    };
    let secs = |key: &'static str, v: Option<f64>, dv: Duration| match v {
        None => Ok(dv),
        Some(s) if s.is_finite() && (0.0..=1e7).contains(&s) => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid(
            key,
            format!("{s} is not a number of seconds from 0 to 10^7"),
        )),
    };
    let max_tokens_cap = count(
        "server.max_tokens_cap",
        raw.max_tokens_cap,
        d.max_tokens_cap,
        1,
        1 << 24,
    )?;
    let max_tokens_default = count(
        "server.max_tokens_default",
        raw.max_tokens_default,
        d.max_tokens_default,
        1,
        max_tokens_cap,
    )?;
    let request_timeout = secs(
        "server.request_timeout",
        raw.request_timeout,
        d.request_timeout.unwrap_or_default(),
    )?;
    let sse_keep_alive = secs(
        "server.sse_keep_alive",
        raw.sse_keep_alive,
        d.sse_keep_alive,
    )?;
    if sse_keep_alive < Duration::from_millis(100) {
        return Err(invalid(
            "server.sse_keep_alive",
            "must be at least 0.1 seconds".to_string(),
        ));
    }
    let api_keys: Vec<String> = raw.api_keys.unwrap_or_default();
    if api_keys
        .iter()
        .any(|k| k.trim().is_empty() || k.trim() != k)
    {
        return Err(invalid(
            "server.api_keys",
            "keys must be non-empty and without surrounding spaces".to_string(),
        ));
    }
    Ok(ServerSettings {
        host,
        port: raw.port.unwrap_or(d.port),
        max_body_bytes: max_body_bytes as usize,
        max_prompt_tokens: raw.max_prompt_tokens.unwrap_or(d.max_prompt_tokens),
        max_tokens_default,
        max_tokens_cap,
        // The engine's own limits: 16 choices, 16 stop strings, 1024 logit_bias entries.
        max_n: count("server.max_n", raw.max_n, d.max_n, 1, 16)?,
        max_stop_strings: count(
            "server.max_stop_strings",
            raw.max_stop_strings,
            d.max_stop_strings,
            0,
            16,
        )?,
        max_logit_bias: count(
            "server.max_logit_bias",
            raw.max_logit_bias,
            d.max_logit_bias,
            0,
            1024,
        )?,
        request_timeout: (!request_timeout.is_zero()).then_some(request_timeout),
        drain_timeout: secs("server.drain_timeout", raw.drain_timeout, d.drain_timeout)?,
        sse_keep_alive,
        api_keys,
        api_keys_file: raw.api_keys_file,
        metrics_public: raw.metrics_public.unwrap_or(d.metrics_public),
    })
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
    fn server_settings_and_overrides() {
        let c = Config::parse(
            "[server]\nport = 0\nmax_body_bytes = \"64KiB\"\nrequest_timeout = 0\napi_keys = [\"k1\"]\n",
        )
        .unwrap();
        assert_eq!(c.server.port, 0);
        assert_eq!(c.server.max_body_bytes, 64 << 10);
        assert_eq!(c.server.request_timeout, None);
        // Keys never show in Debug output (the effective config is logged).
        assert!(!format!("{c:?}").contains("k1"));
        let c = Config::parse_with(
            "[server]\nport = 1\n",
            &[
                ("server.port", toml::Value::Integer(9)),
                ("model.name", toml::Value::String("m".into())),
            ],
        )
        .unwrap();
        assert_eq!((c.server.port, c.model_name.as_deref()), (9, Some("m")));
        let e = Config::parse_with("", &[("server.max_n", toml::Value::Integer(99))]).unwrap_err();
        assert!(e.to_string().contains("server.max_n"), "{e}");
        let c = Config::parse("[log]\nlevel = \"warn,kiln::access=info\"\nformat = \"JSON\"\n")
            .unwrap();
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.log.level, "warn,kiln::access=info");
        let e = Config::parse("[log]\nformat = \"xml\"\n").unwrap_err();
        assert!(e.to_string().contains("log.format"), "{e}");
        let e = Config::parse("[server]\nportt = 1\n").unwrap_err();
        assert!(e.to_string().contains("portt"), "{e}");
        let e = Config::parse("[server]\ndrain_timeout = -1\n").unwrap_err();
        assert!(e.to_string().contains("server.drain_timeout"), "{e}");
    }

    #[test]
    fn absurd_threads_rejected() {
        let e = Config::parse("[engine]\nthreads = 100000\n").unwrap_err();
        assert!(e.to_string().contains("engine.threads"), "{e}");
    }
}
