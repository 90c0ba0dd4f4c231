//! kiln: a CPU-native, OpenAI-compatible LLM inference server.
//!
//! Layers depend one way: `cli -> server -> scheduler -> engine -> kernels`, with `gguf`,
//! `tokenizer`, `chat_template`, `config` and `random` beside them (used by the engine and the
//! server alike; they import nothing from the layers).

#[macro_use]
mod invariant;

pub mod chat_template;
pub mod config;
pub mod engine;
pub mod gguf;
pub mod kernels;
pub mod metrics;
pub mod random;
pub mod scheduler;
pub mod server;
pub mod structured;
pub mod tokenizer;

#[cfg(test)]
pub(crate) mod test_skip;
