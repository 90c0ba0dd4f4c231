//! The qwen35moe proof variant (Qwen3.5-35B-A3B's architecture): the qwen35 proof model's
//! mixers (gated DeltaNet on three layers, gated attention on the fourth) with a mixture of
//! experts as every FFN, and its shared expert gated by the sigmoid of its own router row.

use super::{f, u, variant, Experts, Parts, Shape, Variant, BASE, QWEN35_GDN};

/// Experts per layer (not 8: llama-quantize's mixes special-case 8-expert models).
const N_EXPERT: u32 = 4;
/// Hidden width of one expert and of the shared expert (rows of 256 for the K-quants).
const WIDTH: u32 = 256;

/// The qwen35moe proof variant.
pub(super) fn qwen35moe() -> Variant {
    variant(
        "qwen35moe",
        "qwen35moe: qwen35's gated DeltaNet (layers 0-2) and gated attention (layer 3) with a mixture of 4 experts of width 256 as the FFN, 2 used, normalized softmax router, a shared expert of width 256 scaled by sigmoid(ffn_gate_inp_shexp . m)",
        "qwen35moe",
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
            moe: Some(Experts {
                n_expert: u64::from(N_EXPERT),
                width: u64::from(WIDTH),
                shared: Some(u64::from(WIDTH)),
                shared_gate: true,
                biases: false,
                gain: 1.0,
            }),
            ..Parts::default()
        },
        [
            vec![
                ("rope.freq_base", f(10_000_000.0)),
                ("rope.dimension_count", u(32)),
                ("expert_count", u(N_EXPERT)),
                ("expert_used_count", u(2)),
                ("expert_feed_forward_length", u(WIDTH)),
                ("expert_shared_feed_forward_length", u(WIDTH)),
            ],
            QWEN35_GDN.meta([6, 5, 5, 0]),
        ]
        .concat(),
    )
}
