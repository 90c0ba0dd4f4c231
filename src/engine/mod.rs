//! The CPU engine: GGUF files over mmap, tokenizer, chat templates, the llama forward pass.

pub mod attention;
pub mod gguf;
pub mod hparams;
pub mod kv_cache;
pub mod tokenizer;
