//! The gemma4 proof model: Gemma 4 E2B's block at small dimensions with its ratios. Local and
//! global layers alternate (E2B: four local, one global) with the global heads twice as wide
//! (256 vs 128 here, 512 vs 256 in E2B) and their own RoPE dims and frequency factors, the last
//! two layers read the K/V of the last local and global layers before them (E2B: 20 of 35) with
//! FFNs twice as wide (E2B's double-wide MLP), per-layer embeddings 256 wide (E2B's), a
//! per-layer output scale, the final softcap 30 and a tied LM head.

use super::Variant;
use crate::engine::synth::{Init, ModelSpec, TensorSpec};
use crate::gguf::{MetaArray, MetaValue};

const D: u64 = 256;
const N_LAYER: usize = 4;
/// Local (windowed) layers; the others are global.
const LOCAL: [bool; N_LAYER] = [true, false, true, false];
/// Layers that read an earlier layer's K/V (the last ones).
const SHARED: usize = 2;
const N_HEAD: u64 = 2;
const N_HEAD_KV: u64 = 1;
const HD_GLOBAL: u64 = 256;
const HD_LOCAL: u64 = 128;
/// Per-layer embedding width.
const PL: u64 = 256;
const FF: u64 = 512;
const CTX: u32 = 256;

fn ff(il: usize) -> u64 {
    if il >= N_LAYER - SHARED {
        2 * FF
    } else {
        FF
    }
}

fn tensors() -> Vec<TensorSpec> {
    let inv = |n: u64| 1.0 / (n as f32).sqrt();
    let nl = N_LAYER as u64;
    let mut t = Vec::new();
    let mut add =
        |name: String, shape: Vec<u64>, init: Init| t.push(TensorSpec { name, shape, init });
    // A dimension of 0 stands for the vocabulary size.
    add("token_embd.weight".into(), vec![D, 0], Init::Normal(1.0));
    add(
        "rope_freqs.weight".into(),
        vec![HD_GLOBAL / 2],
        Init::Ramp(1.0, 8.0),
    );
    add(
        "per_layer_token_embd.weight".into(),
        vec![PL * nl, 0],
        Init::Normal(inv(PL)),
    );
    add(
        "per_layer_model_proj.weight".into(),
        vec![D, PL * nl],
        Init::Normal(inv(D)),
    );
    add(
        "per_layer_proj_norm.weight".into(),
        vec![PL],
        Init::Around(1.0, 0.2),
    );
    for (i, &local) in LOCAL.iter().enumerate() {
        let n = |x: &str| format!("blk.{i}.{x}");
        let hd = if local { HD_LOCAL } else { HD_GLOBAL };
        let (q, kv) = (N_HEAD * hd, N_HEAD_KV * hd);
        let own_kv = i < N_LAYER - SHARED;
        add(n("attn_norm.weight"), vec![D], Init::Around(1.0, 0.2));
        add(n("attn_q.weight"), vec![D, q], Init::Normal(1.2 * inv(D)));
        add(n("attn_q_norm.weight"), vec![hd], Init::Around(1.0, 0.3));
        if own_kv {
            add(n("attn_k.weight"), vec![D, kv], Init::Normal(1.2 * inv(D)));
            add(n("attn_v.weight"), vec![D, kv], Init::Normal(inv(D)));
            add(n("attn_k_norm.weight"), vec![hd], Init::Around(1.0, 0.3));
        }
        add(
            n("attn_output.weight"),
            vec![q, D],
            Init::Normal(0.6 * inv(q)),
        );
        add(
            n("post_attention_norm.weight"),
            vec![D],
            Init::Around(4.0, 0.3),
        );
        let f = ff(i);
        add(n("ffn_norm.weight"), vec![D], Init::Around(1.0, 0.2));
        add(n("ffn_gate.weight"), vec![D, f], Init::Normal(inv(D)));
        add(n("ffn_up.weight"), vec![D, f], Init::Normal(inv(D)));
        add(n("ffn_down.weight"), vec![f, D], Init::Normal(1.2 * inv(f)));
        add(n("post_ffw_norm.weight"), vec![D], Init::Around(4.0, 0.3));
        add(
            n("inp_gate.weight"),
            vec![D, PL],
            Init::Normal(2.0 * inv(D)),
        );
        add(n("proj.weight"), vec![PL, D], Init::Normal(inv(PL)));
        add(n("post_norm.weight"), vec![D], Init::Around(2.0, 0.3));
        add(
            n("layer_output_scale.weight"),
            vec![1],
            Init::Around(0.8, 0.1),
        );
    }
    add(
        "output_norm.weight".into(),
        vec![D],
        Init::Around(0.05, 0.01),
    );
    t
}

fn meta() -> Vec<(String, MetaValue)> {
    let u = MetaValue::U32;
    let f = MetaValue::F32;
    let m: Vec<(&str, MetaValue)> = vec![
        ("block_count", u(N_LAYER as u32)),
        ("context_length", u(CTX)),
        ("embedding_length", u(D as u32)),
        (
            "feed_forward_length",
            MetaValue::Array(MetaArray::I32((0..N_LAYER).map(|i| ff(i) as i32).collect())),
        ),
        ("attention.head_count", u(N_HEAD as u32)),
        ("attention.head_count_kv", u(N_HEAD_KV as u32)),
        ("attention.key_length", u(HD_GLOBAL as u32)),
        ("attention.value_length", u(HD_GLOBAL as u32)),
        ("attention.key_length_swa", u(HD_LOCAL as u32)),
        ("attention.value_length_swa", u(HD_LOCAL as u32)),
        ("attention.layer_norm_rms_epsilon", f(1e-6)),
        ("attention.sliding_window", u(64)),
        (
            "attention.sliding_window_pattern",
            MetaValue::Array(MetaArray::Bool(LOCAL.to_vec())),
        ),
        ("attention.shared_kv_layers", u(SHARED as u32)),
        ("rope.freq_base", f(1_000_000.0)),
        ("rope.freq_base_swa", f(10_000.0)),
        ("rope.dimension_count", u(HD_GLOBAL as u32)),
        ("rope.dimension_count_swa", u(HD_LOCAL as u32)),
        ("embedding_length_per_layer_input", u(PL as u32)),
        ("final_logit_softcapping", f(30.0)),
    ];
    m.into_iter()
        .map(|(k, v)| (format!("gemma4.{k}"), v))
        .collect()
}

/// The "gemma4" proof variant.
pub(super) fn gemma4() -> Variant {
    Variant {
        name: "gemma4",
        covers: "gemma4: local/global layers (window 64) with local heads half as wide (128 vs 256) and their own RoPE dims and base, rope_freqs on the global layers, V RMS-normed, unscaled scores, the last 2 layers reading the K/V of the last local and global layers before them with double-wide FFNs, per-layer embeddings 256 wide, per-layer output scale, final softcap 30",
        spec: ModelSpec {
            arch: "gemma4",
            meta: meta(),
            tensors: tensors(),
            n_layer: N_LAYER,
        },
    }
}
