//! kiln: a CPU-native, OpenAI-compatible LLM inference server.
//!
//! Layers depend one way: `http -> scheduler -> engine -> kernels`.

pub mod config;
pub mod engine;
pub mod kernels;
pub mod scheduler;
