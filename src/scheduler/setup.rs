//! Building a running engine from the configuration: open the model file, load the tokenizer
//! and the weights, size the KV cache, start the workers.

use crate::config::{Config, KvBudget, SpeculativeMethod};
use crate::engine::kv_cache::DEFAULT_BLOCK_SIZE;
use crate::engine::{EngineError, Model};
use crate::gguf::{GgufError, GgufFile};
use crate::scheduler::engine_config::{CacheTiers, EngineConfig, MAX_UNREAD_EVENTS};
use crate::scheduler::handle::EngineHandle;
use crate::scheduler::observer::Observer;
use crate::scheduler::prefix_cache::identity::model_identity;
use crate::scheduler::speculative::{SpecConfig, SpecMethod};
use crate::scheduler::state::{checkpoint_slots, Limits};
use crate::tokenizer::{Tokenizer, TokenizerError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot open model {path}: {source}")]
    Open { path: PathBuf, source: GgufError },
    #[error("model {path}: tokenizer: {source}")]
    Tokenizer {
        path: PathBuf,
        source: TokenizerError,
    },
    #[error("model {path}: {source}")]
    Engine { path: PathBuf, source: EngineError },
    #[error(
        "draft model {draft}: its vocabulary differs from the model's ({model}): {why}; a draft model must use the same tokenizer (speculative.draft_model)"
    )]
    DraftVocab {
        draft: PathBuf,
        model: PathBuf,
        why: String,
    },
    #[error(
        "draft model {draft} for {model}: a model with recurrent layers (short convolution, ...) can neither draft nor be drafted for, as its state cannot be rolled back past rejected guesses (speculative.draft_model)"
    )]
    DraftRecurrent { draft: PathBuf, model: PathBuf },
    #[error(
        "the KV cache budget ({bytes} bytes over {workers} workers) holds no block of {block_bytes} bytes per worker"
    )]
    KvTooSmall {
        bytes: u64,
        workers: usize,
        block_bytes: u64,
    },
}

/// A loaded model and the engine serving it.
pub struct Loaded {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    /// The model file's `tokenizer.chat_template`, if any.
    pub chat_template: Option<String>,
    /// The model file's stem (the default model id).
    pub model_stem: String,
    /// `general.file_type` as a name where known (e.g. "Q4_1"), else the weights' main type.
    pub quant: String,
    /// KV positions per worker and bytes per position.
    pub kv_positions: usize,
    pub kv_bytes_per_position: usize,
    /// The KV caches' bytes over all workers.
    pub kv_bytes: u64,
    pub load_time: Duration,
}

/// Total memory from /proc/meminfo (None off Linux or when unreadable).
pub fn mem_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes the configured model will take once loaded, read from its file without loading it:
/// the file (its weights) plus the KV cache its budget allows (K and V of every layer in the
/// configured `kv_type`, without a sliding-window discount, so never below what the load
/// takes).
pub fn memory_estimate(cfg: &Config) -> Result<u64, SetupError> {
    let path = cfg.model_path.clone();
    let file = GgufFile::open(&path).map_err(|source| SetupError::Open {
        path: path.clone(),
        source,
    })?;
    let c = crate::engine::ModelDesc::from_gguf(&file).map_err(|source| SetupError::Engine {
        path: path.clone(),
        source,
    })?;
    let (num, den) = cfg.kv_type.bytes_per_value();
    let per_pos =
        (c.n_kv_layers() as u64) * (c.n_head_kv as u64) * (c.head_dim as u64) * 2 * num as u64
            / den as u64;
    let mut len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if let (SpeculativeMethod::Draft, Some(d)) =
        (cfg.speculative.method, &cfg.speculative.draft_model)
    {
        // The draft's weights; its KV cache comes out of the same budget.
        len = len.saturating_add(std::fs::metadata(d).map(|m| m.len()).unwrap_or(0));
    }
    // A recurrent model's states come out of the same budget (see `load`).
    Ok(len.saturating_add(cfg.kv_cache.bytes(per_pos.max(1), mem_total_bytes())))
}

/// The scheduler limits the configuration asks for.
pub fn limits(cfg: &Config) -> Limits {
    let s = cfg.scheduler;
    Limits {
        max_num_seqs: s.max_num_seqs,
        max_batch_tokens: s.max_batch_tokens,
        max_prefill_while_decoding: s.max_prefill_while_decoding,
        attn_positions_per_token: 0,
        max_preemptions: s.max_preemptions,
        n_ctx: 0,
        prefix_cache: s.prefix_cache,
        max_waiting: s.max_waiting,
    }
}

/// The speculative decoding the configuration asks for (`[speculative]`).
pub fn speculation(cfg: &Config) -> SpecConfig {
    let s = &cfg.speculative;
    SpecConfig {
        method: match s.method {
            SpeculativeMethod::Off => SpecMethod::Off,
            SpeculativeMethod::Ngram => SpecMethod::Ngram,
            SpeculativeMethod::Draft => SpecMethod::Draft,
        },
        max_draft: s.max_draft,
        min_draft: s.min_draft,
        ngram_min: s.ngram_min,
        ngram_max: s.ngram_max,
        max_seqs: s.max_seqs,
    }
}

/// The prefix cache's tiers per worker for the model at `path` in blocks of `block_size`: an
/// equal share of each bound. Workers share the disk tier's directory as replicas on one
/// volume do (a block is the same whoever wrote it). A model file whose identity cannot be
/// read gets no disk tier (with a warning), never a failed start.
fn tiers(cfg: &Config, workers: usize, path: &Path, block_size: usize) -> CacheTiers {
    let c = &cfg.cache;
    let w = workers.max(1);
    let isa = crate::kernels::isa::isa().name();
    let (dir, identity) = match &c.dir {
        None => (None, 0),
        Some(d) => match model_identity(path, cfg.kv_type, block_size, isa) {
            Ok(id) => (Some(d.clone()), id),
            Err(e) => {
                tracing::warn!(model = %path.display(), error = %e,
                    "cannot read the model's identity: no disk tier for the prefix cache");
                (None, 0)
            }
        },
    };
    CacheTiers {
        ram_bytes: usize::try_from(c.ram_bytes / w as u64).unwrap_or(usize::MAX),
        dir,
        disk_bytes: c.disk_bytes / w as u64,
        identity,
        namespace_by_key: c.namespace_by_key,
        ram_q8_0: c.ram_compress == crate::config::RamCompress::Q8_0,
    }
}

/// Opens `model_path` (or the configured model) and starts the engine described by `cfg`.
pub fn start(
    cfg: &Config,
    model_path: Option<&Path>,
    observer: Arc<dyn Observer>,
) -> Result<Loaded, SetupError> {
    start_with(cfg, model_path, observer, &[])
}

/// [`start`], with `faults` injected (see [`EngineConfig::faults`]; testing only, `kiln
/// serve --inject-fault STAGE@STEP`).
pub fn start_with(
    cfg: &Config,
    model_path: Option<&Path>,
    observer: Arc<dyn Observer>,
    faults: &[crate::scheduler::fault::FaultInjection],
) -> Result<Loaded, SetupError> {
    let t0 = Instant::now();
    let path = model_path.unwrap_or(&cfg.model_path).to_path_buf();
    let file = GgufFile::open(&path).map_err(|source| SetupError::Open {
        path: path.clone(),
        source,
    })?;
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|source| SetupError::Tokenizer {
        path: path.clone(),
        source,
    })?;
    let chat_template = file
        .get_str("tokenizer.chat_template")
        .ok()
        .flatten()
        .map(str::to_string);
    let workers = cfg.workers.max(1);
    let cpus = crate::engine::cpus::budget();
    let threads = if cfg.threads == 0 {
        crate::engine::cpus::default_threads(workers)
    } else {
        cfg.threads
    };
    tracing::info!(
        usable_cores = cpus.cores,
        usable_cpus = cpus.logical,
        workers,
        threads_per_worker = threads,
        "CPU budget (affinity mask and cgroup quota)"
    );
    if threads * workers > cpus.logical {
        tracing::warn!(
            threads = threads * workers,
            usable_cpus = cpus.logical,
            "engine.threads x engine.workers is above the CPUs this process may use: the \
             worker teams will be descheduled mid-step (set engine.threads = 0 for the default)"
        );
    }
    let engine_err = |source| SetupError::Engine {
        path: path.clone(),
        source,
    };
    let model = Model::from_gguf(&file, threads).map_err(engine_err)?;
    let draft = load_draft(cfg, &path, &tokenizer, &model, threads)?;
    let quant = quant_name(&file);
    let model_pooling = model.desc().pooling;
    drop(file);

    let bs = DEFAULT_BLOCK_SIZE;
    // A page holds one block of a group of layers (every layer without sliding windows); one
    // position of the whole model takes a page's share times the number of groups.
    let kv_shape = model.kv_config(bs, bs).with_kv_type(cfg.kv_type);
    // A draft model's cache has as many pages as the model's: a page pair is the unit.
    let draft_block_bytes = draft.as_ref().map_or(0, |d| {
        d.kv_config(bs, bs)
            .with_kv_type(cfg.kv_type)
            .bytes_per_block() as u64
    });
    let block_bytes = kv_shape.bytes_per_block() as u64 + draft_block_bytes;
    let groups = kv_shape.layout().n_groups() as u64;
    let per_pos = (block_bytes * groups / bs as u64).max(1);
    let budget = cfg.kv_cache.bytes(per_pos, mem_total_bytes());
    // A recurrent model's per-sequence states come out of the same budget (one slot per
    // running sequence and two spare, per worker, and the prefix cache's checkpoint slots;
    // see the worker's cache).
    let state_slots = cfg.scheduler.max_num_seqs + 2 + checkpoint_slots(&limits(cfg));
    let state_bytes = model.state_shape(state_slots).bytes() as u64;
    let per_worker_blocks = (budget / workers as u64).saturating_sub(state_bytes) / block_bytes;
    if per_worker_blocks == 0 {
        return Err(SetupError::KvTooSmall {
            bytes: budget,
            workers,
            block_bytes,
        });
    }
    let kv_positions = (per_worker_blocks as usize).saturating_mul(bs);
    let how = match cfg.kv_cache {
        KvBudget::Auto => "auto: 10% of memory, at most 2 GiB",
        KvBudget::Bytes(_) => "engine.kv_cache bytes",
        KvBudget::Positions(_) => "engine.kv_cache positions",
    };
    tracing::info!(
        positions_per_worker = kv_positions,
        workers,
        mib_per_worker = (per_worker_blocks * block_bytes) >> 20,
        bytes_per_position = per_pos,
        block_size = bs,
        kv_type = %cfg.kv_type,
        recurrent_state_kib_per_worker = state_bytes >> 10,
        "KV cache ({how})"
    );
    let model_stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string());
    let tokenizer = Arc::new(tokenizer);
    let mut limits = limits(cfg);
    limits.attn_positions_per_token = attn_positions_per_token(model.desc());
    let engine = EngineHandle::start_with_draft(
        model,
        draft,
        Arc::clone(&tokenizer),
        EngineConfig {
            workers,
            threads,
            kv_positions,
            block_size: bs,
            kv_type: cfg.kv_type,
            limits,
            faults: faults.to_vec(),
            max_unread_events: MAX_UNREAD_EVENTS,
            pooling: cfg.pooling,
            tiers: tiers(cfg, workers, &path, bs),
            speculative: speculation(cfg),
        },
        observer,
    )
    .map_err(|source| SetupError::Engine {
        path: path.clone(),
        source,
    })?;
    let how = match (cfg.pooling, model_pooling) {
        (Some(_), _) => "configured",
        (None, Some(_)) => "the file's pooling_type",
        (None, None) => "default",
    };
    tracing::info!(pooling = %engine.info().pooling, "embeddings pooling ({how})");
    Ok(Loaded {
        engine,
        tokenizer,
        chat_template,
        model_stem,
        quant,
        kv_positions,
        kv_bytes_per_position: per_pos as usize,
        kv_bytes: (per_worker_blocks * block_bytes + state_bytes) * workers as u64,
        load_time: t0.elapsed(),
    })
}

/// The draft model `speculative.method = "draft"` asks for, loaded on a team like the
/// model's (each worker then runs it on its own team), after checking that it shares the
/// model's vocabulary (same size, the same bytes for every token id, the same logits width):
/// a draft speaking another vocabulary would propose meaningless ids.
fn load_draft(
    cfg: &Config,
    model_path: &Path,
    tokenizer: &Tokenizer,
    model: &Model,
    threads: usize,
) -> Result<Option<Model>, SetupError> {
    let Some(path) = cfg
        .speculative
        .draft_model
        .as_ref()
        .filter(|_| cfg.speculative.method == SpeculativeMethod::Draft)
    else {
        return Ok(None);
    };
    let file = GgufFile::open(path).map_err(|source| SetupError::Open {
        path: path.clone(),
        source,
    })?;
    let draft_tok = Tokenizer::from_gguf(&file).map_err(|source| SetupError::Tokenizer {
        path: path.clone(),
        source,
    })?;
    let mismatch = |why: String| SetupError::DraftVocab {
        draft: path.clone(),
        model: model_path.to_path_buf(),
        why,
    };
    if draft_tok.n_vocab() != tokenizer.n_vocab() {
        return Err(mismatch(format!(
            "{} tokens, the model has {}",
            draft_tok.n_vocab(),
            tokenizer.n_vocab()
        )));
    }
    if let Some(id) = (0..tokenizer.n_vocab() as u32)
        .find(|&id| draft_tok.token_to_piece(id) != tokenizer.token_to_piece(id))
    {
        return Err(mismatch(format!(
            "token {id} is {:?} in the draft, {:?} in the model",
            String::from_utf8_lossy(draft_tok.token_to_piece(id)),
            String::from_utf8_lossy(tokenizer.token_to_piece(id))
        )));
    }
    let draft = Model::from_gguf(&file, threads).map_err(|source| SetupError::Engine {
        path: path.clone(),
        source,
    })?;
    if draft.desc().n_vocab != model.desc().n_vocab {
        return Err(mismatch(format!(
            "logits over {} tokens, the model's over {}",
            draft.desc().n_vocab,
            model.desc().n_vocab
        )));
    }
    if draft.desc().has_recurrent() || model.desc().has_recurrent() {
        // A recurrent state cannot be rolled back past rejected guesses (`kv_cache::state`).
        return Err(SetupError::DraftRecurrent {
            draft: path.clone(),
            model: model_path.to_path_buf(),
        });
    }
    tracing::info!(draft = %path.display(), "speculative decoding with a draft model");
    Ok(Some(draft))
}

/// Attention's cost per cached position, relative to a token's matmuls, measured on this
/// engine: an attention multiply-add (f16 K/V, softmax, no int8) costs about this many
/// quantized matmul multiply-adds (the default model: 1.46 ms of matmuls per token, 1.66 us of
/// attention per token and cached position, on a Zen 5 core).
const ATTENTION_MAC_COST: f64 = 4.5;

/// Cached positions whose attention costs as much as one token's matmuls, for the scheduler's
/// prefill chunking (`Limits::attn_positions_per_token`): about 860 for the default model.
pub fn attn_positions_per_token(c: &crate::engine::ModelDesc) -> usize {
    // A token's FFN width: the dense one, or its experts' and the shared expert's (plus the
    // router's rows) in a mixture.
    let f = match c.moe {
        Some(m) => {
            m.n_expert_used * m.n_ff_exp + m.n_ff_shexp.unwrap_or(0) + m.n_expert.div_ceil(3)
        }
        None => c.n_ff,
    };
    let (d, q, kv, f) = (
        c.n_embd as f64,
        (c.n_head * c.head_dim) as f64,
        (c.n_head_kv * c.head_dim) as f64,
        f as f64,
    );
    let per_layer = d * (q + 2.0 * kv) + q * d + 3.0 * d * f;
    let matmul = c.n_layer as f64 * per_layer + c.n_vocab as f64 * d;
    let attention = 2.0 * c.n_kv_layers().max(1) as f64 * q;
    ((matmul / (attention * ATTENTION_MAC_COST)) as usize).max(16)
}

/// The file's quantization as llama.cpp names its `general.file_type` values, when known.
fn quant_name(file: &GgufFile) -> String {
    let ftype = file.get_u32("general.file_type").ok().flatten();
    let name = match ftype {
        Some(0) => "F32",
        Some(1) => "F16",
        Some(2) => "Q4_0",
        Some(3) => "Q4_1",
        Some(7) => "Q8_0",
        Some(8) => "Q5_0",
        Some(9) => "Q5_1",
        Some(10) => "Q2_K",
        Some(11) => "Q3_K_S",
        Some(12) => "Q3_K_M",
        Some(13) => "Q3_K_L",
        Some(14) => "Q4_K_S",
        Some(15) => "Q4_K_M",
        Some(16) => "Q5_K_S",
        Some(17) => "Q5_K_M",
        Some(18) => "Q6_K",
        Some(32) => "BF16",
        _ => "unknown",
    };
    name.to_string()
}
