//! `kiln serve`: the OpenAI-compatible HTTP server.
//!
//! Settings come from the config file (`--config`, else config/default.toml when present),
//! overridden by `KILN_...` environment variables, overridden by flags (clap reads each flag's
//! variable when the flag is absent). The effective configuration is logged with secrets
//! masked.

use anyhow::Context;
use kiln::config::Config;
use kiln::server::{serve, ServeOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (model.path). Repeat it to serve several models, each by its file's
    /// stem (replaces [[models]]); the first is the default.
    #[arg(short = 'm', long, env = "KILN_MODEL")]
    model: Vec<PathBuf>,
    /// A directory whose *.gguf files are served too, each loaded on first use
    /// (server.models_dir).
    #[arg(long, env = "KILN_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// Weights + KV bytes all loaded models may take, e.g. "8GiB"; 0 = no limit
    /// (server.models_memory_budget).
    #[arg(long, env = "KILN_MODELS_MEMORY_BUDGET")]
    models_memory_budget: Option<String>,
    /// Seconds after which an idle model is unloaded; 0 = never (server.models_keep_alive).
    #[arg(long, env = "KILN_MODELS_KEEP_ALIVE")]
    models_keep_alive: Option<f64>,
    /// The model id clients use (model.name; default: the file's stem). llama-server: --alias.
    #[arg(long, visible_alias = "alias", env = "KILN_MODEL_NAME")]
    model_name: Option<String>,
    /// Chat template (Jinja) overriding the model's (model.chat_template). llama-server:
    /// --chat-template-file.
    #[arg(long, visible_alias = "chat-template-file", env = "KILN_CHAT_TEMPLATE")]
    chat_template: Option<PathBuf>,
    /// How /v1/embeddings pools: mean, cls or last (model.pooling; default: the GGUF's
    /// pooling_type, else mean).
    #[arg(long, env = "KILN_POOLING")]
    pooling: Option<String>,
    /// Address to listen on (server.host).
    #[arg(long, env = "KILN_HOST")]
    host: Option<String>,
    /// Port to listen on; 0 picks a free one (server.port).
    #[arg(long, env = "KILN_PORT")]
    port: Option<u16>,
    /// Threads per engine worker; 0 = the physical cores this process may use, divided among the workers (engine.threads).
    #[arg(short = 't', long, env = "KILN_THREADS")]
    threads: Option<usize>,
    /// Engine workers (engine.workers).
    #[arg(long, env = "KILN_WORKERS")]
    workers: Option<usize>,
    /// KV cache budget: "auto", a size ("512MiB") or positions (engine.kv_cache).
    #[arg(long, env = "KILN_KV_CACHE")]
    kv_cache: Option<String>,
    /// llama-server's -c/--ctx-size: N positions of KV cache shared by all sequences
    /// (engine.kv_cache = N); 0 = kiln's automatic size. A request's context is the model's,
    /// within what the cache holds.
    #[arg(short = 'c', long = "ctx-size", conflicts_with = "kv_cache")]
    ctx_size: Option<u64>,
    /// How the KV cache stores K and V: "f16" or "q8_0" (half the memory) (engine.kv_type).
    #[arg(long, env = "KILN_KV_TYPE")]
    kv_type: Option<String>,
    /// Bytes of evicted KV blocks kept in RAM, e.g. "4GiB"; 0 = off (cache.ram_bytes).
    /// llama-server: --cache-ram.
    #[arg(long, visible_alias = "cache-ram", env = "KILN_CACHE_RAM_BYTES")]
    cache_ram_bytes: Option<String>,
    /// Directory of the persistent prompt cache (cache.dir).
    #[arg(long, env = "KILN_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Bytes the persistent prompt cache keeps at most, e.g. "20GiB" (cache.disk_bytes).
    #[arg(long, env = "KILN_CACHE_DISK_BYTES")]
    cache_disk_bytes: Option<String>,
    /// A prompt reuses only prefixes cached for the same API key (cache.namespace_by_key).
    #[arg(long, env = "KILN_CACHE_NAMESPACE_BY_KEY", num_args = 0..=1, default_missing_value = "true")]
    cache_namespace_by_key: Option<bool>,
    /// How the RAM tier stores f16 blocks: "none" or "q8_0" (lossy, half the bytes)
    /// (cache.ram_compress).
    #[arg(long, env = "KILN_CACHE_RAM_COMPRESS")]
    cache_ram_compress: Option<String>,
    /// Sequences per step (scheduler.max_num_seqs). llama-server: -np/--parallel.
    #[arg(long, visible_alias = "parallel", env = "KILN_MAX_NUM_SEQS")]
    max_num_seqs: Option<usize>,
    /// Tokens per step (scheduler.max_batch_tokens).
    #[arg(long, env = "KILN_MAX_BATCH_TOKENS")]
    max_batch_tokens: Option<usize>,
    /// Requests waiting before new ones get 429 (scheduler.max_waiting).
    #[arg(long, env = "KILN_MAX_WAITING")]
    max_waiting: Option<usize>,
    /// Speculative decoding: "ngram" (prompt lookup), "draft" (a draft model) or "off"
    /// (speculative.method). llama-server: --spec-type ngram-simple|none.
    #[arg(long, visible_alias = "spec-type", env = "KILN_SPECULATIVE")]
    speculative: Option<String>,
    /// A smaller model with the same vocabulary whose greedy continuation is the guess
    /// (speculative.draft_model; implies --speculative draft). llama-server: --model-draft/-md.
    #[arg(long, visible_alias = "model-draft", env = "KILN_DRAFT_MODEL")]
    draft_model: Option<PathBuf>,
    /// Most tokens guessed per sequence and step (speculative.max_draft). llama-server:
    /// --draft-max/--draft/--draft-n.
    #[arg(long, visible_aliases = ["draft", "draft-n"], env = "KILN_DRAFT_MAX")]
    draft_max: Option<usize>,
    /// Fewest guesses worth verifying (speculative.min_draft). llama-server:
    /// --draft-min/--draft-n-min.
    #[arg(long, visible_alias = "draft-n-min", env = "KILN_DRAFT_MIN")]
    draft_min: Option<usize>,
    /// Shortest n-gram prompt lookup matches (speculative.ngram_min).
    #[arg(long, env = "KILN_SPEC_NGRAM_MIN")]
    spec_ngram_min: Option<usize>,
    /// Longest n-gram prompt lookup matches, tried first (speculative.ngram_max).
    #[arg(long, env = "KILN_SPEC_NGRAM_MAX")]
    spec_ngram_max: Option<usize>,
    /// Guess only in steps where at most this many sequences decode (speculative.max_seqs).
    #[arg(long, env = "KILN_SPEC_MAX_SEQS")]
    spec_max_seqs: Option<usize>,
    /// Largest request body, e.g. "8MiB" (server.max_body_bytes).
    #[arg(long, env = "KILN_MAX_BODY_BYTES")]
    max_body_bytes: Option<String>,
    /// Seconds a request may run; 0 = no limit (server.request_timeout). llama-server:
    /// --timeout.
    #[arg(long, visible_alias = "timeout", env = "KILN_REQUEST_TIMEOUT")]
    request_timeout: Option<f64>,
    /// Seconds requests in flight get to finish on SIGTERM (server.drain_timeout).
    #[arg(long, env = "KILN_DRAIN_TIMEOUT")]
    drain_timeout: Option<f64>,
    /// API keys, comma-separated (server.api_keys). Prefer the variable to the flag: flags
    /// show in process listings.
    #[arg(
        long,
        visible_alias = "api-key",
        env = "KILN_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_keys: Option<Vec<String>>,
    /// A file of API keys, one per line (server.api_keys_file). llama-server: --api-key-file.
    #[arg(long, visible_alias = "api-key-file", env = "KILN_API_KEYS_FILE")]
    api_keys_file: Option<PathBuf>,
    /// Serve /metrics without an API key (server.metrics_public).
    #[arg(long, env = "KILN_METRICS_PUBLIC", num_args = 0..=1, default_missing_value = "true")]
    metrics_public: Option<bool>,
    /// The id or alias of the model requests without `model` reach, and with several models
    /// those naming one not served (server.default_model).
    #[arg(long, env = "KILN_DEFAULT_MODEL")]
    default_model: Option<String>,
    /// A `model` not served is a 404 even when one model is served (server.strict_model_names).
    #[arg(long, env = "KILN_STRICT_MODEL_NAMES", num_args = 0..=1, default_missing_value = "true")]
    strict_model_names: Option<bool>,
    /// llama-server's -n/--n-predict: max_tokens when a request gives none
    /// (server.max_tokens_default); -1 keeps kiln's default (lowered to the context left).
    #[arg(
        short = 'n',
        long = "n-predict",
        visible_alias = "predict",
        allow_negative_numbers = true
    )]
    n_predict: Option<i64>,
    /// llama-server's --jinja: accepted; kiln always renders chat templates as Jinja.
    #[arg(long)]
    jinja: bool,
    /// Testing only: a fault in the engine, STAGE@STEP (stage: forward, sample, emit, commit,
    /// grammar, rebuild, slow-rebuild; the first time the stage is reached in that step or
    /// later). Repeatable.
    #[arg(long, hide = true)]
    inject_fault: Vec<kiln::scheduler::fault::FaultInjection>,
}

impl Args {
    /// The flags (and variables) given, as config overrides.
    fn overrides(&self) -> anyhow::Result<Vec<(&'static str, toml::Value)>> {
        use toml::Value;
        let mut o: Vec<(&'static str, Value)> = Vec::new();
        let path = |p: &Path| Value::String(p.to_string_lossy().into_owned());
        let int = |v: usize| Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
        let size = |s: &str| match s.trim().parse::<i64>() {
            Ok(n) => Value::Integer(n),
            Err(_) => Value::String(s.to_string()),
        };
        match self.model.as_slice() {
            [] => {}
            // One model: `[model]`, whatever `[[models]]` the file lists.
            [one] => {
                o.push(("model.path", path(one)));
                o.push(("models", Value::Array(Vec::new())));
            }
            several => {
                if self.model_name.is_some()
                    || self.chat_template.is_some()
                    || self.pooling.is_some()
                {
                    anyhow::bail!(
                        "--model-name, --chat-template and --pooling name one model: with \
                         several --model, give each its own in [[models]] of the config file"
                    );
                }
                let entries = several.iter().map(|p| {
                    let mut t = toml::Table::new();
                    t.insert("path".to_string(), path(p));
                    Value::Table(t)
                });
                o.push(("models", Value::Array(entries.collect())));
            }
        }
        if let Some(v) = &self.models_dir {
            o.push(("server.models_dir", path(v)));
        }
        if let Some(v) = &self.models_memory_budget {
            o.push(("server.models_memory_budget", size(v)));
        }
        if let Some(v) = self.models_keep_alive {
            o.push(("server.models_keep_alive", Value::Float(v)));
        }
        if let Some(v) = &self.model_name {
            o.push(("model.name", Value::String(v.clone())));
        }
        if let Some(v) = &self.chat_template {
            o.push(("model.chat_template", path(v)));
        }
        if let Some(v) = &self.pooling {
            o.push(("model.pooling", Value::String(v.clone())));
        }
        if let Some(v) = &self.host {
            o.push(("server.host", Value::String(v.clone())));
        }
        if let Some(v) = self.port {
            o.push(("server.port", Value::Integer(v.into())));
        }
        if let Some(v) = self.threads {
            o.push(("engine.threads", int(v)));
        }
        if let Some(v) = self.workers {
            o.push(("engine.workers", int(v)));
        }
        if let Some(v) = &self.kv_cache {
            o.push(("engine.kv_cache", size(v)));
        }
        if let Some(v) = self.ctx_size {
            // 0 is llama-server's "from the model": kiln's automatic size.
            let cache = match v {
                0 => Value::String("auto".to_string()),
                n => Value::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
            };
            o.push(("engine.kv_cache", cache));
        }
        if let Some(v) = self.n_predict.filter(|&n| n >= 0) {
            o.push(("server.max_tokens_default", Value::Integer(v)));
        }
        if let Some(v) = &self.kv_type {
            o.push(("engine.kv_type", Value::String(v.clone())));
        }
        if let Some(v) = &self.cache_ram_bytes {
            o.push(("cache.ram_bytes", size(v)));
        }
        if let Some(v) = &self.cache_dir {
            o.push(("cache.dir", path(v)));
        }
        if let Some(v) = &self.cache_disk_bytes {
            o.push(("cache.disk_bytes", size(v)));
        }
        if let Some(v) = self.cache_namespace_by_key {
            o.push(("cache.namespace_by_key", Value::Boolean(v)));
        }
        if let Some(v) = &self.cache_ram_compress {
            o.push(("cache.ram_compress", Value::String(v.clone())));
        }
        if let Some(v) = self.max_num_seqs {
            o.push(("scheduler.max_num_seqs", int(v)));
        }
        if let Some(v) = self.max_batch_tokens {
            o.push(("scheduler.max_batch_tokens", int(v)));
        }
        if let Some(v) = self.max_waiting {
            o.push(("scheduler.max_waiting", int(v)));
        }
        if let Some(v) = &self.speculative {
            o.push(("speculative.method", Value::String(v.clone())));
        }
        if let Some(v) = &self.draft_model {
            o.push(("speculative.draft_model", path(v)));
        }
        for (key, v) in [
            ("speculative.max_draft", self.draft_max),
            ("speculative.min_draft", self.draft_min),
            ("speculative.ngram_min", self.spec_ngram_min),
            ("speculative.ngram_max", self.spec_ngram_max),
            ("speculative.max_seqs", self.spec_max_seqs),
        ] {
            if let Some(v) = v {
                o.push((key, int(v)));
            }
        }
        if let Some(v) = &self.max_body_bytes {
            o.push(("server.max_body_bytes", size(v)));
        }
        if let Some(v) = self.request_timeout {
            o.push(("server.request_timeout", Value::Float(v)));
        }
        if let Some(v) = self.drain_timeout {
            o.push(("server.drain_timeout", Value::Float(v)));
        }
        if let Some(v) = &self.api_keys {
            let keys = v.iter().map(|k| k.trim()).filter(|k| !k.is_empty());
            o.push((
                "server.api_keys",
                Value::Array(keys.map(|k| Value::String(k.to_string())).collect()),
            ));
        }
        if let Some(v) = &self.api_keys_file {
            o.push(("server.api_keys_file", path(v)));
        }
        if let Some(v) = self.metrics_public {
            o.push(("server.metrics_public", Value::Boolean(v)));
        }
        if let Some(v) = &self.default_model {
            o.push(("server.default_model", Value::String(v.clone())));
        }
        if let Some(v) = self.strict_model_names {
            o.push(("server.strict_model_names", Value::Boolean(v)));
        }
        Ok(o)
    }
}

/// The keys of `server.api_keys` and of `server.api_keys_file` (one per line; blank lines
/// and `#` comments skipped).
fn api_keys(cfg: &Config) -> anyhow::Result<Vec<String>> {
    let mut keys = cfg.server.api_keys.clone();
    if let Some(file) = &cfg.server.api_keys_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading the API key file {}", file.display()))?;
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        );
        if keys.is_empty() {
            anyhow::bail!("the API key file {} holds no key", file.display());
        }
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// Serves until a signal; `log_format` (the flag or KILN_LOG_FORMAT) wins over `log.format`.
pub fn run(
    args: Args,
    config: Option<&Path>,
    log_format: Option<kiln::config::LogFormat>,
) -> anyhow::Result<()> {
    let file = kiln::config::config_file(config);
    let cfg = Config::load(file, &args.overrides()?)?;
    crate::cli::logging::init(log_format.unwrap_or(cfg.log.format), &cfg.log.level)?;
    let keys = api_keys(&cfg)?;
    tracing::info!(
        config_file = ?file,
        api_keys = keys.len(),
        "effective configuration: {cfg:?}"
    );
    // The HTTP side gets the logical CPUs this process may use (tokio's default count too,
    // taken from the one computation that sizes every thread team).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(kiln::engine::cpus::budget().logical)
        .enable_all()
        .thread_name("kiln-http")
        .build()
        .context("starting the async runtime")?;
    let opts = ServeOptions {
        api_keys: keys,
        faults: args.inject_fault.clone(),
    };
    let result = runtime.block_on(serve(cfg, opts));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(result?)
}
