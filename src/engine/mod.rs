//! The CPU engine: GGUF files over mmap, tokenizer, chat templates, the llama forward pass.

pub mod attention;
pub mod batch;
pub mod chat_template;
pub mod error;
pub mod gguf;
pub mod hparams;
pub mod kv_cache;
pub mod matmul;
pub mod model;
pub mod ops;
pub mod pool;
pub mod quantize;
pub mod runner;
pub mod sampling;
pub mod scratch;
pub mod tokenizer;
pub mod weights;

pub use batch::{Logits, LogitsWanted, SeqInput};
pub use error::EngineError;
pub use model::{LlamaConfig, LlamaModel};
pub use scratch::{BatchLimits, Scratch};
