//! Models: the description of an architecture the forward pass reads ([`config`]), the loaded
//! model ([`llama`]), the one forward pass every architecture runs ([`forward`]) and weight
//! loading ([`load`]). The supported architectures are listed in `engine::hparams::ARCHS`.

pub mod config;
mod forward;
pub mod llama;
mod load;

pub use config::{Arch, LlamaConfig};
pub use llama::LlamaModel;
#[cfg(feature = "trace")]
pub use llama::TraceHook;
