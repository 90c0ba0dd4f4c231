//! The validated settings, with their defaults (the values `config/default.toml` shows).

use crate::engine::kv_cache::KvType;
use crate::engine::pooling::Pooling;
use std::path::PathBuf;
use std::time::Duration;

/// The default model path, relative to the working directory.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

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
    /// How embeddings pool, overriding the file's `pooling_type` (None: the file's, else mean).
    pub pooling: Option<Pooling>,
    /// Threads per engine worker's team; 0 means the physical cores this process may use
    /// divided among the workers ([`crate::engine::cpus::default_threads`]).
    pub threads: usize,
    /// Engine workers (replicas sharing the weights, each with its own KV cache and batch).
    pub workers: usize,
    /// The KV cache budget over all workers.
    pub kv_cache: KvBudget,
    /// How the KV cache stores its values (`engine.kv_type`).
    pub kv_type: KvType,
    /// The models served by name (`[[models]]`, else `[model]` with `[engine]`'s settings;
    /// empty only when `server.models_dir` provides them all). The first is the default: the
    /// one a request naming no model runs on.
    pub models: Vec<ModelSpec>,
    pub scheduler: SchedulerSettings,
    pub server: ServerSettings,
    pub log: LogSettings,
    pub cache: CacheSettings,
    pub speculative: SpeculativeSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model_path: PathBuf::from(DEFAULT_MODEL_PATH),
            chat_template: None,
            threads: 0,
            workers: 1,
            kv_cache: KvBudget::Auto,
            kv_type: KvType::F16,
            models: vec![ModelSpec::new(PathBuf::from(DEFAULT_MODEL_PATH))],
            scheduler: SchedulerSettings::default(),
            model_name: None,
            model_aliases: Vec::new(),
            pooling: None,
            server: ServerSettings::default(),
            log: LogSettings::default(),
            cache: CacheSettings::default(),
            speculative: SpeculativeSettings::default(),
        }
    }
}

/// `[cache]`: the prefix cache's tiers below the KV cache. Blocks the KV cache evicts move to
/// RAM (`ram_bytes`), and with a `dir` every computed block is also written there in the
/// background (`disk_bytes`), so a restarted server (or another one on the same volume)
/// reuses them. Each worker gets an equal share of both bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Bytes of evicted KV blocks kept in RAM (0: evicted blocks are dropped).
    pub ram_bytes: u64,
    /// The disk tier's directory (None: no disk tier). Created if missing.
    pub dir: Option<PathBuf>,
    /// Bytes of blocks the disk tier keeps at most (least recently used removed first).
    pub disk_bytes: u64,
    /// A request's prompt reuses only prefixes computed for the same API key (keyed by a
    /// hash of the key), in every tier. Off: any request may reuse any cached prefix.
    pub namespace_by_key: bool,
    /// How the RAM tier stores f16/f32 blocks (lossy when compressed).
    pub ram_compress: RamCompress,
}

/// `cache.ram_compress`: the RAM tier's storage of evicted f16/f32 KV blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RamCompress {
    /// The bytes as the KV cache stores them: restored blocks are bit-identical.
    #[default]
    None,
    /// Quantized to Q8_0 (about half of f16's bytes), dequantized on restore: replies from
    /// such blocks are close to, not bit-identical with, recomputed ones. A no-op when the KV
    /// cache already stores Q8_0.
    Q8_0,
}

impl RamCompress {
    /// The name `cache.ram_compress` takes.
    pub fn name(self) -> &'static str {
        match self {
            RamCompress::None => "none",
            RamCompress::Q8_0 => "q8_0",
        }
    }

    pub fn parse(s: &str) -> Option<RamCompress> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(RamCompress::None),
            "q8_0" => Some(RamCompress::Q8_0),
            _ => None,
        }
    }
}

/// RAM tier bound unless configured: 1 GiB.
pub const CACHE_RAM_DEFAULT: u64 = 1 << 30;
/// Disk tier bound unless configured: 10 GiB.
pub const CACHE_DISK_DEFAULT: u64 = 10 << 30;

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            ram_bytes: CACHE_RAM_DEFAULT,
            dir: None,
            disk_bytes: CACHE_DISK_DEFAULT,
            namespace_by_key: false,
            ram_compress: RamCompress::None,
        }
    }
}

/// One model a server serves: `[model]` (with `[engine]`'s threads, workers and KV budget),
/// an entry of `[[models]]`, a `--model` flag, or a file of `server.models_dir`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub path: PathBuf,
    /// The id requests use (None: the file's stem).
    pub name: Option<String>,
    pub aliases: Vec<String>,
    pub chat_template: Option<PathBuf>,
    /// How embeddings pool, overriding the file's `pooling_type`.
    pub pooling: Option<Pooling>,
    /// Threads per engine worker (0: the default share of the cores).
    pub threads: usize,
    pub workers: usize,
    /// This model's own KV cache budget (over its workers).
    pub kv_cache: KvBudget,
    /// How this model's KV cache stores its values.
    pub kv_type: KvType,
    /// This model's draft model (`[[models]]` entry's `draft`; None: `speculative.draft_model`).
    pub draft: Option<PathBuf>,
}

impl ModelSpec {
    /// `path` with the default engine settings and no name or aliases.
    pub fn new(path: PathBuf) -> ModelSpec {
        ModelSpec {
            path,
            name: None,
            aliases: Vec::new(),
            chat_template: None,
            pooling: None,
            threads: 0,
            workers: 1,
            kv_cache: KvBudget::Auto,
            kv_type: KvType::F16,
            draft: None,
        }
    }

    /// The model's id: its name, else the file's stem.
    pub fn id(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            self.path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".to_string())
        })
    }

    /// The id, then the aliases (each once).
    pub fn ids(&self) -> Vec<String> {
        let mut ids = vec![self.id()];
        for a in &self.aliases {
            if !ids.contains(a) {
                ids.push(a.clone());
            }
        }
        ids
    }
}

impl Config {
    /// This configuration with `spec` as its one model (what the engine setup reads).
    pub fn for_model(&self, spec: &ModelSpec) -> Config {
        Config {
            model_path: spec.path.clone(),
            chat_template: spec.chat_template.clone(),
            model_name: spec.name.clone(),
            model_aliases: spec.aliases.clone(),
            pooling: spec.pooling,
            threads: spec.threads,
            workers: spec.workers,
            kv_cache: spec.kv_cache,
            kv_type: spec.kv_type,
            models: vec![spec.clone()],
            // An entry's own draft model makes it speculate with it (unless speculation is off).
            speculative: SpeculativeSettings {
                method: match (&spec.draft, self.speculative.method) {
                    (Some(_), m) if m != SpeculativeMethod::Off => SpeculativeMethod::Draft,
                    (_, m) => m,
                },
                draft_model: spec
                    .draft
                    .clone()
                    .or_else(|| self.speculative.draft_model.clone()),
                ..self.speculative.clone()
            },
            ..self.clone()
        }
    }
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
    /// Request body bytes being read (and parsed) at once, over all requests (a body's first
    /// 64 KiB are not counted); a body that does not fit is refused with 429 before it is read.
    /// Bounds the memory a flood of large bodies can take: a chat body takes up to ~20 times
    /// its size while it is parsed, rendered and tokenized.
    pub max_body_bytes_in_flight: usize,
    /// HTTP requests being handled at once (every route but `/health`, `/ready`, `/metrics`);
    /// beyond it a request is refused with 429 before its body is read.
    pub max_in_flight_requests: usize,
    /// Origins browsers may call the API from (CORS); empty = none, `["*"]` = any.
    pub cors_allowed_origins: Vec<String>,
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
    /// A directory whose `*.gguf` files are served too (id: the file's stem), each loaded on
    /// its first request.
    pub models_dir: Option<PathBuf>,
    /// Weights plus KV bytes all loaded models may take together (None: no limit); loading
    /// one that does not fit unloads the least recently used idle ones first.
    pub models_memory_budget: Option<u64>,
    /// A model idle this long is unloaded (None: never); its next request loads it again.
    pub models_keep_alive: Option<Duration>,
    /// How long a request waits for its model to load (or for memory to load it) before a
    /// 503 with Retry-After.
    pub models_load_timeout: Duration,
    /// Most responses `/v1/responses` keeps for `previous_response_id` (0: none); beyond
    /// it the oldest go first.
    pub responses_store_entries: usize,
    /// How long a stored response is kept.
    pub responses_store_ttl: Duration,
    /// The id or alias of the model requests without `model` reach, and (unless
    /// `strict_model_names`) those naming a model not served (None: the first served model;
    /// with one model served, unknown names reach it anyway).
    pub default_model: Option<String>,
    /// A `model` no served model has is a 404 even when one model is served.
    pub strict_model_names: bool,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            host: "127.0.0.1".to_string(),
            port: 8080,
            max_body_bytes: 8 << 20,
            max_body_bytes_in_flight: 16 << 20,
            max_in_flight_requests: 512,
            cors_allowed_origins: Vec::new(),
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
            models_dir: None,
            models_memory_budget: None,
            models_keep_alive: None,
            models_load_timeout: Duration::from_secs(120),
            responses_store_entries: 1000,
            responses_store_ttl: Duration::from_secs(3600),
            default_model: None,
            strict_model_names: false,
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
            .field("max_body_bytes_in_flight", &self.max_body_bytes_in_flight)
            .field("max_in_flight_requests", &self.max_in_flight_requests)
            .field("cors_allowed_origins", &self.cors_allowed_origins)
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
            .field("models_dir", &self.models_dir)
            .field("models_memory_budget", &self.models_memory_budget)
            .field("models_keep_alive", &self.models_keep_alive)
            .field("models_load_timeout", &self.models_load_timeout)
            .field("responses_store_entries", &self.responses_store_entries)
            .field("responses_store_ttl", &self.responses_store_ttl)
            .field("default_model", &self.default_model)
            .field("strict_model_names", &self.strict_model_names)
            .finish()
    }
}

/// `[speculative]`: speculative decoding.
/// Where guesses come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeculativeMethod {
    Off,
    /// Prompt lookup: the sequence's last tokens found earlier in its own prompt or output.
    Ngram,
    /// A second, smaller model with the same vocabulary proposes the tokens
    /// ([`SpeculativeSettings::draft_model`], or a `[[models]]` entry's `draft`).
    Draft,
}

/// `[speculative]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeculativeSettings {
    pub method: SpeculativeMethod,
    /// Most tokens guessed for one sequence in one step.
    pub max_draft: usize,
    /// Fewest guesses worth verifying (a shorter proposal is not used).
    pub min_draft: usize,
    /// N-gram sizes prompt lookup tries, the longest first.
    pub ngram_min: usize,
    pub ngram_max: usize,
    /// Guess only in steps where at most this many sequences decode (a bigger batch is
    /// compute-bound: a guess costs its full price there).
    pub max_seqs: usize,
    /// The draft model file (`method = "draft"`; a `[[models]]` entry's `draft` replaces it
    /// for that model).
    pub draft_model: Option<PathBuf>,
}

impl Default for SpeculativeSettings {
    fn default() -> Self {
        SpeculativeSettings {
            method: SpeculativeMethod::Ngram,
            max_draft: 8,
            min_draft: 1,
            ngram_min: 2,
            ngram_max: 4,
            max_seqs: 4,
            draft_model: None,
        }
    }
}
