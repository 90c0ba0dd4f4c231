//! Model architectures. kiln runs the llama family (llama, mistral-style llama, qwen2).

pub mod config;
pub mod llama;
mod load;

pub use config::{Arch, LlamaConfig};
pub use llama::LlamaModel;
#[cfg(feature = "trace")]
pub use llama::TraceHook;
