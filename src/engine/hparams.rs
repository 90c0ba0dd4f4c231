//! The model description: architecture hyper-parameters read from GGUF metadata and checked
//! against each other and against the tensor shapes, so the forward pass can trust them.
//!
//! Keys are `{arch}.…` as written by llama.cpp's converter. Mistral-style files use arch
//! `llama`; Qwen2 differs by q/k/v biases and NeoX-style (half-split) RoPE.

use crate::gguf::{GgufError, GgufFile};
use std::fmt;

/// Most transformer blocks accepted (the largest public models have ~130).
pub const MAX_LAYERS: u32 = 1024;

/// Supported architectures (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            _ => None,
        }
    }

    /// The key prefix and `general.architecture` value.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How RoPE pairs dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` (llama.cpp `LLAMA_ROPE_TYPE_NORM`; llama, mistral).
    Normal,
    /// Halves `(i, i + rope_dim/2)` (llama.cpp `LLAMA_ROPE_TYPE_NEOX`; qwen2).
    NeoX,
}

/// `{arch}.rope.scaling.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeScalingKind {
    None,
    Linear,
    Yarn,
}

/// RoPE context scaling: positions are divided by `factor` (linear) or YaRN-interpolated.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RopeScaling {
    pub kind: RopeScalingKind,
    /// 1.0 when `kind` is `None`.
    pub factor: f32,
    /// `{arch}.rope.scaling.original_context_length`, if given.
    pub original_ctx: Option<u32>,
}

/// The hyper-parameters of a llama-family model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HParams {
    pub arch: Arch,
    /// Transformer blocks.
    pub n_layer: u32,
    /// Embedding (residual stream) width.
    pub n_embd: u32,
    /// Feed-forward hidden width.
    pub n_ff: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (grouped-query attention when < `n_head`; divides `n_head`).
    pub n_head_kv: u32,
    /// Width of one head (`{arch}.attention.key_length`, default `n_embd / n_head`).
    pub head_dim: u32,
    pub rope_freq_base: f32,
    /// Rotated dimensions per head (even, <= `head_dim`).
    pub rope_dim: u32,
    pub rope_scaling: RopeScaling,
    pub rope_style: RopeStyle,
    pub rms_eps: f32,
    /// Context length the model was trained with.
    pub n_ctx_train: u32,
    pub n_vocab: u32,
    /// No `output.weight`: the output projection reuses `token_embd.weight`.
    pub tied_embeddings: bool,
    /// q/k/v projections have biases (`blk.N.attn_q.bias`; qwen2).
    pub has_qkv_bias: bool,
}

/// Why a file's model description is unusable.
#[derive(Debug, thiserror::Error)]
pub enum HParamsError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("missing metadata key {key}")]
    Missing { key: String },
    #[error("unsupported architecture {arch:?} (kiln runs llama and qwen2)")]
    UnsupportedArch { arch: String },
    #[error("metadata key {key} = {value} is invalid: {why}")]
    Invalid {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("inconsistent model description: {0}")]
    Inconsistent(String),
    #[error("missing tensor {0}")]
    MissingTensor(String),
}

/// Reads `{arch}.*` keys with the key name in every error.
struct Keys<'a> {
    f: &'a GgufFile,
    arch: Arch,
}

impl Keys<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn u32_opt(&self, suffix: &str) -> Result<Option<u32>, HParamsError> {
        Ok(self.f.get_u32(&self.key(suffix))?)
    }

    /// A required positive integer.
    fn u32_pos(&self, suffix: &str) -> Result<u32, HParamsError> {
        let key = self.key(suffix);
        match self.f.get_u32(&key)? {
            None => Err(HParamsError::Missing { key }),
            Some(0) => Err(invalid(key, 0, "must be positive")),
            Some(v) => Ok(v),
        }
    }

    /// A positive finite float, `default` when absent (`None` = required).
    fn f32_pos(&self, suffix: &str, default: Option<f32>) -> Result<f32, HParamsError> {
        let key = self.key(suffix);
        let v = match (self.f.get_f32(&key)?, default) {
            (Some(v), _) => v,
            (None, Some(d)) => return Ok(d),
            (None, None) => return Err(HParamsError::Missing { key }),
        };
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(invalid(key, v, "must be a positive finite number"))
        }
    }
}

fn invalid(key: String, value: impl fmt::Display, why: &'static str) -> HParamsError {
    HParamsError::Invalid {
        key,
        value: value.to_string(),
        why,
    }
}

fn inconsistent(msg: String) -> HParamsError {
    HParamsError::Inconsistent(msg)
}

impl HParams {
    /// Reads and cross-checks the description of the model in `f`.
    pub fn from_gguf(f: &GgufFile) -> Result<HParams, HParamsError> {
        let arch_key = "general.architecture";
        let arch_name = f.get_str(arch_key)?.ok_or(HParamsError::Missing {
            key: arch_key.to_string(),
        })?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| HParamsError::UnsupportedArch {
            arch: arch_name.to_string(),
        })?;
        let k = Keys { f, arch };

        let n_layer = k.u32_pos("block_count")?;
        if n_layer > MAX_LAYERS {
            return Err(invalid(k.key("block_count"), n_layer, "above 1024"));
        }
        let n_embd = k.u32_pos("embedding_length")?;
        let n_ff = k.u32_pos("feed_forward_length")?;
        let n_head = k.u32_pos("attention.head_count")?;
        let n_head_kv = match k.u32_opt("attention.head_count_kv")? {
            None => n_head,
            Some(0) => {
                return Err(invalid(
                    k.key("attention.head_count_kv"),
                    0,
                    "must be positive",
                ))
            }
            Some(v) => v,
        };
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(inconsistent(format!(
                "{n_head} query heads are not a multiple of {n_head_kv} kv heads"
            )));
        }
        let head_dim = match k.u32_opt("attention.key_length")? {
            Some(0) => {
                return Err(invalid(
                    k.key("attention.key_length"),
                    0,
                    "must be positive",
                ))
            }
            Some(d) => d,
            None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
            None => {
                return Err(inconsistent(format!(
                    "embedding length {n_embd} is not a multiple of {n_head} heads"
                )))
            }
        };
        if let Some(v) = k.u32_opt("attention.value_length")? {
            if v != head_dim {
                return Err(inconsistent(format!(
                    "value head width {v} differs from key head width {head_dim}"
                )));
            }
        }
        let rope_dim = k.u32_opt("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dim == 0 || rope_dim > head_dim || !rope_dim.is_multiple_of(2) {
            return Err(invalid(
                k.key("rope.dimension_count"),
                rope_dim,
                "must be even and in 1..=head_dim",
            ));
        }
        let rope_freq_base = k.f32_pos("rope.freq_base", Some(10_000.0))?;
        let rope_scaling = rope_scaling(&k)?;
        let rms_eps = k.f32_pos("attention.layer_norm_rms_epsilon", None)?;
        let n_ctx_train = k.u32_pos("context_length")?;

        let n_vocab = vocab_size(&k)?;
        let hp = HParams {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            rope_freq_base,
            rope_dim,
            rope_scaling,
            rope_style: match arch {
                Arch::Llama => RopeStyle::Normal,
                Arch::Qwen2 => RopeStyle::NeoX,
            },
            rms_eps,
            n_ctx_train,
            n_vocab,
            tied_embeddings: f.tensor("output.weight").is_none(),
            has_qkv_bias: f.tensor("blk.0.attn_q.bias").is_some(),
        };
        hp.check_tensors(f)?;
        Ok(hp)
    }

    /// Query width `n_head * head_dim`.
    pub fn q_dim(&self) -> u64 {
        u64::from(self.n_head) * u64::from(self.head_dim)
    }

    /// Key/value width `n_head_kv * head_dim`.
    pub fn kv_dim(&self) -> u64 {
        u64::from(self.n_head_kv) * u64::from(self.head_dim)
    }

    /// Checks the shapes of the embedding, output and first block's tensors against the
    /// description, and that blocks `0..n_layer` exist and no block beyond.
    fn check_tensors(&self, f: &GgufFile) -> Result<(), HParamsError> {
        let (e, v, ff) = (
            u64::from(self.n_embd),
            u64::from(self.n_vocab),
            u64::from(self.n_ff),
        );
        let expect = |name: &str, shape: &[u64], required: bool| -> Result<(), HParamsError> {
            match f.tensor(name) {
                None if required => Err(HParamsError::MissingTensor(name.to_string())),
                None => Ok(()),
                Some(t) if t.shape == shape => Ok(()),
                Some(t) => Err(inconsistent(format!(
                    "tensor {name} has shape {:?}, the metadata implies {shape:?}",
                    t.shape
                ))),
            }
        };
        expect("token_embd.weight", &[e, v], true)?;
        expect("output.weight", &[e, v], false)?;
        expect("output_norm.weight", &[e], true)?;
        let last = self.n_layer - 1;
        expect(&format!("blk.{last}.attn_norm.weight"), &[e], true)?;
        expect("blk.0.attn_q.weight", &[e, self.q_dim()], true)?;
        expect("blk.0.attn_k.weight", &[e, self.kv_dim()], true)?;
        expect("blk.0.attn_v.weight", &[e, self.kv_dim()], true)?;
        expect("blk.0.attn_output.weight", &[self.q_dim(), e], true)?;
        expect("blk.0.ffn_gate.weight", &[e, ff], true)?;
        expect("blk.0.ffn_up.weight", &[e, ff], true)?;
        expect("blk.0.ffn_down.weight", &[ff, e], true)?;
        if self.has_qkv_bias {
            expect("blk.0.attn_q.bias", &[self.q_dim()], true)?;
            expect("blk.0.attn_k.bias", &[self.kv_dim()], true)?;
            expect("blk.0.attn_v.bias", &[self.kv_dim()], true)?;
        }
        let beyond = format!("blk.{}.", self.n_layer);
        if let Some(t) = f.tensors().iter().find(|t| t.name.starts_with(&beyond)) {
            return Err(inconsistent(format!(
                "tensor {} lies beyond block_count {}",
                t.name, self.n_layer
            )));
        }
        Ok(())
    }
}

fn rope_scaling(k: &Keys<'_>) -> Result<RopeScaling, HParamsError> {
    let type_key = k.key("rope.scaling.type");
    let kind = match k.f.get_str(&type_key)? {
        None | Some("none") => RopeScalingKind::None,
        Some("linear") => RopeScalingKind::Linear,
        Some("yarn") => RopeScalingKind::Yarn,
        Some(other) => {
            return Err(invalid(type_key, other, "kiln knows none, linear and yarn"));
        }
    };
    // Older files carry only `rope.scale_linear`.
    let legacy = k.f.get_f32(&k.key("rope.scale_linear"))?;
    let factor = match (kind, legacy) {
        (RopeScalingKind::None, Some(f)) if f != 1.0 => {
            return Ok(RopeScaling {
                kind: RopeScalingKind::Linear,
                factor: k.f32_pos("rope.scale_linear", None)?,
                original_ctx: None,
            })
        }
        (RopeScalingKind::None, _) => 1.0,
        _ => k.f32_pos("rope.scaling.factor", Some(1.0))?,
    };
    Ok(RopeScaling {
        kind,
        factor,
        original_ctx: k.u32_opt("rope.scaling.original_context_length")?,
    })
}

/// `{arch}.vocab_size`, else the token list's length, else the embedding's row count.
fn vocab_size(k: &Keys<'_>) -> Result<u32, HParamsError> {
    let key = k.key("vocab_size");
    if let Some(v) = k.f.get_u32(&key)? {
        return if v == 0 {
            Err(invalid(key, 0, "must be positive"))
        } else {
            Ok(v)
        };
    }
    if let Some(tokens) = k.f.get_str_array("tokenizer.ggml.tokens")? {
        return u32::try_from(tokens.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| invalid("tokenizer.ggml.tokens".into(), tokens.len(), "bad length"));
    }
    let t =
        k.f.tensor("token_embd.weight")
            .ok_or_else(|| HParamsError::MissingTensor("token_embd.weight".into()))?;
    t.shape
        .get(1)
        .and_then(|&n| u32::try_from(n).ok())
        .ok_or_else(|| inconsistent(format!("token_embd.weight has shape {:?}", t.shape)))
}

impl fmt::Display for HParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "architecture      {}", self.arch)?;
        writeln!(f, "blocks            {}", self.n_layer)?;
        writeln!(f, "embedding         {}", self.n_embd)?;
        writeln!(f, "feed-forward      {}", self.n_ff)?;
        writeln!(
            f,
            "heads             {} query, {} kv, head dim {}",
            self.n_head, self.n_head_kv, self.head_dim
        )?;
        writeln!(
            f,
            "rope              base {}, dims {}, style {:?}, scaling {:?} x{}",
            self.rope_freq_base,
            self.rope_dim,
            self.rope_style,
            self.rope_scaling.kind,
            self.rope_scaling.factor
        )?;
        writeln!(f, "rms epsilon       {:e}", self.rms_eps)?;
        writeln!(f, "context (train)   {}", self.n_ctx_train)?;
        writeln!(f, "vocabulary        {}", self.n_vocab)?;
        writeln!(f, "tied embeddings   {}", self.tied_embeddings)?;
        write!(f, "qkv bias          {}", self.has_qkv_bias)
    }
}
