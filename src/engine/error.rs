//! Errors of the forward pass and model loading.

use crate::kernels::DType;

/// What can go wrong loading a model or running a batch. Bad input is a named error, never a
/// panic.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
    #[error(transparent)]
    HParams(#[from] crate::engine::hparams::HParamsError),
    #[error(transparent)]
    Kv(#[from] crate::engine::kv_cache::KvCacheError),
    #[error("model hyper-parameter {key}: {message}")]
    BadHParam { key: &'static str, message: String },
    #[error("tensor {0} is missing from the model file")]
    MissingTensor(String),
    #[error("tensor {name} has shape {got:?}, expected {want:?}")]
    BadShape {
        name: String,
        got: Vec<u64>,
        want: Vec<u64>,
    },
    #[error("tensor {name} has type {dtype}, which kiln has no {what} kernel for")]
    UnsupportedDType {
        name: String,
        dtype: DType,
        what: &'static str,
    },
    #[error("worker team: {0}")]
    Team(String),
    #[error("empty batch or a sequence without tokens")]
    EmptyInput,
    #[error("batch of {got} {what} exceeds the engine's limit of {max}")]
    BatchTooLarge {
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    BadToken { id: u32, n_vocab: usize },
    #[error("position {pos} is beyond the model's context of {n_ctx}")]
    ContextOverflow { pos: usize, n_ctx: usize },
    #[error("the KV block table holds {capacity} positions; the batch writes up to {needed}")]
    KvNotReserved { capacity: usize, needed: usize },
    #[error(
        "the model has recurrent layers but the block table holds no state slot (reserve it first)"
    )]
    StateNotReserved,
    #[error(
        "the sequence's recurrent state covers positions 0..{covered}; a batch cannot resume it at {start} (no rollback or prefix reuse for recurrent layers)"
    )]
    StateMismatch { covered: usize, start: usize },
}
