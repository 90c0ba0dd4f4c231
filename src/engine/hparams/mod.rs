//! The model description: architecture hyper-parameters read from GGUF metadata and checked
//! against each other and against the tensor shapes, so the forward pass can trust them.
//!
//! Keys are `{arch}.…` as written by llama.cpp's converter, and so are the defaults: where a key
//! is absent, the value llama.cpp uses (`llama-model.cpp`, `models/*.cpp`). How each family
//! differs from llama is one row of [`arch::Arch::rules`]; this module turns those rules and the
//! file's keys into the plain values the one forward pass reads (scales, caps, windows, norms).

mod arch;
mod deltanet;
mod gemma4;
mod mamba2;
mod moe;
mod rope;
mod shortconv;
mod tensors;
mod vocab;

pub use arch::{Arch, ArchRules, QueryScale, RopeStyle, SwaRule, ARCHS};
pub use deltanet::GatedDeltaNet;
pub use gemma4::Gemma4;
pub use mamba2::Mamba2;
pub use moe::{Gating, MoeParams, MoeRule, SharedRule, MAX_EXPERTS};
pub use rope::{RopeScaling, RopeScalingKind};
pub use shortconv::ShortConv;
pub(crate) use tensors::ExpectTensor;

use crate::engine::pooling::PoolingType;
use crate::gguf::{GgufError, GgufFile};
use crate::gguf::{MetaArray, MetaValue};
use serde::Serialize;
use std::fmt;

/// Most transformer blocks accepted (the largest public models have ~130).
pub const MAX_LAYERS: u32 = 1024;

/// The gated activation of the feed-forward block: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Activation {
    /// `silu(x) = x / (1 + e^-x)` (llama.cpp's SwiGLU).
    Silu,
    /// Tanh-approximated GELU through ggml's f16 table (llama.cpp's GEGLU).
    Gelu,
    /// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`, alpha 1.702, limit 7):
    /// `x = min(gate, 7)`, `y = clamp(up, -7, 7)`, `x / (1 + e^(-1.702 x)) * (y + 1)`.
    SwigluOai,
}

impl Activation {
    /// "SiLU", "GELU", "clamped SwiGLU (gpt-oss)".
    pub fn name(self) -> &'static str {
        match self {
            Activation::Silu => "SiLU",
            Activation::Gelu => "GELU",
            Activation::SwigluOai => "clamped SwiGLU (alpha 1.702, limit 7)",
        }
    }
}

/// Sliding-window attention: which layers are local and how far back they see.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlidingWindow {
    /// A local layer's query at position `p` attends to positions `p - size + 1 ..= p`.
    pub size: u32,
    /// Per layer: true when local (windowed), false when global (full attention).
    pub local: Vec<bool>,
    /// RoPE base of the local layers (`rope.freq_base_swa`).
    pub rope_freq_base: f32,
    /// The local layers keep the global RoPE frequency scale (gpt-oss); otherwise it is 1.
    pub rope_scaled: bool,
}

impl SlidingWindow {
    /// Local layers.
    pub fn n_local(&self) -> usize {
        self.local.iter().filter(|&&l| l).count()
    }
}

/// Mistral3's position-dependent query temperature: queries at position `p` are multiplied by
/// `ln(floor(p / floor_len) + 1) * scale + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AttnTemperature {
    pub scale: f32,
    pub floor_len: u32,
}

/// The hyper-parameters of a model, and how its forward pass differs from llama's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HParams {
    pub arch: Arch,
    /// Transformer blocks.
    pub n_layer: u32,
    /// Embedding (residual stream) width.
    pub n_embd: u32,
    /// Feed-forward hidden width (of the dense FFN; see `moe` for the experts'): the widest.
    pub n_ff: u32,
    /// Each layer's dense FFN width (all `n_ff` unless the file gives one per layer).
    pub n_ff_layers: Vec<u32>,
    /// The mixture of experts that is every layer's FFN, for the families that have one.
    pub moe: Option<MoeParams>,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (grouped-query attention when < `n_head`; divides `n_head`).
    pub n_head_kv: u32,
    /// Width of one head (`{arch}.attention.key_length`, default `n_embd / n_head`).
    pub head_dim: u32,
    pub rope_freq_base: f32,
    /// Rotated dimensions per head (even, <= `head_dim`); the rest pass through unrotated.
    pub rope_dim: u32,
    pub rope_scaling: RopeScaling,
    pub rope_style: RopeStyle,
    /// Per layer: true when RoPE is applied (false on SmolLM3's NoPE layers).
    pub rope_layers: Vec<bool>,
    pub rms_eps: f32,
    /// Context length the model was trained with.
    pub n_ctx_train: u32,
    pub n_vocab: u32,
    /// The output projection reuses `token_embd.weight` (no `output.weight`, or the family
    /// always ties them).
    pub tied_embeddings: bool,
    /// q/k/v projections have biases (`blk.N.attn_q.bias` or `attn_qkv.bias`; qwen2).
    pub has_qkv_bias: bool,
    /// Every attention head has a learned sink logit (`blk.N.attn_sinks.weight`; gpt-oss).
    pub attn_sinks: bool,
    /// Q, K and V come from one fused matrix `attn_qkv.weight` (phi3), split at load.
    pub fused_qkv: bool,
    /// Gate and up come from one fused matrix `ffn_up.weight` (phi3), split at load.
    pub fused_gate_up: bool,
    /// Per-head RMSNorm of q and k before RoPE.
    pub qk_norm: bool,
    /// The q/k norms span the whole q and k rows (olmoe), not one head.
    pub qk_norm_full: bool,
    /// RMSNorm of the attention and FFN outputs before the residual adds.
    pub post_norms: bool,
    pub activation: Activation,
    /// Token embeddings are multiplied by this (gemma: `sqrt(n_embd)`; granite).
    pub embd_scale: Option<f32>,
    /// Queries are multiplied by this after RoPE (gemma, phi3); attention then scales by 1.
    pub q_scale: Option<f32>,
    /// Attention's score scale (`1/sqrt(head_dim)`, `attention.scale`, or 1 after `q_scale`).
    pub kq_scale: f32,
    /// Scores become `cap * tanh(score / cap)` (gemma2).
    pub attn_softcap: Option<f32>,
    /// Logits become `cap * tanh(logit / cap)` (gemma2, gemma3 when set).
    pub final_softcap: Option<f32>,
    /// Attention and FFN outputs are multiplied by this before their residual adds (granite).
    pub residual_scale: Option<f32>,
    /// Logits are multiplied by `1 / logit_scale` (granite).
    pub logit_scale: Option<f32>,
    pub attn_temperature: Option<AttnTemperature>,
    pub sliding_window: Option<SlidingWindow>,
    /// How the file says an embedding pools its positions (`{arch}.pooling_type`); `None`
    /// when the key is absent (or llama.cpp's "unspecified", -1).
    pub pooling: Option<PoolingType>,
    /// LFM2's short-convolution layers, for the families that have them.
    pub shortconv: Option<ShortConv>,
    /// Qwen3.5's gated DeltaNet layers (the others run gated attention).
    pub deltanet: Option<GatedDeltaNet>,
    /// Gemma 4's per-layer embeddings, local head widths and shared K/V.
    pub gemma4: Option<Gemma4>,
    /// Granite 4.0-H's Mamba2 layers, for the families that have them.
    pub mamba2: Option<Mamba2>,
}

/// Why a file's model description is unusable.
#[derive(Debug, thiserror::Error)]
pub enum HParamsError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("missing metadata key {key}")]
    Missing { key: String },
    #[error("unsupported architecture {arch:?} (kiln runs {supported})")]
    UnsupportedArch { arch: String, supported: String },
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
pub(crate) struct Keys<'a> {
    pub f: &'a GgufFile,
    pub arch: Arch,
}

impl Keys<'_> {
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    pub fn u32_opt(&self, suffix: &str) -> Result<Option<u32>, HParamsError> {
        Ok(self.f.get_u32(&self.key(suffix))?)
    }

    /// A required positive integer.
    pub fn u32_pos(&self, suffix: &str) -> Result<u32, HParamsError> {
        let key = self.key(suffix);
        match self.f.get_u32(&key)? {
            None => Err(HParamsError::Missing { key }),
            Some(0) => Err(invalid(key, 0, "must be positive")),
            Some(v) => Ok(v),
        }
    }

    /// A positive finite float, `default` when absent (`None` = required).
    pub fn f32_pos(&self, suffix: &str, default: Option<f32>) -> Result<f32, HParamsError> {
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

    /// A finite float or `None`; llama.cpp treats 0 as "not set" for these multipliers.
    pub fn f32_nonzero(&self, suffix: &str) -> Result<Option<f32>, HParamsError> {
        let key = self.key(suffix);
        match self.f.get_f32(&key)? {
            None => Ok(None),
            Some(0.0) => Ok(None),
            Some(v) if v.is_finite() => Ok(Some(v)),
            Some(v) => Err(invalid(key, v, "must be a finite number")),
        }
    }
}

pub(crate) fn invalid(key: String, value: impl fmt::Display, why: &'static str) -> HParamsError {
    HParamsError::Invalid {
        key,
        value: value.to_string(),
        why,
    }
}

pub(crate) fn inconsistent(msg: String) -> HParamsError {
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
            supported: Arch::supported_list(),
        })?;
        let rules = arch.rules();
        let k = Keys { f, arch };

        let n_layer = k.u32_pos("block_count")?;
        if n_layer > MAX_LAYERS {
            return Err(invalid(k.key("block_count"), n_layer, "above 1024"));
        }
        let n_embd = k.u32_pos("embedding_length")?;
        // A family whose every FFN is a mixture with its own widths may omit the dense width
        // (llama.cpp reads it as optional; Qwen3.5's MoE configs have none).
        let moe_only = rules
            .moe
            .is_some_and(|m| m.reads_expert_width && !m.optional);
        let (n_ff, n_ff_layers) = if moe_only && k.u32_opt("feed_forward_length")?.is_none() {
            (0, vec![0; n_layer as usize])
        } else {
            gemma4::ff_lengths(&k, n_layer)?
        };
        let n_head = k.u32_pos("attention.head_count")?;
        let (n_head_kv, shortconv, mamba2) = mamba2::mixers(&k, &rules, n_layer, n_head)?;
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
        let deltanet = deltanet::read(&k, rules.gated_delta_net, n_layer, rope_dim)?;
        let rope_freq_base = k.f32_pos("rope.freq_base", Some(10_000.0))?;
        let rope_scaling = RopeScaling::from_keys(&k, rules.mistral3_keys)?;
        let rms_eps = k.f32_pos("attention.layer_norm_rms_epsilon", None)?;
        let n_ctx_train = k.u32_pos("context_length")?;
        let n_vocab = vocab::vocab_size(&k)?;

        // RoPE on or off per layer.
        let rope_on = if rules.granite_scales {
            f.get_bool(&k.key("rope.scaling.finetuned"))?
                .unwrap_or(true)
        } else {
            true
        };
        let rope_layers = (0..n_layer)
            .map(|il| rope_on && rules.nope_every.is_none_or(|n| (il + 1) % n != 0))
            .collect();

        let q_scale = query_prescale(rules.query_scale, arch, n_layer, n_embd, n_head, head_dim);
        let kq_scale = match (q_scale, rules.reads_attention_scale) {
            (Some(_), _) => 1.0,
            _ if rules.query_scale == QueryScale::Unit => 1.0,
            (None, true) => k
                .f32_nonzero("attention.scale")?
                .unwrap_or(1.0 / (head_dim as f32).sqrt()),
            (None, false) => 1.0 / (head_dim as f32).sqrt(),
        };
        let attn_softcap = match rules.attn_softcap_default {
            Some(d) => Some(k.f32_pos("attn_logit_softcapping", Some(d))?),
            None => None,
        };
        let final_softcap = match rules.final_softcap_default {
            Some(d) => Some(k.f32_pos("final_logit_softcapping", Some(d))?),
            None => k.f32_nonzero("final_logit_softcapping")?,
        };
        let (embd_scale, residual_scale, logit_scale) = if rules.granite_scales {
            let logit = k.f32_nonzero("logit_scale")?.ok_or(HParamsError::Missing {
                key: k.key("logit_scale"),
            })?;
            (
                k.f32_nonzero("embedding_scale")?,
                k.f32_nonzero("residual_scale")?,
                Some(logit),
            )
        } else if rules.embd_scale_sqrt {
            (Some((n_embd as f32).sqrt()), None, None)
        } else {
            (None, None, None)
        };
        let attn_temperature = if rules.mistral3_keys {
            k.f32_nonzero("attention.temperature_scale")?
                .map(|scale| AttnTemperature {
                    scale,
                    floor_len: rope_scaling.original_ctx.unwrap_or(n_ctx_train),
                })
        } else {
            None
        };
        let sliding_window =
            sliding_window(&k, rules.swa, n_layer, rope_freq_base)?.map(|w| SlidingWindow {
                rope_scaled: rules.swa_rope_scaled,
                ..w
            });
        let gemma4 = rules
            .gemma4_keys
            .then(|| Gemma4::from_keys(&k, n_layer, head_dim, sliding_window.as_ref()))
            .transpose()?;
        let pooling = pooling_type(&k)?;
        let moe = match rules.moe {
            Some(rule) => MoeParams::from_keys(&k, rule, n_ff)?,
            None => None,
        };

        let tied_embeddings = rules.always_tied || f.tensor("output.weight").is_none();
        let fused_qkv = deltanet.is_none() && f.tensor("blk.0.attn_qkv.weight").is_some();
        let has_qkv_bias =
            f.tensor("blk.0.attn_q.bias").is_some() || f.tensor("blk.0.attn_qkv.bias").is_some();
        let hp = HParams {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_ff_layers,
            moe,
            n_head,
            n_head_kv,
            head_dim,
            rope_freq_base,
            rope_dim,
            rope_scaling,
            rope_style: rules.rope_style,
            rope_layers,
            rms_eps,
            n_ctx_train,
            n_vocab,
            tied_embeddings,
            has_qkv_bias,
            attn_sinks: rules.attn_sinks,
            fused_qkv,
            fused_gate_up: rules.fused_gate_up,
            qk_norm: rules.qk_norm,
            qk_norm_full: rules.qk_norm_full,
            post_norms: rules.post_norms,
            activation: if rules.gelu {
                Activation::Gelu
            } else {
                Activation::Silu
            },
            embd_scale,
            q_scale,
            kq_scale,
            attn_softcap,
            final_softcap,
            residual_scale,
            logit_scale,
            attn_temperature,
            sliding_window,
            pooling,
            shortconv,
            deltanet,
            gemma4,
            mamba2,
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

    /// What kiln runs for this file, in one line: the architecture and its variant
    /// ("gemma3: sliding window 512 on 15 of 18 layers (RoPE base 10000 local, 1000000
    /// global), q/k norm, post-norms, GELU, ...").
    pub fn variant(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(c) = &self.shortconv {
            parts.push(format!(
                "short convolution ({} taps) on {} of {} layers",
                c.l_cache,
                c.n_conv(),
                self.n_layer
            ));
        }
        parts.extend(self.deltanet.as_ref().map(|g| g.describe(self.n_layer)));
        parts.extend(self.mamba2.as_ref().map(|m| m.describe(self.n_layer)));
        if let Some(m) = &self.moe {
            parts.push(m.describe());
        }
        parts.extend(self.gemma4.as_ref().map(|g| g.describe(self.n_layer)));
        if let Some(w) = &self.sliding_window {
            parts.push(format!(
                "sliding window {} on {} of {} layers (RoPE base {} local, {} global)",
                w.size,
                w.n_local(),
                self.n_layer,
                w.rope_freq_base,
                self.rope_freq_base
            ));
        }
        let nope = self.rope_layers.iter().filter(|&&r| !r).count();
        if nope > 0 {
            parts.push(format!("no RoPE on {nope} of {} layers", self.n_layer));
        }
        if self.rope_dim < self.head_dim {
            parts.push(format!(
                "partial RoPE {} of {} dims",
                self.rope_dim, self.head_dim
            ));
        }
        match self.rope_scaling.kind {
            RopeScalingKind::None => {}
            kind => parts.push(format!(
                "{} RoPE scaling x{}",
                kind.name(),
                self.rope_scaling.factor
            )),
        }
        if self.rope_scaling.attn_factor != 1.0 {
            parts.push(format!(
                "RoPE attn factor {}",
                self.rope_scaling.attn_factor
            ));
        }
        if self.qk_norm {
            parts.push(
                if self.qk_norm_full {
                    "q/k norm (full width)"
                } else {
                    "q/k norm"
                }
                .into(),
            );
        }
        if self.post_norms {
            parts.push("post-norms".into());
        }
        if self.attn_sinks {
            parts.push("attention sinks".into());
        }
        if self.activation != Activation::Silu {
            parts.push(self.activation.name().into());
        }
        if self.has_qkv_bias {
            parts.push("q/k/v biases".into());
        }
        if self.fused_qkv {
            parts.push("fused qkv".into());
        }
        if self.fused_gate_up {
            parts.push("fused gate/up".into());
        }
        let opt = |name: &str, v: Option<f32>| v.map(|x| format!("{name} {x}"));
        parts.extend(opt("embedding x", self.embd_scale));
        parts.extend(opt("query x", self.q_scale));
        parts.extend(opt("residual x", self.residual_scale));
        parts.extend(opt("logits /", self.logit_scale));
        parts.extend(opt("attention softcap", self.attn_softcap));
        parts.extend(opt("final softcap", self.final_softcap));
        if let Some(t) = self.attn_temperature {
            parts.push(format!(
                "query temperature {} per {} positions",
                t.scale, t.floor_len
            ));
        }
        if parts.is_empty() {
            self.arch.to_string()
        } else {
            format!("{}: {}", self.arch, parts.join(", "))
        }
    }
}

/// The factor queries are multiplied by after RoPE, for the families that pre-scale them:
/// `1/sqrt(head_dim)`, except Gemma's 27B size (62 layers for gemma3, 46 for gemma2, as
/// llama.cpp recognizes it) which uses `1/sqrt(n_embd / n_head)`.
fn query_prescale(
    q: QueryScale,
    arch: Arch,
    n_layer: u32,
    n_embd: u32,
    n_head: u32,
    head_dim: u32,
) -> Option<f32> {
    let gemma_27b = matches!((arch, n_layer), (Arch::Gemma3, 62) | (Arch::Gemma2, 46));
    match q {
        QueryScale::Kernel | QueryScale::Unit => None,
        QueryScale::PreGemma if gemma_27b => Some(1.0 / ((n_embd / n_head) as f32).sqrt()),
        QueryScale::PreGemma | QueryScale::PrePhi3 => Some(1.0 / (head_dim as f32).sqrt()),
    }
}

/// The sliding window of a family with one (see [`SwaRule`]); `None` without.
fn sliding_window(
    k: &Keys<'_>,
    rule: SwaRule,
    n_layer: u32,
    rope_freq_base: f32,
) -> Result<Option<SlidingWindow>, HParamsError> {
    let window_key = k.key("attention.sliding_window");
    let (size, default_pattern, default_base) = match rule {
        SwaRule::None => return Ok(None),
        SwaRule::IfKey { default_pattern } => match k.f.get_u32(&window_key)? {
            None | Some(0) => return Ok(None),
            // Gemma 3 without `rope.freq_base_swa`: llama.cpp's default local base, 10000.
            Some(w) => (w, default_pattern, 10_000.0),
        },
        SwaRule::Always {
            default_window,
            default_pattern,
        } => match k.f.get_u32(&window_key)? {
            Some(0) => return Err(invalid(window_key, 0, "must be positive")),
            // Gemma 2's local layers share the global base unless the file says otherwise.
            w => (w.unwrap_or(default_window), default_pattern, rope_freq_base),
        },
    };
    let pattern_key = k.key("attention.sliding_window_pattern");
    let local: Vec<bool> = match k.f.get(&pattern_key) {
        Some(MetaValue::Array(arr)) => {
            let flags: Option<Vec<bool>> = match arr {
                MetaArray::Bool(b) => Some(b.clone()),
                MetaArray::I32(v) => Some(v.iter().map(|&x| x != 0).collect()),
                MetaArray::U32(v) => Some(v.iter().map(|&x| x != 0).collect()),
                MetaArray::U8(v) => Some(v.iter().map(|&x| x != 0).collect()),
                MetaArray::I8(v) => Some(v.iter().map(|&x| x != 0).collect()),
                _ => None,
            };
            match flags {
                Some(f) if f.len() == n_layer as usize => f,
                _ => {
                    return Err(invalid(
                        pattern_key,
                        arr.type_desc(),
                        "must be one boolean per layer",
                    ))
                }
            }
        }
        _ => {
            let n = k
                .u32_opt("attention.sliding_window_pattern")?
                .unwrap_or(default_pattern);
            // llama.cpp's `set_swa_pattern`: 0 = every layer local, else the n-th is global.
            (0..n_layer).map(|il| n == 0 || il % n < n - 1).collect()
        }
    };
    let rope_freq_base = k.f32_pos("rope.freq_base_swa", Some(default_base))?;
    Ok(Some(SlidingWindow {
        size,
        local,
        rope_freq_base,
        rope_scaled: false,
    }))
}

/// `{arch}.pooling_type` (llama.cpp's codes 0..=4; -1 or absent: not set).
fn pooling_type(k: &Keys<'_>) -> Result<Option<PoolingType>, HParamsError> {
    let key = k.key("pooling_type");
    match k.f.get_i64(&key)? {
        None => Ok(None),
        Some(code) => PoolingType::from_code(code).map_err(|v| {
            invalid(
                key,
                v,
                "must be 0 (none), 1 (mean), 2 (cls), 3 (last) or 4 (rank)",
            )
        }),
    }
}

impl fmt::Display for HParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "architecture      {}", self.arch)?;
        writeln!(f, "variant           {}", self.variant())?;
        writeln!(f, "blocks            {}", self.n_layer)?;
        writeln!(f, "embedding         {}", self.n_embd)?;
        writeln!(f, "feed-forward      {}", self.n_ff)?;
        if let Some(m) = &self.moe {
            writeln!(f, "experts           {}", m.describe())?;
        }
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
        writeln!(f, "qkv bias          {}", self.has_qkv_bias)?;
        match self.pooling {
            Some(p) => write!(f, "pooling           {p} (pooling_type)"),
            None => write!(f, "pooling           not set (kiln embeds with mean)"),
        }
    }
}

#[cfg(test)]
mod tests;
