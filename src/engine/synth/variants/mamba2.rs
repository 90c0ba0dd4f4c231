//! The granitehybrid proof variant (Granite 4.0-H): Mamba2 layers (`ssm_*` tensors, `ssm.*`
//! keys) around one attention layer, with granite's multipliers.

use super::{f, u, variant, Init, Parts, Shape, Variant, BASE, D};
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

/// The granitehybrid proof variant.
pub(super) fn granitehybrid() -> Variant {
    variant(
        "granitehybrid",
        "granitehybrid: Mamba2 (inner 512 = 2 n_embd, state 64, 8 heads of 64, 2 groups, conv 4) on 4 of 5 layers, attention on layer 2 (per-layer head_count_kv); granite's multipliers on both mixers",
        "granitehybrid",
        Shape {
            n_layer: 5,
            out_norm: 0.4,
            branch: 40.0,
            ..BASE
        },
        Parts {
            mamba2: Some(Ssm {
                d_conv: 4,
                d_inner: 2 * D,
                d_state: 64,
                n_group: 2,
                n_head: 8,
                attn: &GRANITEHYBRID_ATTN,
            }),
            ..Parts::default()
        },
        vec![
            ("ssm.conv_kernel", u(4)),
            ("ssm.inner_size", u(2 * D as u32)),
            ("ssm.state_size", u(64)),
            ("ssm.group_count", u(2)),
            ("ssm.time_step_rank", u(8)),
            (
                "attention.head_count_kv",
                MetaValue::Array(MetaArray::I32(
                    (0..5)
                        .map(|i| if GRANITEHYBRID_ATTN.contains(&i) { 2 } else { 0 })
                        .collect(),
                )),
            ),
            ("embedding_scale", f(12.0)),
            ("residual_scale", f(0.22)),
            ("logit_scale", f(8.0)),
            ("attention.scale", f(0.02)),
        ],
    )
}
