//! Models: the description of an architecture the forward pass reads ([`desc`]), the loaded
//! model ([`loaded`]), the one forward pass every architecture runs ([`forward`]) and weight
//! loading ([`load`]). The supported architectures are listed in `engine::hparams::ARCHS`.

mod causal_conv;
mod deltanet;
pub mod desc;
mod forward;
mod head_width;
mod load;
pub mod loaded;
mod mamba2;
mod per_layer_embd;
mod shortconv;

pub use desc::{Arch, ModelDesc};
pub use loaded::Model;
#[cfg(feature = "trace")]
pub use loaded::TraceHook;
