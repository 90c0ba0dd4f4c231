//! Models: the description of an architecture the forward pass reads ([`desc`]), the loaded
//! model ([`loaded`]), the one forward pass every architecture runs ([`forward`]) and weight
//! loading ([`load`]). The supported architectures are listed in `engine::hparams::ARCHS`.

pub mod desc;
mod forward;
mod load;
pub mod loaded;
mod mamba2;
mod shortconv;

pub use desc::{Arch, ModelDesc};
pub use loaded::Model;
#[cfg(feature = "trace")]
pub use loaded::TraceHook;
