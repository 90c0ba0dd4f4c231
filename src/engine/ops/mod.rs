//! Row-wise element operations of the forward pass. Each works on one token's row, so a
//! token's result never depends on which other tokens share the batch (batch invariance).

pub mod gelu;
pub mod rmsnorm;
pub mod rope;
pub mod silu;
pub mod softmax;
pub mod swiglu;
pub mod swiglu_oai;

pub use gelu::geglu;
pub use rmsnorm::{rms_norm, rms_norm_in_place, rms_norm_unweighted_in_place};
pub use rope::{yarn_corr_dims, RopeKind, RopeTable};
pub use softmax::log_softmax_at;
pub use swiglu::swiglu;
pub use swiglu_oai::swiglu_oai;

/// `x += y` element by element (ggml_add of a broadcast row: biases).
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x *= s` (ggml_scale).
pub fn scale_in_place(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

/// `x = cap * tanh(x * (1 / cap))`: llama.cpp's logit softcapping (ggml_scale, ggml_tanh,
/// ggml_scale), with the reciprocal rounded to f32 first as it does.
pub fn softcap_in_place(x: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for v in x {
        *v = (*v * inv).tanh() * cap;
    }
}
