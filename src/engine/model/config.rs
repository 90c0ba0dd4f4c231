//! The shape of a llama-family model as the forward pass uses it, derived from the file's
//! [`HParams`] (which already apply the per-architecture rules: RoPE ordering, biases).

use crate::engine::error::EngineError;
pub use crate::engine::hparams::Arch;
use crate::engine::hparams::{HParams, RopeScalingKind, RopeStyle};
use crate::engine::ops::{RopeKind, RopeTable};
use crate::gguf::GgufFile;

/// Everything the forward pass needs to know about a model's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub arch: Arch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    /// Training context length: positions at or beyond it are refused.
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    /// Whether Q, K and V have bias vectors (qwen2).
    pub qkv_bias: bool,
    pub rope: RopeTable,
}

impl LlamaConfig {
    /// The forward-pass shape of `hp`. YaRN scaling is refused (not implemented).
    pub fn from_hparams(hp: &HParams) -> Result<LlamaConfig, EngineError> {
        let freq_scale = match hp.rope_scaling.kind {
            RopeScalingKind::None => 1.0,
            RopeScalingKind::Linear if hp.rope_scaling.factor > 0.0 => 1.0 / hp.rope_scaling.factor,
            RopeScalingKind::Linear => 1.0,
            RopeScalingKind::Yarn => {
                return Err(EngineError::BadHParam {
                    key: "rope.scaling.type",
                    message: "yarn scaling is not supported (none, linear)".to_string(),
                })
            }
        };
        let rope_dim = hp.rope_dim as usize;
        if rope_dim == 0 || !rope_dim.is_multiple_of(2) || rope_dim > hp.head_dim as usize {
            return Err(EngineError::BadHParam {
                key: "rope.dimension_count",
                message: format!(
                    "{rope_dim} must be even and at most head_dim {}",
                    hp.head_dim
                ),
            });
        }
        Ok(LlamaConfig {
            arch: hp.arch,
            n_layer: hp.n_layer as usize,
            n_embd: hp.n_embd as usize,
            n_head: hp.n_head as usize,
            n_head_kv: hp.n_head_kv as usize,
            head_dim: hp.head_dim as usize,
            n_ff: hp.n_ff as usize,
            n_vocab: hp.n_vocab as usize,
            n_ctx_train: hp.n_ctx_train as usize,
            rms_eps: hp.rms_eps,
            qkv_bias: hp.has_qkv_bias,
            rope: RopeTable {
                kind: match hp.rope_style {
                    RopeStyle::Normal => RopeKind::Normal,
                    RopeStyle::NeoX => RopeKind::NeoX,
                },
                n_dims: rope_dim,
                freq_base: hp.rope_freq_base,
                freq_scale,
                freq_factors: None,
            },
        })
    }

    /// Reads the hyper-parameters of `file` and derives the shape.
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, EngineError> {
        LlamaConfig::from_hparams(&HParams::from_gguf(file)?)
    }
}
