//! Every metric kiln exports: its name, help text and buckets, defined once. Names follow
//! Prometheus conventions: prefix `kiln_`, base units (seconds, bytes), `_total` for counters.

/// Latency buckets for CPU serving, 1 ms to 5 minutes: fine below a second (inter-token gaps of
/// a few ms, first tokens of ~50-500 ms), coarse for long generations and queueing.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0,
    1.5, 2.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0,
];

/// Token-count buckets: powers of two up to 32k (prompt and generated lengths, batch tokens).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0,
];

/// Sequences in one step.
pub const BATCH_SEQ_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0,
];

// Histograms.
pub const REQUEST_DURATION: &str = "kiln_request_duration_seconds";
pub const TIME_TO_FIRST_TOKEN: &str = "kiln_time_to_first_token_seconds";
pub const INTER_TOKEN_LATENCY: &str = "kiln_inter_token_latency_seconds";
pub const TIME_PER_OUTPUT_TOKEN: &str = "kiln_time_per_output_token_seconds";
pub const REQUEST_QUEUE: &str = "kiln_request_queue_seconds";
pub const REQUEST_PROMPT_TOKENS: &str = "kiln_request_prompt_tokens";
pub const REQUEST_GENERATION_TOKENS: &str = "kiln_request_generation_tokens";
pub const ENGINE_STEP: &str = "kiln_engine_step_seconds";
pub const BATCH_SEQUENCES: &str = "kiln_batch_sequences";
pub const BATCH_TOKENS: &str = "kiln_batch_tokens";

// Counters.
pub const REQUESTS: &str = "kiln_requests_total";
pub const REQUESTS_FINISHED: &str = "kiln_requests_finished_total";
pub const PROMPT_TOKENS: &str = "kiln_prompt_tokens_total";
pub const GENERATION_TOKENS: &str = "kiln_generation_tokens_total";
pub const PREEMPTIONS: &str = "kiln_preemptions_total";
pub const PREFIX_CACHE_QUERIES: &str = "kiln_prefix_cache_queries_total";
pub const PREFIX_CACHE_HITS: &str = "kiln_prefix_cache_hits_total";
pub const REJECTED: &str = "kiln_rejected_total";
pub const ENGINE_FAULTS: &str = "kiln_engine_faults_total";
pub const SPEC_DRAFT_TOKENS: &str = "kiln_spec_draft_tokens_total";
pub const SPEC_ACCEPTED_TOKENS: &str = "kiln_spec_accepted_tokens_total";
pub const PREFIX_TIER_LOOKUPS: &str = "kiln_prefix_cache_tier_lookups_total";
pub const PREFIX_TIER_SPILLED: &str = "kiln_prefix_cache_spilled_blocks_total";
pub const PREFIX_DISK_BLOCKS: &str = "kiln_prefix_cache_disk_blocks_total";

// Prefix-cache tier histograms.
pub const PREFIX_TIER_RESTORE: &str = "kiln_prefix_cache_restore_seconds";
pub const PREFIX_DISK_WRITE: &str = "kiln_prefix_cache_disk_write_seconds";

// Gauges.
pub const REQUESTS_RUNNING: &str = "kiln_requests_running";
pub const REQUESTS_WAITING: &str = "kiln_requests_waiting";
pub const KV_CACHE_USAGE: &str = "kiln_kv_cache_usage_ratio";
pub const KV_CACHE_BLOCKS: &str = "kiln_kv_cache_blocks";
pub const MODEL_LOAD: &str = "kiln_model_load_seconds";
pub const BUILD_INFO: &str = "kiln_build_info";
pub const READY: &str = "kiln_ready";
pub const HTTP_IN_FLIGHT: &str = "kiln_http_requests_in_flight";
pub const PREFIX_TIER_BLOCKS: &str = "kiln_prefix_cache_tier_blocks";
pub const PREFIX_TIER_BYTES: &str = "kiln_prefix_cache_tier_bytes";
pub const PREFIX_DISK_DEGRADED: &str = "kiln_prefix_cache_disk_degraded";

/// Every family name `/metrics` must show (the test checks this list).
pub const ALL: &[&str] = &[
    REQUEST_DURATION,
    TIME_TO_FIRST_TOKEN,
    INTER_TOKEN_LATENCY,
    TIME_PER_OUTPUT_TOKEN,
    REQUEST_QUEUE,
    REQUEST_PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS,
    ENGINE_STEP,
    BATCH_SEQUENCES,
    BATCH_TOKENS,
    REQUESTS,
    REQUESTS_FINISHED,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    PREEMPTIONS,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    REJECTED,
    ENGINE_FAULTS,
    SPEC_DRAFT_TOKENS,
    SPEC_ACCEPTED_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    KV_CACHE_USAGE,
    KV_CACHE_BLOCKS,
    MODEL_LOAD,
    BUILD_INFO,
    READY,
    HTTP_IN_FLIGHT,
    PREFIX_TIER_LOOKUPS,
    PREFIX_TIER_SPILLED,
    PREFIX_DISK_BLOCKS,
    PREFIX_TIER_RESTORE,
    PREFIX_DISK_WRITE,
    PREFIX_TIER_BLOCKS,
    PREFIX_TIER_BYTES,
    PREFIX_DISK_DEGRADED,
];
