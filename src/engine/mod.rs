//! The CPU engine: weights from a GGUF file, the llama forward pass over ragged batches, the paged
//! KV cache, attention and the worker team.

pub mod attention;
pub mod batch;
pub mod cpus;
pub mod error;
pub mod hparams;
pub mod kv_cache;
pub mod line_buf;
pub mod matmul;
pub mod model;
pub mod moe;
pub mod ops;
pub mod pooling;
pub mod quantize;
pub mod runner;
pub mod scratch;
pub mod synth;
pub mod team;
pub mod token_choice;
pub mod warm;
pub mod weights;

pub use batch::{Logits, LogitsWanted, SeqInput};
pub use error::EngineError;
pub use model::{Model, ModelDesc};
pub use scratch::{BatchLimits, ForwardScratch};
