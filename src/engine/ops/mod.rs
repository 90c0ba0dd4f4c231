//! Row-wise element operations of the forward pass. Each works on one token's row, so a
//! token's result never depends on which other tokens share the batch (batch invariance).

pub mod rmsnorm;
pub mod rope;
pub mod softmax;
pub mod swiglu;

pub use rmsnorm::rms_norm;
pub use rope::{RopeKind, RopeTable};
pub use softmax::log_softmax_at;
pub use swiglu::swiglu;
