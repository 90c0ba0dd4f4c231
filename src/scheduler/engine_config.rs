//! How the engine is laid out: the settings [`crate::scheduler::setup`] derives from the
//! configuration and the workers are built from.

use crate::engine::kv_cache::KvType;
use crate::engine::pooling::Pooling;
use crate::scheduler::fault::FaultInjection;
use crate::scheduler::speculative::SpecConfig;
use crate::scheduler::state::Limits;

/// How the engine is laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Engine workers: replicas sharing the model's weights, each with its own KV cache, worker
    /// team and batch. Requests go to the least loaded.
    pub workers: usize,
    /// Threads per worker team (0 = [`crate::engine::cpus::default_threads`]).
    pub threads: usize,
    /// KV positions per worker.
    pub kv_positions: usize,
    /// Positions per KV block.
    pub block_size: usize,
    /// How the KV cache stores its values.
    pub kv_type: KvType,
    /// Scheduler limits (`n_ctx` is taken from the model when 0, and capped by it).
    pub limits: Limits,
    /// Testing only: faults to inject (each worker has its own copy), to exercise the fault
    /// path with a real process.
    pub faults: Vec<FaultInjection>,
    /// Events a request's stream may leave unread before the request is aborted
    /// ([`MAX_UNREAD_EVENTS`] in servers; tests lower it to reach the limit quickly).
    pub max_unread_events: usize,
    /// How embeddings pool, overriding the model file's `pooling_type` (None: the file's).
    pub pooling: Option<Pooling>,
    /// Speculative decoding (guessed tokens verified in the batch).
    pub speculative: SpecConfig,
    /// The prefix cache's tiers below the KV pool (RAM and disk), per worker.
    pub tiers: CacheTiers,
}

/// The prefix cache's tiers below the KV pool (`[cache]` settings), per worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheTiers {
    /// Bytes of evicted blocks kept in RAM (0: evicted blocks are dropped).
    pub ram_bytes: usize,
    /// Where blocks are persisted (None: no disk tier).
    pub dir: Option<std::path::PathBuf>,
    /// Bytes of blocks kept in `dir` at most.
    pub disk_bytes: u64,
    /// A request's prompt matches only prefixes of its own API key
    /// ([`crate::scheduler::GenerationRequest::api_key_id`]).
    pub namespace_by_key: bool,
    /// The RAM tier stores f16/f32 blocks as Q8_0 (lossy; see `cache.ram_compress`).
    pub ram_q8_0: bool,
    /// The model identity disk files are keyed and checked by
    /// ([`crate::scheduler::prefix_cache::identity`]).
    pub identity: u64,
}

/// Unread events a client may leave behind before its request is aborted (a reader that
/// stopped reading must not grow the server's memory without bound).
pub const MAX_UNREAD_EVENTS: usize = 4096;
