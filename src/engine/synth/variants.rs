//! The proof variants: one small random-weight model per architecture and per variant kiln
//! runs (window and softcaps, YaRN, LongRoPE long/short, NoPE, multipliers, fused tensors,
//! biases). Dimensions K-quants allow (rows of 256 or 512), 4 to 6 layers, context 256 (the
//! teacher-forced sequence), sliding windows of 64 so most positions lie past the window.

use super::deltanet::Gdn;
mod gemma4;
mod mamba2;
mod qwen35moe;

use super::{Init, ModelSpec, TensorSpec};
use crate::gguf::{MetaArray, MetaValue};

/// A named proof model.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// File-name-safe name ("gemma3", "phi3-long", ...).
    pub name: &'static str,
    /// What the variant exercises, for the report.
    pub covers: &'static str,
    pub spec: ModelSpec,
}

/// Embedding width, FFN width and context of every proof model.
const D: u64 = 256;
const FF: u64 = 512;
const CTX: u32 = 256;

/// Shape knobs of one model.
#[derive(Clone, Copy)]
struct Shape {
    n_layer: usize,
    n_head: u64,
    n_head_kv: u64,
    head_dim: u64,
    /// `output.weight` correlated with the embedding instead of a tied head.
    untied: bool,
    /// Centre of `output_norm.weight`: the logits' temperature.
    out_norm: f32,
    /// Gain of the `attn_output`/`ffn_down` weights (a branch's size in the residual).
    branch: f32,
    /// Centre of gemma's post-norm weights (a branch's size after its norm).
    post_norm: f32,
}

const BASE: Shape = Shape {
    n_layer: 4,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 64,
    untied: false,
    out_norm: 0.05,
    branch: 1.0,
    post_norm: 0.0,
};

/// Which optional tensors a family has.
#[derive(Clone, Copy, Default)]
struct Parts {
    qkv_bias: bool,
    output_bias: bool,
    qk_norm: bool,
    /// The q/k norms span the whole q and k rows (olmoe).
    qk_norm_full: bool,
    post_norms: bool,
    fused_qkv: bool,
    fused_gate_up: bool,
    rope_freqs: Option<u64>,
    long_short: Option<u64>,
    moe: Option<Experts>,
    /// `attn_output.bias` (gpt-oss).
    o_bias: bool,
    /// A sink logit per head (`attn_sinks.weight`, gpt-oss).
    attn_sinks: bool,
    /// The FFN norm is `post_attention_norm.weight` (gpt-oss), not `ffn_norm.weight`.
    ffn_norm_post_attention: bool,
    /// LFM2's short convolutions on every layer but the listed attention ones (and the final
    /// norm named `token_embd_norm.weight`).
    shortconv: Option<Conv>,
    /// Qwen3.5's gated DeltaNet on every layer but each `interval`-th (and `attn_q` twice
    /// as wide: each head's query then its output gate).
    deltanet: Option<Gdn>,
    /// Granite 4.0-H's Mamba2 on every layer but the listed attention ones.
    mamba2: Option<mamba2::Ssm>,
}

/// LFM2's layer pattern: `l_cache` taps on the convolution layers.
#[derive(Clone, Copy)]
struct Conv {
    l_cache: u64,
    attn: &'static [usize],
}

/// A mixture-of-experts FFN in place of the dense one.
#[derive(Clone, Copy)]
struct Experts {
    n_expert: u64,
    /// Hidden width of one expert.
    width: u64,
    /// Hidden width of the shared expert, when there is one.
    shared: Option<u64>,
    /// The shared expert's output is gated by the sigmoid of `ffn_gate_inp_shexp.weight`
    /// (qwen35moe).
    shared_gate: bool,
    /// Router and expert biases (gpt-oss).
    biases: bool,
    /// Gain of the gate and up weights (gpt-oss: large enough for some values to reach the
    /// clamp of its SwiGLU).
    gain: f32,
}

fn meta(arch: &str, s: Shape, extra: Vec<(&str, MetaValue)>) -> Vec<(String, MetaValue)> {
    let mut m: Vec<(String, MetaValue)> = vec![
        ("block_count", MetaValue::U32(s.n_layer as u32)),
        ("context_length", MetaValue::U32(CTX)),
        ("embedding_length", MetaValue::U32(D as u32)),
        ("feed_forward_length", MetaValue::U32(FF as u32)),
        ("attention.head_count", MetaValue::U32(s.n_head as u32)),
        (
            "attention.head_count_kv",
            MetaValue::U32(s.n_head_kv as u32),
        ),
        ("attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6)),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{arch}.{k}"), v))
    .collect();
    if s.head_dim * s.n_head != D {
        for k in ["attention.key_length", "attention.value_length"] {
            m.push((format!("{arch}.{k}"), MetaValue::U32(s.head_dim as u32)));
        }
    }
    let extra: Vec<(String, MetaValue)> = extra
        .into_iter()
        .map(|(k, v)| (format!("{arch}.{k}"), v))
        .collect();
    // A key given in `extra` replaces the default one.
    m.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    m.extend(extra);
    m
}

fn tensors(s: Shape, p: Parts) -> Vec<TensorSpec> {
    let (q, kv, hd) = (s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.head_dim);
    let inv = |n: u64| 1.0 / (n as f32).sqrt();
    let mut t = Vec::new();
    let mut add =
        |name: String, shape: Vec<u64>, init: Init| t.push(TensorSpec { name, shape, init });
    // A dimension of 0 stands for the vocabulary size.
    add("token_embd.weight".into(), vec![D, 0], Init::Normal(1.0));
    if let Some(n) = p.rope_freqs {
        add("rope_freqs.weight".into(), vec![n], Init::Ramp(1.0, 8.0));
    }
    if let Some(n) = p.long_short {
        add(
            "rope_factors_long.weight".into(),
            vec![n],
            Init::Ramp(1.0, 24.0),
        );
        add(
            "rope_factors_short.weight".into(),
            vec![n],
            Init::Ramp(1.0, 1.6),
        );
    }
    for i in 0..s.n_layer {
        let n = |x: &str| format!("blk.{i}.{x}");
        add(n("attn_norm.weight"), vec![D], Init::Around(1.0, 0.2));
        let conv = p.shortconv.filter(|c| !c.attn.contains(&i));
        let gdn = p.deltanet.filter(|g| g.is_recurrent(i));
        if let Some(g) = gdn {
            for ts in g.tensors(i, D, s.branch) {
                add(ts.name, ts.shape, ts.init);
            }
        } else if let Some(m) = p.mamba2.filter(|m| !m.attn.contains(&i)) {
            mamba2::tensors(m, i, s.branch, &mut add);
        } else if let Some(c) = conv {
            add(
                n("shortconv.conv.weight"),
                vec![c.l_cache, D],
                Init::Normal(0.5),
            );
            add(
                n("shortconv.in_proj.weight"),
                vec![D, 3 * D],
                Init::Normal(inv(D)),
            );
            add(
                n("shortconv.out_proj.weight"),
                vec![D, D],
                Init::Normal(0.6 * s.branch * inv(D)),
            );
        } else {
            if p.fused_qkv {
                add(
                    n("attn_qkv.weight"),
                    vec![D, q + 2 * kv],
                    Init::Normal(1.2 * inv(D)),
                );
            } else {
                let qg = if p.deltanet.is_some() { 2 * q } else { q };
                add(n("attn_q.weight"), vec![D, qg], Init::Normal(1.2 * inv(D)));
                add(n("attn_k.weight"), vec![D, kv], Init::Normal(1.2 * inv(D)));
                add(n("attn_v.weight"), vec![D, kv], Init::Normal(inv(D)));
            }
            if p.qkv_bias {
                add(n("attn_q.bias"), vec![q], Init::Normal(0.2));
                add(n("attn_k.bias"), vec![kv], Init::Normal(0.2));
                add(n("attn_v.bias"), vec![kv], Init::Normal(0.2));
            }
            if p.qk_norm {
                let (qn, kn) = if p.qk_norm_full { (q, kv) } else { (hd, hd) };
                add(n("attn_q_norm.weight"), vec![qn], Init::Around(1.0, 0.3));
                add(n("attn_k_norm.weight"), vec![kn], Init::Around(1.0, 0.3));
            }
            add(
                n("attn_output.weight"),
                vec![q, D],
                Init::Normal(0.6 * s.branch * inv(q)),
            );
            if p.o_bias {
                add(n("attn_output.bias"), vec![D], Init::Normal(0.1));
            }
            if p.attn_sinks {
                add(n("attn_sinks.weight"), vec![s.n_head], Init::Normal(1.5));
            }
            if p.post_norms {
                add(
                    n("post_attention_norm.weight"),
                    vec![D],
                    Init::Around(s.post_norm, 0.3),
                );
            }
        }
        let ffn_norm = if p.ffn_norm_post_attention {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        add(n(ffn_norm), vec![D], Init::Around(1.0, 0.2));
        if let Some(x) = p.moe {
            let (ne, w) = (x.n_expert, x.width);
            add(
                n("ffn_gate_inp.weight"),
                vec![D, ne],
                Init::Normal(2.0 * inv(D)),
            );
            if x.biases {
                add(n("ffn_gate_inp.bias"), vec![ne], Init::Normal(0.5));
            }
            add(
                n("ffn_gate_exps.weight"),
                vec![D, w, ne],
                Init::Normal(x.gain * inv(D)),
            );
            add(
                n("ffn_up_exps.weight"),
                vec![D, w, ne],
                Init::Normal(x.gain * inv(D)),
            );
            // The down gain cancels the gate and up gains' (the branch keeps its size).
            add(
                n("ffn_down_exps.weight"),
                vec![w, D, ne],
                Init::Normal(1.2 * s.branch * inv(w) / (x.gain * x.gain)),
            );
            if x.biases {
                add(n("ffn_gate_exps.bias"), vec![w, ne], Init::Normal(0.3));
                add(n("ffn_up_exps.bias"), vec![w, ne], Init::Normal(0.3));
                add(n("ffn_down_exps.bias"), vec![D, ne], Init::Normal(0.1));
            }
            if let Some(sw) = x.shared {
                add(
                    n("ffn_gate_shexp.weight"),
                    vec![D, sw],
                    Init::Normal(inv(D)),
                );
                add(n("ffn_up_shexp.weight"), vec![D, sw], Init::Normal(inv(D)));
                add(
                    n("ffn_down_shexp.weight"),
                    vec![sw, D],
                    Init::Normal(0.6 * s.branch * inv(sw)),
                );
                if x.shared_gate {
                    add(
                        n("ffn_gate_inp_shexp.weight"),
                        vec![D],
                        Init::Normal(inv(D)),
                    );
                }
            }
        } else if p.fused_gate_up {
            add(n("ffn_up.weight"), vec![D, 2 * FF], Init::Normal(inv(D)));
        } else {
            add(n("ffn_gate.weight"), vec![D, FF], Init::Normal(inv(D)));
            add(n("ffn_up.weight"), vec![D, FF], Init::Normal(inv(D)));
        }
        if p.moe.is_none() {
            add(
                n("ffn_down.weight"),
                vec![FF, D],
                Init::Normal(1.2 * s.branch * inv(FF)),
            );
        }
        if p.post_norms {
            add(
                n("post_ffw_norm.weight"),
                vec![D],
                Init::Around(s.post_norm, 0.3),
            );
        }
    }
    let out_norm = if p.shortconv.is_some() {
        "token_embd_norm.weight"
    } else {
        "output_norm.weight"
    };
    add(
        out_norm.into(),
        vec![D],
        Init::Around(s.out_norm, 0.2 * s.out_norm),
    );
    if s.untied {
        add(
            "output.weight".into(),
            vec![D, 0],
            Init::LikeEmbedding(1.0, 0.3),
        );
    }
    if p.output_bias {
        add("output.bias".into(), vec![0], Init::Normal(0.3));
    }
    t
}

fn variant(
    name: &'static str,
    covers: &'static str,
    arch: &'static str,
    s: Shape,
    p: Parts,
    extra: Vec<(&str, MetaValue)>,
) -> Variant {
    let tensors = tensors(s, p);
    Variant {
        name,
        covers,
        spec: ModelSpec {
            arch,
            meta: meta(arch, s, extra),
            tensors,
            n_layer: s.n_layer,
        },
    }
}

fn f(v: f32) -> MetaValue {
    MetaValue::F32(v)
}

fn u(v: u32) -> MetaValue {
    MetaValue::U32(v)
}

fn st(v: &str) -> MetaValue {
    MetaValue::String(v.into())
}

/// Every proof variant, in a fixed order.
pub fn proof_variants() -> Vec<Variant> {
    let yarn = |orig: u32| {
        vec![
            ("rope.scaling.type", st("yarn")),
            ("rope.scaling.factor", f(4.0)),
            ("rope.scaling.original_context_length", u(orig)),
        ]
    };
    let phi = Shape {
        n_head: 2,
        n_head_kv: 1,
        head_dim: 128,
        untied: true,
        ..BASE
    };
    let phi_parts = Parts {
        fused_qkv: true,
        fused_gate_up: true,
        long_short: Some(48),
        ..Parts::default()
    };
    let phi_meta = |orig: u32| {
        vec![
            ("rope.dimension_count", u(96)),
            ("rope.scaling.original_context_length", u(orig)),
            ("rope.scaling.attn_factor", f(1.19)),
        ]
    };
    vec![
        variant(
            "llama",
            "llama: GQA, Normal RoPE with Llama 3 frequency factors (rope_freqs)",
            "llama",
            BASE,
            Parts {
                rope_freqs: Some(32),
                ..Parts::default()
            },
            vec![("rope.freq_base", f(500_000.0))],
        ),
        variant(
            "qwen2",
            "qwen2: q/k/v biases, untied output with output.bias, NeoX RoPE",
            "qwen2",
            Shape {
                untied: true,
                ..BASE
            },
            Parts {
                qkv_bias: true,
                output_bias: true,
                ..Parts::default()
            },
            vec![("rope.freq_base", f(1_000_000.0))],
        ),
        variant(
            "qwen2-yarn",
            "qwen2 with YaRN RoPE scaling x4 over an original context of 64",
            "qwen2",
            BASE,
            Parts {
                qkv_bias: true,
                ..Parts::default()
            },
            yarn(64),
        ),
        variant(
            "qwen3",
            "qwen3: per-head q/k RMSNorm, key_length 128 != n_embd/n_head",
            "qwen3",
            Shape {
                head_dim: 128,
                ..BASE
            },
            Parts {
                qk_norm: true,
                ..Parts::default()
            },
            vec![("rope.freq_base", f(1_000_000.0))],
        ),
        variant(
            "gemma2",
            "gemma2: window 64 on every other layer, attention softcap 8, final softcap 30, GELU, post-norms, embeddings x sqrt(n_embd)",
            "gemma2",
            Shape {
                post_norm: 4.0,
                ..BASE
            },
            Parts {
                post_norms: true,
                ..Parts::default()
            },
            vec![
                ("attention.sliding_window", u(64)),
                ("attn_logit_softcapping", f(8.0)),
                ("final_logit_softcapping", f(30.0)),
            ],
        ),
        variant(
            "gemma3",
            "gemma3: window 64 on 5 of 6 layers (default pattern), local RoPE base 10000, global base 1e6 with linear scaling x8, q/k norm, GELU, post-norms, 1 kv head of 128",
            "gemma3",
            Shape {
                n_layer: 6,
                n_head_kv: 1,
                head_dim: 128,
                post_norm: 4.0,
                ..BASE
            },
            Parts {
                qk_norm: true,
                post_norms: true,
                ..Parts::default()
            },
            vec![
                ("attention.sliding_window", u(64)),
                ("rope.freq_base", f(1_000_000.0)),
                ("rope.freq_base_swa", f(10_000.0)),
                ("rope.scaling.type", st("linear")),
                ("rope.scaling.factor", f(8.0)),
            ],
        ),
        variant(
            "phi3",
            "phi3: fused attn_qkv and gate/up, partial RoPE 96 of 128, LongRoPE short factors, attn_factor 1.19, untied output",
            "phi3",
            phi,
            phi_parts,
            phi_meta(256),
        ),
        variant(
            "phi3-long",
            "phi3 with a context above the original one: LongRoPE long factors",
            "phi3",
            phi,
            phi_parts,
            phi_meta(128),
        ),
        variant(
            "smollm3",
            "smollm3: no RoPE on every fourth layer",
            "smollm3",
            BASE,
            Parts::default(),
            vec![("rope.freq_base", f(2_000_000.0))],
        ),
        variant(
            "granite",
            "granite: embedding x12, residual x0.22, logits /8, attention scale 0.02",
            "granite",
            Shape {
                out_norm: 0.4,
                branch: 40.0,
                ..BASE
            },
            Parts::default(),
            vec![
                ("embedding_scale", f(12.0)),
                ("residual_scale", f(0.22)),
                ("logit_scale", f(8.0)),
                ("attention.scale", f(0.02)),
            ],
        ),
        variant(
            "mistral3",
            "mistral3: YaRN x4 (beta 32/1, log multiplier 1) and the position-dependent query temperature",
            "mistral3",
            Shape {
                untied: true,
                ..BASE
            },
            Parts::default(),
            [
                yarn(64),
                vec![
                    ("rope.freq_base", f(1_000_000.0)),
                    ("rope.scaling.yarn_beta_fast", f(32.0)),
                    ("rope.scaling.yarn_beta_slow", f(1.0)),
                    ("rope.scaling.yarn_log_multiplier", f(1.0)),
                    ("attention.temperature_scale", f(0.1)),
                ],
            ]
            .concat(),
        ),
        variant(
            "qwen3moe",
            "qwen3moe: 6 experts of width 256, 2 used per token, softmax router, top-k weights normalized; qwen3's q/k norm",
            "qwen3moe",
            Shape {
                head_dim: 128,
                ..BASE
            },
            Parts {
                qk_norm: true,
                moe: Some(Experts {
                    n_expert: 6,
                    width: 256,
                    shared: None,
                    shared_gate: false,
                    biases: false,
                    gain: 1.0,
                }),
                ..Parts::default()
            },
            vec![
                ("rope.freq_base", f(1_000_000.0)),
                ("expert_count", u(6)),
                ("expert_used_count", u(2)),
                ("expert_feed_forward_length", u(256)),
            ],
        ),
        variant(
            "olmoe",
            "olmoe: 6 experts of width 256 (feed_forward_length), 2 used, softmax router with the top-k weights as they are, q and k RMS-normed over their whole width",
            "olmoe",
            // llama.cpp requires olmoe's output.weight.
            Shape {
                n_head_kv: 4,
                untied: true,
                ..BASE
            },
            Parts {
                qk_norm: true,
                qk_norm_full: true,
                moe: Some(Experts {
                    n_expert: 6,
                    width: 256,
                    shared: None,
                    shared_gate: false,
                    biases: false,
                    gain: 1.0,
                }),
                ..Parts::default()
            },
            vec![
                ("feed_forward_length", u(256)),
                ("expert_count", u(6)),
                ("expert_used_count", u(2)),
            ],
        ),
        variant(
            "granitemoe",
            "granitemoe: 6 experts of width 256 (feed_forward_length), 2 used, normalized softmax router, a shared expert of width 512; granite's multipliers",
            "granitemoe",
            Shape {
                out_norm: 0.4,
                branch: 40.0,
                ..BASE
            },
            Parts {
                moe: Some(Experts {
                    n_expert: 6,
                    width: 256,
                    shared: Some(512),
                    shared_gate: false,
                    biases: false,
                    gain: 1.0,
                }),
                ..Parts::default()
            },
            vec![
                ("feed_forward_length", u(256)),
                ("expert_count", u(6)),
                ("expert_used_count", u(2)),
                ("expert_shared_feed_forward_length", u(512)),
                ("embedding_scale", f(12.0)),
                ("residual_scale", f(0.22)),
                ("logit_scale", f(8.0)),
                ("attention.scale", f(0.02)),
            ],
        ),
        variant(
            "gpt-oss",
            "gpt-oss: 12 experts of width 256, 4 used, router with a bias and a softmax over the top-k logits, expert biases, clamped SwiGLU (gate/up large enough to reach the clamp), attention sinks, q/k/v/o biases, window 64 on the even layers, YaRN x4 (local layers too), FFN norm named post_attention_norm",
            "gpt-oss",
            Shape {
                untied: true,
                ..BASE
            },
            Parts {
                qkv_bias: true,
                o_bias: true,
                attn_sinks: true,
                ffn_norm_post_attention: true,
                // Not 8 experts: llama-quantize's mixes special-case 8-expert models.
                moe: Some(Experts {
                    n_expert: 12,
                    width: 256,
                    shared: None,
                    shared_gate: false,
                    biases: true,
                    gain: 2.5,
                }),
                ..Parts::default()
            },
            [
                yarn(64),
                vec![
                    ("rope.freq_base", f(150_000.0)),
                    ("attention.sliding_window", u(64)),
                    ("expert_count", u(12)),
                    ("expert_used_count", u(4)),
                    ("expert_feed_forward_length", u(256)),
                ],
            ]
            .concat(),
        ),
        variant(
            "lfm2",
            "lfm2: short convolutions (3 taps) on 4 of 6 layers, attention (q/k norm, NeoX RoPE) on layers 2 and 5 (per-layer head_count_kv), final norm token_embd_norm",
            "lfm2",
            Shape {
                n_layer: 6,
                ..BASE
            },
            Parts {
                qk_norm: true,
                shortconv: Some(Conv {
                    l_cache: 3,
                    attn: &LFM2_ATTN,
                }),
                ..Parts::default()
            },
            vec![
                ("rope.freq_base", f(1_000_000.0)),
                ("shortconv.l_cache", u(3)),
                (
                    "attention.head_count_kv",
                    MetaValue::Array(MetaArray::I32(
                        (0..6)
                            .map(|i| if LFM2_ATTN.contains(&i) { 2 } else { 0 })
                            .collect(),
                    )),
                ),
            ],
        ),
        variant(
            "qwen35",
            "qwen35: gated DeltaNet (4-tap conv, 2 key / 4 value heads of 64) on layers 0-2, gated attention (q with its output gate, q/k norm, partial multi-section RoPE 32 of 128 dims) on layer 3, FFN norm post_attention_norm",
            "qwen35",
            Shape {
                n_head: 2,
                n_head_kv: 1,
                head_dim: 128,
                ..BASE
            },
            Parts {
                qk_norm: true,
                ffn_norm_post_attention: true,
                deltanet: Some(QWEN35_GDN),
                ..Parts::default()
            },
            [
                vec![
                    ("rope.freq_base", f(10_000_000.0)),
                    ("rope.dimension_count", u(32)),
                ],
                QWEN35_GDN.meta([6, 5, 5, 0]),
            ]
            .concat(),
        ),
        gemma4::gemma4(),
        mamba2::granitehybrid(),
        qwen35moe::qwen35moe(),
        mamba2::granitehybrid_moe(),
    ]
}

/// The qwen35 proof model's DeltaNet: Qwen3.5's pattern (3 DeltaNet layers, then attention)
/// and its equal key and value head widths, twice as many value heads as key heads (as the
/// 9B and 27B), small enough for a fast proof.
const QWEN35_GDN: Gdn = Gdn {
    d_conv: 4,
    head_dim: 64,
    n_k_heads: 2,
    n_v_heads: 4,
    interval: 4,
};

/// The attention layers of the lfm2 proof model (LFM2's own pattern starts so: conv, conv,
/// attention).
const LFM2_ATTN: [usize; 2] = [2, 5];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::hparams::{Arch, ARCHS};

    #[test]
    fn every_architecture_has_a_variant() {
        let v = proof_variants();
        for (a, name) in ARCHS {
            assert!(
                v.iter().any(|x| Arch::from_name(x.spec.arch) == Some(a)),
                "no proof variant for {name}"
            );
        }
        let mut names: Vec<_> = v.iter().map(|x| x.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), v.len(), "variant names are unique");
    }
}
