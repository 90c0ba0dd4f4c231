//! The granitehybrid proof variants (Granite 4.0-H): Mamba2 layers (`ssm_*` tensors, `ssm.*`
//! keys) around one attention layer, with granite's multipliers; a dense FFN, or (Granite
//! 4.0-H Tiny) a mixture of experts with a shared expert.

use super::{f, u, variant, Experts, Init, Parts, Shape, Variant, BASE, D};
use crate::gguf::{MetaArray, MetaValue};

/// The Mamba2 layers' shape (`ssm.*`) and the attention layers between them.
#[derive(Clone, Copy)]
pub(super) struct Ssm {
    pub d_conv: u64,
    pub d_inner: u64,
    pub d_state: u64,
    pub n_group: u64,
    pub n_head: u64,
    pub attn: &'static [usize],
}

/// The attention layers of the granitehybrid proof model (Granite 4.0-H's Mamba2 layers
/// outnumber its attention ones).
const GRANITEHYBRID_ATTN: [usize; 1] = [2];

/// Layer `i`'s Mamba2 tensors (llama.cpp `llama_model_granite_hybrid::load_arch_tensors`),
/// `branch` the gain of its output projection.
pub(super) fn tensors(m: Ssm, i: usize, branch: f32, add: &mut impl FnMut(String, Vec<u64>, Init)) {
    let n = |x: &str| format!("blk.{i}.{x}");
    let inv = |n: u64| 1.0 / (n as f32).sqrt();
    let cd = m.d_inner + 2 * m.n_group * m.d_state;
    let (nh, inner) = (m.n_head, m.d_inner);
    add(
        n("ssm_in.weight"),
        vec![D, inner + cd + nh],
        Init::Normal(inv(D)),
    );
    add(
        n("ssm_conv1d.weight"),
        vec![m.d_conv, cd],
        Init::Normal(0.5),
    );
    add(n("ssm_conv1d.bias"), vec![cd], Init::Normal(0.1));
    add(n("ssm_dt.bias"), vec![nh], Init::Normal(0.5));
    add(n("ssm_a"), vec![1, nh], Init::Ramp(-0.5, -4.0));
    add(n("ssm_d"), vec![1, nh], Init::Around(1.0, 0.3));
    add(
        n("ssm_norm.weight"),
        vec![inner / m.n_group, m.n_group],
        Init::Around(1.0, 0.2),
    );
    add(
        n("ssm_out.weight"),
        vec![inner, D],
        Init::Normal(0.6 * branch * inv(inner)),
    );
}

/// The proof model's Mamba2 shape, attention on the layers `attn`.
fn ssm(attn: &'static [usize]) -> Ssm {
    Ssm {
        d_conv: 4,
        d_inner: 2 * D,
        d_state: 64,
        n_group: 2,
        n_head: 8,
        attn,
    }
}

/// The keys of a granitehybrid proof model of `n_layer` layers (attention on `attn`).
fn keys(n_layer: usize, attn: &[usize]) -> Vec<(&'static str, MetaValue)> {
    vec![
        ("ssm.conv_kernel", u(4)),
        ("ssm.inner_size", u(2 * D as u32)),
        ("ssm.state_size", u(64)),
        ("ssm.group_count", u(2)),
        ("ssm.time_step_rank", u(8)),
        (
            "attention.head_count_kv",
            MetaValue::Array(MetaArray::I32(
                (0..n_layer)
                    .map(|i| if attn.contains(&i) { 2 } else { 0 })
                    .collect(),
            )),
        ),
        ("embedding_scale", f(12.0)),
        ("residual_scale", f(0.22)),
        ("logit_scale", f(8.0)),
        ("attention.scale", f(0.02)),
    ]
}

const GRANITE_SHAPE: Shape = Shape {
    n_layer: 5,
    out_norm: 0.4,
    branch: 40.0,
    ..BASE
};

/// The granitehybrid proof variant.
pub(super) fn granitehybrid() -> Variant {
    variant(
        "granitehybrid",
        "granitehybrid: Mamba2 (inner 512 = 2 n_embd, state 64, 8 heads of 64, 2 groups, conv 4) on 4 of 5 layers, attention on layer 2 (per-layer head_count_kv); granite's multipliers on both mixers",
        "granitehybrid",
        GRANITE_SHAPE,
        Parts {
            mamba2: Some(ssm(&GRANITEHYBRID_ATTN)),
            ..Parts::default()
        },
        keys(5, &GRANITEHYBRID_ATTN),
    )
}

/// The MoE granitehybrid proof variant (Granite-4.0-H-Tiny's FFN): 4 layers, attention on
/// layer 2, every FFN a mixture of 4 experts (width `feed_forward_length`) with a shared
/// expert.
pub(super) fn granitehybrid_moe() -> Variant {
    const N: usize = 4;
    variant(
        "granitehybrid-moe",
        "granitehybrid with a mixture of experts (Granite 4.0-H Tiny): Mamba2 on 3 of 4 layers, attention on layer 2, every FFN 4 experts of width 256 (feed_forward_length), 2 used, normalized softmax router, a shared expert of width 256; granite's multipliers",
        "granitehybrid",
        Shape {
            n_layer: N,
            ..GRANITE_SHAPE
        },
        Parts {
            mamba2: Some(ssm(&GRANITEHYBRID_ATTN)),
            moe: Some(Experts {
                n_expert: 4,
                width: 256,
                shared: Some(256),
                shared_gate: false,
                biases: false,
                gain: 1.0,
            }),
            ..Parts::default()
        },
        [
            keys(N, &GRANITEHYBRID_ATTN),
            vec![
                ("feed_forward_length", u(256)),
                ("expert_count", u(4)),
                ("expert_used_count", u(2)),
                ("expert_shared_feed_forward_length", u(256)),
            ],
        ]
        .concat(),
    )
}
