//! From the file as written ([`RawConfig`]) to validated settings: defaults filled in, every
//! value checked. A setting that would leave the server unable to serve (a queue of 0, a KV
//! cache of 0, fewer batch tokens than sequences, ...) is an error naming its key, never a
//! server that starts and then refuses or hangs.

use super::check::{in_range, invalid, kv_budget, kv_type, MAX_THREADS};
use super::models;
use super::raw::{RawCache, RawConfig, RawLog, RawScheduler, RawServer, RawSize};
use super::settings::{
    CacheSettings, Config, LogFormat, LogSettings, ModelSpec, RamCompress, SchedulerSettings,
    ServerSettings,
};
use super::{parse_bytes, ConfigError};
use std::time::Duration;

/// Seconds from 0 to 10^7.
fn seconds(key: &'static str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && (0.0..=1e7).contains(&s) => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid(
            key,
            format!("{s} is not a number of seconds from 0 to 10^7"),
        )),
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Config, ConfigError> {
        let d = Config::default();
        let threads = raw.engine.threads.unwrap_or(d.threads);
        in_range("engine.threads", threads, 0, MAX_THREADS)?;
        let workers = in_range(
            "engine.workers",
            raw.engine.workers.unwrap_or(d.workers),
            1,
            64,
        )?;
        let kv_cache = kv_budget("engine.kv_cache", raw.engine.kv_cache)?;
        let kv_type = kv_type("engine.kv_type", raw.engine.kv_type)?.unwrap_or(d.kv_type);
        let model_name = models::name("model.name", raw.model.name)?;
        let model_aliases = models::aliases(raw.model.aliases);
        let pooling = models::pooling("model.pooling", raw.model.pooling)?;
        let model_path = raw.model.path.clone().unwrap_or(d.model_path);
        let server = server_settings(raw.server)?;
        let single = ModelSpec {
            path: model_path.clone(),
            name: model_name.clone(),
            aliases: model_aliases.clone(),
            chat_template: raw.model.chat_template.clone(),
            pooling,
            threads,
            workers,
            kv_cache,
            kv_type,
            draft: None,
        };
        let served = models::served(
            raw.models,
            single,
            raw.model.path.is_some(),
            server.models_dir.is_some(),
        )?;
        let speculative = super::speculative::speculative_settings(raw.speculative)?;
        super::speculative::check_drafts(&speculative, &served)?;
        Ok(Config {
            model_path,
            chat_template: raw.model.chat_template,
            model_name,
            model_aliases,
            pooling,
            threads,
            workers,
            kv_cache,
            kv_type,
            models: served,
            scheduler: scheduler_settings(raw.scheduler)?,
            server,
            log: log_settings(raw.log)?,
            cache: cache_settings(raw.cache)?,
            speculative,
        })
    }
}

/// Validates `[cache]`: sizes up to 1 PiB (0 turns a tier off), a non-empty `dir`.
fn cache_settings(raw: RawCache) -> Result<CacheSettings, ConfigError> {
    let d = CacheSettings::default();
    let size = |key: &'static str, v: Option<RawSize>, dv: u64| -> Result<u64, ConfigError> {
        let b = match v {
            None => dv,
            Some(RawSize::Number(b)) => b,
            Some(RawSize::Text(t)) => parse_bytes(&t)
                .ok_or_else(|| invalid(key, format!("{t:?} is not a size (\"1GiB\", \"0\")")))?,
        };
        in_range(key, b, 0, 1 << 50)
    };
    if raw.dir.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
        return Err(invalid(
            "cache.dir",
            "must not be empty (omit it for no disk tier)",
        ));
    }
    let c = CacheSettings {
        ram_bytes: size("cache.ram_bytes", raw.ram_bytes, d.ram_bytes)?,
        dir: raw.dir,
        disk_bytes: size("cache.disk_bytes", raw.disk_bytes, d.disk_bytes)?,
        namespace_by_key: raw.namespace_by_key.unwrap_or(d.namespace_by_key),
        ram_compress: match raw.ram_compress {
            None => d.ram_compress,
            Some(t) => RamCompress::parse(&t).ok_or_else(|| {
                invalid(
                    "cache.ram_compress",
                    format!("{t:?} is not \"none\" or \"q8_0\""),
                )
            })?,
        },
    };
    if c.dir.is_some() && c.ram_bytes == 0 {
        return Err(invalid(
            "cache.dir",
            "needs cache.ram_bytes above 0 (blocks read from disk are restored through RAM)",
        ));
    }
    Ok(c)
}

/// Validates `[scheduler]`.
fn scheduler_settings(rs: RawScheduler) -> Result<SchedulerSettings, ConfigError> {
    let ds = SchedulerSettings::default();
    let s = SchedulerSettings {
        max_num_seqs: in_range(
            "scheduler.max_num_seqs",
            rs.max_num_seqs.unwrap_or(ds.max_num_seqs),
            1,
            1024,
        )?,
        max_batch_tokens: in_range(
            "scheduler.max_batch_tokens",
            rs.max_batch_tokens.unwrap_or(ds.max_batch_tokens),
            1,
            65536,
        )?,
        max_prefill_while_decoding: in_range(
            "scheduler.max_prefill_while_decoding",
            rs.max_prefill_while_decoding
                .unwrap_or(ds.max_prefill_while_decoding),
            1,
            65536,
        )?,
        // 0 would refuse every request: nothing may wait for its first step.
        max_waiting: in_range(
            "scheduler.max_waiting",
            rs.max_waiting.unwrap_or(ds.max_waiting),
            1,
            1 << 20,
        )?,
        max_preemptions: in_range(
            "scheduler.max_preemptions",
            rs.max_preemptions.unwrap_or(ds.max_preemptions),
            0,
            1 << 20,
        )?,
        prefix_cache: rs.prefix_cache.unwrap_or(ds.prefix_cache),
    };
    if s.max_batch_tokens < s.max_num_seqs {
        return Err(invalid(
            "scheduler.max_batch_tokens",
            format!(
                "{} is below scheduler.max_num_seqs ({}): every running sequence needs a token per step",
                s.max_batch_tokens, s.max_num_seqs
            ),
        ));
    }
    Ok(s)
}

/// Validates `[log]` (the level's syntax is checked when logging starts).
fn log_settings(raw: RawLog) -> Result<LogSettings, ConfigError> {
    let d = LogSettings::default();
    let format = match raw.format.as_deref().map(str::trim) {
        None => d.format,
        Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
        Some(f) if f.eq_ignore_ascii_case("json") => LogFormat::Json,
        Some(f) => {
            return Err(invalid(
                "log.format",
                format!("{f:?} is neither \"text\" nor \"json\""),
            ))
        }
    };
    let level = raw.level.map(|l| l.trim().to_string()).unwrap_or(d.level);
    if level.is_empty() {
        return Err(invalid("log.level", "must not be empty"));
    }
    Ok(LogSettings { level, format })
}

/// `server.cors_allowed_origins`: `"*"` alone, or origins as browsers send them
/// (`scheme://host[:port]`, no path).
fn cors_origins(origins: Vec<String>) -> Result<Vec<String>, ConfigError> {
    const KEY: &str = "server.cors_allowed_origins";
    if origins.iter().any(|o| o == "*") {
        if origins.len() > 1 {
            return Err(invalid(KEY, "\"*\" allows every origin: list it alone"));
        }
        return Ok(origins);
    }
    for o in &origins {
        let ok = o.split_once("://").is_some_and(|(scheme, rest)| {
            matches!(scheme, "http" | "https")
                && !rest.is_empty()
                && !rest.contains('/')
                && rest.bytes().all(|b| b.is_ascii_graphic())
        });
        if !ok {
            return Err(invalid(
                KEY,
                format!("{o:?} is not an origin such as \"https://app.example.com\" or \"*\""),
            ));
        }
    }
    Ok(origins)
}

/// Validates `[server]`.
fn server_settings(raw: RawServer) -> Result<ServerSettings, ConfigError> {
    let d = ServerSettings::default();
    let host = raw.host.unwrap_or(d.host).trim().to_string();
    if host.is_empty() {
        return Err(invalid("server.host", "must not be empty"));
    }
    let size = |key: &'static str, v: Option<RawSize>, dv: usize| -> Result<u64, ConfigError> {
        let b = match v {
            None => dv as u64,
            Some(RawSize::Number(b)) => b,
            Some(RawSize::Text(t)) => parse_bytes(&t).ok_or_else(|| {
                invalid(key, format!("{t:?} is not a size (\"8MiB\", \"65536\")"))
            })?,
        };
        if (1024..=1 << 30).contains(&b) {
            Ok(b)
        } else {
            Err(invalid(key, format!("{b} is not between 1 KiB and 1 GiB")))
        }
    };
    let max_body_bytes = size(
        "server.max_body_bytes",
        raw.max_body_bytes,
        d.max_body_bytes,
    )?;
    let max_body_bytes_in_flight = size(
        "server.max_body_bytes_in_flight",
        raw.max_body_bytes_in_flight,
        d.max_body_bytes_in_flight,
    )?;
    // Below one whole body, a body of the largest allowed size could never be read.
    if max_body_bytes_in_flight < max_body_bytes {
        return Err(invalid(
            "server.max_body_bytes_in_flight",
            format!(
                "{max_body_bytes_in_flight} is below server.max_body_bytes ({max_body_bytes}): \
                 a body of the largest allowed size could never be read"
            ),
        ));
    }
    let cors_allowed_origins = cors_origins(raw.cors_allowed_origins.unwrap_or_default())?;
    let count = |key: &'static str, v: Option<usize>, dv: usize, lo: usize, hi: usize| {
        in_range(key, v.unwrap_or(dv), lo, hi)
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
    let request_timeout = seconds(
        "server.request_timeout",
        raw.request_timeout,
        d.request_timeout.unwrap_or_default(),
    )?;
    // Below 0.1 s (other than 0, no limit) every request would time out.
    if !request_timeout.is_zero() && request_timeout < Duration::from_millis(100) {
        return Err(invalid(
            "server.request_timeout",
            "must be 0 (no limit) or at least 0.1 seconds",
        ));
    }
    let sse_keep_alive = seconds(
        "server.sse_keep_alive",
        raw.sse_keep_alive,
        d.sse_keep_alive,
    )?;
    if sse_keep_alive < Duration::from_millis(100) {
        return Err(invalid(
            "server.sse_keep_alive",
            "must be at least 0.1 seconds",
        ));
    }
    let responses_store_ttl = seconds(
        "server.responses_store_ttl",
        raw.responses_store_ttl,
        d.responses_store_ttl,
    )?;
    if responses_store_ttl < Duration::from_secs(1) {
        return Err(invalid(
            "server.responses_store_ttl",
            "must be at least 1 second (responses_store_entries = 0 stores none)",
        ));
    }
    // Which model it names is checked against the served ones when they are known (a
    // `models_dir` file's id is only known then).
    let default_model = match raw.default_model.map(|m| m.trim().to_string()) {
        Some(m) if m.is_empty() => None,
        m => m,
    };
    let api_keys: Vec<String> = raw.api_keys.unwrap_or_default();
    if api_keys
        .iter()
        .any(|k| k.trim().is_empty() || k.trim() != k)
    {
        return Err(invalid(
            "server.api_keys",
            "keys must be non-empty and without surrounding spaces",
        ));
    }
    Ok(ServerSettings {
        host,
        port: raw.port.unwrap_or(d.port),
        max_body_bytes: max_body_bytes as usize,
        max_body_bytes_in_flight: max_body_bytes_in_flight as usize,
        max_in_flight_requests: count(
            "server.max_in_flight_requests",
            raw.max_in_flight_requests,
            d.max_in_flight_requests,
            1,
            1 << 20,
        )?,
        cors_allowed_origins,
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
        drain_timeout: seconds("server.drain_timeout", raw.drain_timeout, d.drain_timeout)?,
        sse_keep_alive,
        api_keys,
        api_keys_file: raw.api_keys_file,
        metrics_public: raw.metrics_public.unwrap_or(d.metrics_public),
        models_dir: raw.models_dir.filter(|p| !p.as_os_str().is_empty()),
        models_memory_budget: memory_budget(raw.models_memory_budget)?,
        models_keep_alive: {
            let k = seconds(
                "server.models_keep_alive",
                raw.models_keep_alive,
                Duration::ZERO,
            )?;
            (!k.is_zero()).then_some(k)
        },
        models_load_timeout: {
            let t = seconds(
                "server.models_load_timeout",
                raw.models_load_timeout,
                d.models_load_timeout,
            )?;
            if t < Duration::from_millis(100) {
                return Err(invalid(
                    "server.models_load_timeout",
                    "must be at least 0.1 seconds",
                ));
            }
            t
        },
        responses_store_entries: count(
            "server.responses_store_entries",
            raw.responses_store_entries,
            d.responses_store_entries,
            0,
            1 << 20,
        )?,
        responses_store_ttl,
        default_model,
        strict_model_names: raw.strict_model_names.unwrap_or(d.strict_model_names),
    })
}

/// `server.models_memory_budget`: a size, or 0 / "unlimited" for no limit.
fn memory_budget(raw: Option<RawSize>) -> Result<Option<u64>, ConfigError> {
    const KEY: &str = "server.models_memory_budget";
    let bytes = match raw {
        None | Some(RawSize::Number(0)) => return Ok(None),
        Some(RawSize::Text(t)) if t.trim().eq_ignore_ascii_case("unlimited") => return Ok(None),
        Some(RawSize::Number(b)) => b,
        Some(RawSize::Text(t)) => parse_bytes(&t).ok_or_else(|| {
            invalid(
                KEY,
                format!("{t:?} is not a size (\"8GiB\", \"512MiB\") or \"unlimited\""),
            )
        })?,
    };
    if bytes < 1 << 20 {
        return Err(invalid(
            KEY,
            format!("{bytes} bytes hold no model (at least 1 MiB)"),
        ));
    }
    Ok(Some(bytes))
}
