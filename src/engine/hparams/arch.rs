//! The architectures kiln runs, in one table, and how each one differs from llama: the rules
//! llama.cpp applies per architecture (`src/models/*.cpp`, `load_arch_hparams`), turned into the
//! [`ArchRules`] the description is built from. A new family is a new row here, not a new
//! forward pass.

use super::moe::{Gating, MoeRule, SharedRule};
use super::Activation;
use serde::Serialize;
use std::fmt;

/// A supported architecture (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma2,
    Gemma3,
    Phi3,
    Smollm3,
    Granite,
    Mistral3,
    Qwen3Moe,
    Olmoe,
    GraniteMoe,
    GptOss,
    Lfm2,
    Qwen35,
    Gemma4,
    GraniteHybrid,
    Qwen35Moe,
}

/// Every supported architecture with its `general.architecture` name: the one list behind
/// [`Arch::from_name`], [`Arch::name`] and the "unsupported architecture" error.
pub const ARCHS: [(Arch, &str); 18] = [
    (Arch::Llama, "llama"),
    (Arch::Qwen2, "qwen2"),
    (Arch::Qwen3, "qwen3"),
    (Arch::Gemma2, "gemma2"),
    (Arch::Gemma3, "gemma3"),
    (Arch::Phi3, "phi3"),
    (Arch::Smollm3, "smollm3"),
    (Arch::Granite, "granite"),
    (Arch::Mistral3, "mistral3"),
    (Arch::Qwen3Moe, "qwen3moe"),
    (Arch::Olmoe, "olmoe"),
    (Arch::GraniteMoe, "granitemoe"),
    (Arch::GptOss, "gpt-oss"),
    (Arch::Lfm2, "lfm2"),
    (Arch::Qwen35, "qwen35"),
    (Arch::Gemma4, "gemma4"),
    (Arch::GraniteHybrid, "granitehybrid"),
    (Arch::Qwen35Moe, "qwen35moe"),
];

/// How RoPE pairs dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` (llama.cpp `LLAMA_ROPE_TYPE_NORM`; llama, mistral).
    Normal,
    /// Halves `(i, i + rope_dim/2)` (llama.cpp `LLAMA_ROPE_TYPE_NEOX`; qwen, gemma, phi3).
    NeoX,
}

/// Where the query scale of attention is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum QueryScale {
    /// Inside attention, on each score: `1/sqrt(head_dim)` (or `attention.scale` when the
    /// family reads it).
    Kernel,
    /// On the queries after RoPE (`ggml_scale`), attention then scaling by 1: gemma's
    /// `1/sqrt(key_length)` (Gemma 27B's `1/sqrt(n_embd/n_head)`) and phi3's `1/sqrt(head_dim)`.
    PreGemma,
    PrePhi3,
    /// Neither: the scores are not scaled at all (gemma4's `f_attention_scale = 1`; its q/k
    /// norms keep them in range).
    Unit,
}

/// Which layers use the sliding window, when the family has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwaRule {
    /// No sliding window (phi3's window is ignored, as llama.cpp does).
    None,
    /// When `attention.sliding_window` is present and positive: every layer except each
    /// `pattern`-th (`sliding_window_pattern`, default given) is local.
    IfKey { default_pattern: u32 },
    /// Always on: window `attention.sliding_window` (default `default_window`), pattern as above.
    Always {
        default_window: u32,
        default_pattern: u32,
    },
}

/// The per-family rules the model description is built from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArchRules {
    pub rope_style: RopeStyle,
    /// Per-head RMSNorm of q and k before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// The q and k norms span the whole projection (`[n_head * head_dim]`, olmoe) instead of
    /// one head.
    pub qk_norm_full: bool,
    /// RMSNorm of the attention and FFN outputs before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// GELU-gated FFN (else SiLU-gated).
    pub gelu: bool,
    /// Token embeddings multiplied by `sqrt(n_embd)`.
    pub embd_scale_sqrt: bool,
    pub query_scale: QueryScale,
    pub swa: SwaRule,
    /// Attention logit softcapping always on, `attn_logit_softcapping` default this.
    pub attn_softcap_default: Option<f32>,
    /// Final logit softcapping: `Some(default)` always on, `None` only when the key is present.
    pub final_softcap_default: Option<f32>,
    /// The output projection is always the token embedding (an `output.weight` is ignored).
    pub always_tied: bool,
    /// Every `n`-th layer (1-based) skips RoPE (SmolLM3's NoPE layers).
    pub nope_every: Option<u32>,
    /// Granite's multipliers (`embedding_scale`, `residual_scale`, `logit_scale`,
    /// `attention.scale`) and its `rope.scaling.finetuned` switch for RoPE.
    pub granite_scales: bool,
    /// `attention.scale` replaces `1/sqrt(head_dim)` when present (llama.cpp reads it for granite).
    pub reads_attention_scale: bool,
    /// Mistral3's position-dependent query temperature (`attention.temperature_scale`) and its
    /// YaRN keys (`rope.scaling.yarn_beta_fast/_slow`, `yarn_log_multiplier`).
    pub mistral3_keys: bool,
    /// `ffn_up.weight` holds gate then up rows (`2 * n_ff`), there is no `ffn_gate.weight`.
    pub fused_gate_up: bool,
    /// The FFN of every layer is a mixture of experts routed this way (`build_moe_ffn`).
    pub moe: Option<MoeRule>,
    /// The FFN's input norm (`ffn_norm.weight`; gpt-oss names it `post_attention_norm.weight`).
    pub ffn_norm_tensor: &'static str,
    /// Every attention head has a learned sink logit (`attn_sinks.weight`, `[n_head]`) that
    /// joins its softmax's denominator.
    pub attn_sinks: bool,
    /// The sliding-window layers' RoPE keeps the global frequency scale (gpt-oss: llama.cpp's
    /// `rope_freq_scale_train_swa = rope_freq_scale_train`); otherwise their scale is 1.
    pub swa_rope_scaled: bool,
    /// The layers whose `attention.head_count_kv` entry is 0 run LFM2's short convolution
    /// (`shortconv.l_cache` taps) instead of attention.
    pub shortconv: bool,
    /// The layers whose `attention.head_count_kv` entry is 0 run Mamba2 (`ssm.*` keys)
    /// instead of attention.
    pub mamba2: bool,
    /// The final norm before the LM head (`output_norm.weight`; lfm2 names it
    /// `token_embd_norm.weight`).
    pub output_norm_tensor: &'static str,
    /// The layers `ssm.*` / `full_attention_interval` mark recurrent run Qwen3.5's gated
    /// DeltaNet instead of attention.
    pub gated_delta_net: bool,
    /// `attn_q` carries, after each head's query, a gate for that head's attention output
    /// (`out * sigmoid(gate)` before `attn_output`; qwen35).
    pub attn_out_gate: bool,
    /// Gemma 4's keys and blocks (`hparams::gemma4`): per-layer embeddings, local layers with
    /// their own head width and RoPE dims, later layers reading earlier layers' K/V, V
    /// RMS-normed without a weight, `rope_freqs` on the global layers only, a per-layer output
    /// scale, a per-layer FFN width.
    pub gemma4_keys: bool,
}

const LLAMA: ArchRules = ArchRules {
    rope_style: RopeStyle::Normal,
    qk_norm: false,
    qk_norm_full: false,
    post_norms: false,
    gelu: false,
    embd_scale_sqrt: false,
    query_scale: QueryScale::Kernel,
    swa: SwaRule::None,
    attn_softcap_default: None,
    final_softcap_default: None,
    always_tied: false,
    nope_every: None,
    granite_scales: false,
    reads_attention_scale: false,
    mistral3_keys: false,
    fused_gate_up: false,
    moe: None,
    ffn_norm_tensor: "ffn_norm.weight",
    attn_sinks: false,
    swa_rope_scaled: false,
    shortconv: false,
    mamba2: false,
    output_norm_tensor: "output_norm.weight",
    gated_delta_net: false,
    attn_out_gate: false,
    gemma4_keys: false,
};

impl Arch {
    /// The architecture named `name` in a file's `general.architecture`.
    pub fn from_name(name: &str) -> Option<Arch> {
        ARCHS.iter().find(|(_, n)| *n == name).map(|&(a, _)| a)
    }

    /// The key prefix and `general.architecture` value.
    pub fn name(self) -> &'static str {
        ARCHS
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("?", |&(_, n)| n)
    }

    /// "llama, qwen2, ..." (for errors and `--help`).
    pub fn supported_list() -> String {
        ARCHS.map(|(_, n)| n).join(", ")
    }

    /// How this family differs from llama.
    pub fn rules(self) -> ArchRules {
        let neox = ArchRules {
            rope_style: RopeStyle::NeoX,
            ..LLAMA
        };
        match self {
            Arch::Llama => LLAMA,
            Arch::Qwen2 => neox,
            Arch::Qwen3 => ArchRules {
                qk_norm: true,
                ..neox
            },
            Arch::Gemma2 => ArchRules {
                post_norms: true,
                gelu: true,
                embd_scale_sqrt: true,
                query_scale: QueryScale::PreGemma,
                swa: SwaRule::Always {
                    default_window: 4096,
                    default_pattern: 2,
                },
                attn_softcap_default: Some(50.0),
                final_softcap_default: Some(30.0),
                always_tied: true,
                ..neox
            },
            Arch::Gemma3 => ArchRules {
                qk_norm: true,
                post_norms: true,
                gelu: true,
                embd_scale_sqrt: true,
                query_scale: QueryScale::PreGemma,
                swa: SwaRule::IfKey { default_pattern: 6 },
                ..neox
            },
            Arch::Phi3 => ArchRules {
                query_scale: QueryScale::PrePhi3,
                fused_gate_up: true,
                ..neox
            },
            Arch::Smollm3 => ArchRules {
                nope_every: Some(4),
                ..LLAMA
            },
            Arch::Granite => ArchRules {
                granite_scales: true,
                reads_attention_scale: true,
                ..LLAMA
            },
            Arch::Mistral3 => ArchRules {
                mistral3_keys: true,
                ..LLAMA
            },
            // qwen3moe.cpp: qwen3's attention, softmax router, top-k weights normalized.
            Arch::Qwen3Moe => ArchRules {
                qk_norm: true,
                moe: Some(MoeRule {
                    gating: Gating::Softmax,
                    norm_weights: true,
                    reads_expert_width: true,
                    shared: SharedRule::None,
                    optional: false,
                    biases: false,
                    act: Activation::Silu,
                }),
                ..neox
            },
            // olmoe.cpp: q and k RMS-normed over their whole width, softmax router, top-k
            // weights as they are; an expert's width is feed_forward_length.
            Arch::Olmoe => ArchRules {
                qk_norm: true,
                qk_norm_full: true,
                moe: Some(MoeRule {
                    gating: Gating::Softmax,
                    norm_weights: false,
                    reads_expert_width: false,
                    shared: SharedRule::None,
                    optional: false,
                    biases: false,
                    act: Activation::Silu,
                }),
                ..neox
            },
            // granite-moe.cpp: granite's multipliers, softmax router with normalized top-k
            // weights, an optional shared expert.
            Arch::GraniteMoe => ArchRules {
                granite_scales: true,
                reads_attention_scale: true,
                moe: Some(MoeRule {
                    gating: Gating::Softmax,
                    norm_weights: true,
                    reads_expert_width: false,
                    shared: SharedRule::IfWidth,
                    optional: false,
                    biases: false,
                    act: Activation::Silu,
                }),
                ..LLAMA
            },
            // openai-moe.cpp: q/k/v/o biases, a learned sink per head, every other layer
            // (the even ones) windowed with the global YaRN scale, the FFN norm named
            // post_attention_norm, and a router with a bias whose top-k logits are softmaxed
            // over the k chosen; experts with biases and the clamped SwiGLU (alpha 1.702,
            // limit 7).
            Arch::GptOss => ArchRules {
                swa: SwaRule::Always {
                    default_window: 128,
                    default_pattern: 2,
                },
                moe: Some(MoeRule {
                    gating: Gating::SoftmaxWeight,
                    norm_weights: false,
                    reads_expert_width: true,
                    shared: SharedRule::None,
                    optional: false,
                    biases: true,
                    act: Activation::SwigluOai,
                }),
                ffn_norm_tensor: "post_attention_norm.weight",
                attn_sinks: true,
                swa_rope_scaled: true,
                ..neox
            },
            // lfm2.cpp: per layer, a short convolution (head_count_kv 0) or attention with
            // per-head q/k norm; a SiLU-gated FFN; the final norm is token_embd_norm.
            Arch::Lfm2 => ArchRules {
                qk_norm: true,
                shortconv: true,
                output_norm_tensor: "token_embd_norm.weight",
                ..neox
            },
            // qwen35.cpp: gated DeltaNet on the recurrent layers, gated attention (q with
            // its output gate, per-head q/k norm, multi-section RoPE that is NeoX for text) on
            // the others; the FFN norm is post_attention_norm.
            Arch::Qwen35 => ArchRules {
                qk_norm: true,
                ffn_norm_tensor: "post_attention_norm.weight",
                gated_delta_net: true,
                attn_out_gate: true,
                ..neox
            },
            // gemma4.cpp: gemma3's block (q/k norm, post-norms, GELU, embeddings x sqrt(n_embd))
            // with unscaled attention scores, the window pattern an array in the file, the final
            // softcap when the key is set, and the gemma4 keys and blocks.
            Arch::Gemma4 => ArchRules {
                qk_norm: true,
                post_norms: true,
                gelu: true,
                embd_scale_sqrt: true,
                query_scale: QueryScale::Unit,
                swa: SwaRule::Always {
                    default_window: 512,
                    default_pattern: 5,
                },
                gemma4_keys: true,
                ..neox
            },
            // granite-hybrid.cpp: per layer, Mamba2 (head_count_kv 0, mamba-base.cpp's
            // build_mamba2_layer) or granite's attention; granite's multipliers on both
            // mixers; a dense SiLU-gated FFN, or (expert_count > 0: Granite 4.0-H Tiny)
            // granitemoe's mixture: normalized softmax router, experts feed_forward_length
            // wide, an optional shared expert.
            Arch::GraniteHybrid => ArchRules {
                granite_scales: true,
                reads_attention_scale: true,
                mamba2: true,
                moe: Some(MoeRule {
                    gating: Gating::Softmax,
                    norm_weights: true,
                    reads_expert_width: false,
                    shared: SharedRule::IfWidth,
                    optional: true,
                    biases: false,
                    act: Activation::Silu,
                }),
                ..LLAMA
            },
            // qwen35moe.cpp: qwen35's mixers and norms with a mixture for the FFN: normalized
            // softmax router, experts expert_feed_forward_length wide, and a shared expert
            // whose output is scaled by the sigmoid of its own router row.
            Arch::Qwen35Moe => ArchRules {
                moe: Some(MoeRule {
                    gating: Gating::Softmax,
                    norm_weights: true,
                    reads_expert_width: true,
                    shared: SharedRule::Gated,
                    optional: false,
                    biases: false,
                    act: Activation::Silu,
                }),
                ..Arch::Qwen35.rules()
            },
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_listed() {
        for (a, n) in ARCHS {
            assert_eq!(Arch::from_name(n), Some(a));
            assert_eq!(a.name(), n);
            assert!(Arch::supported_list().contains(n));
        }
        assert_eq!(Arch::from_name("gpt2"), None);
    }
}
