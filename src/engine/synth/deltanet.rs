//! The qwen35 proof model's parts (see `variants`): the gated DeltaNet layers' tensors, and
//! its metadata (`ssm.*`, the layer pattern, the multi-section RoPE).

use super::{Init, TensorSpec};
use crate::gguf::{MetaArray, MetaValue};

/// A gated DeltaNet's shape: `n_v_heads` value and `n_k_heads` key heads of `head_dim`, a
/// `d_conv`-tap convolution, on every layer but each `interval`-th.
#[derive(Clone, Copy)]
pub(super) struct Gdn {
    pub(super) d_conv: u64,
    pub(super) head_dim: u64,
    pub(super) n_k_heads: u64,
    pub(super) n_v_heads: u64,
    pub(super) interval: usize,
}

impl Gdn {
    /// True when layer `i` runs the DeltaNet (llama.cpp's default pattern).
    pub(super) fn is_recurrent(&self, i: usize) -> bool {
        !(i + 1).is_multiple_of(self.interval)
    }

    /// Layer `i`'s DeltaNet tensors (shapes of `llama_model_qwen35::load_arch_tensors`) for
    /// an `n_embd`-wide model whose branches have gain `branch`.
    pub(super) fn tensors(&self, i: usize, n_embd: u64, branch: f32) -> Vec<TensorSpec> {
        let inv = |n: u64| 1.0 / (n as f32).sqrt();
        let kd = self.n_k_heads * self.head_dim;
        let vd = self.n_v_heads * self.head_dim;
        let c = 2 * kd + vd;
        let hv = self.n_v_heads;
        let n = |x: &str| format!("blk.{i}.{x}");
        let t = |name: String, shape: Vec<u64>, init: Init| TensorSpec { name, shape, init };
        vec![
            t(
                n("attn_qkv.weight"),
                vec![n_embd, c],
                Init::Normal(1.2 * inv(n_embd)),
            ),
            t(
                n("attn_gate.weight"),
                vec![n_embd, vd],
                Init::Normal(inv(n_embd)),
            ),
            t(
                n("ssm_conv1d.weight"),
                vec![self.d_conv, c],
                Init::Normal(0.5),
            ),
            t(n("ssm_dt.bias"), vec![hv], Init::Normal(0.5)),
            // -exp(A_log): negative, a decay of exp(softplus(.) * a) per token.
            t(n("ssm_a"), vec![hv], Init::Around(-0.4, 0.3)),
            t(
                n("ssm_beta.weight"),
                vec![n_embd, hv],
                Init::Normal(inv(n_embd)),
            ),
            t(
                n("ssm_alpha.weight"),
                vec![n_embd, hv],
                Init::Normal(inv(n_embd)),
            ),
            t(
                n("ssm_norm.weight"),
                vec![self.head_dim],
                Init::Around(1.0, 0.2),
            ),
            t(
                n("ssm_out.weight"),
                vec![vd, n_embd],
                Init::Normal(0.6 * branch * inv(vd)),
            ),
        ]
    }

    /// The `ssm.*` keys, the attention interval and `rope.dimension_sections`.
    pub(super) fn meta(&self, sections: [i32; 4]) -> Vec<(&'static str, MetaValue)> {
        let u = |v: u64| MetaValue::U32(v as u32);
        vec![
            ("ssm.conv_kernel", u(self.d_conv)),
            ("ssm.inner_size", u(self.n_v_heads * self.head_dim)),
            ("ssm.state_size", u(self.head_dim)),
            ("ssm.time_step_rank", u(self.n_v_heads)),
            ("ssm.group_count", u(self.n_k_heads)),
            ("full_attention_interval", u(self.interval as u64)),
            (
                "rope.dimension_sections",
                MetaValue::Array(MetaArray::I32(sections.to_vec())),
            ),
        ]
    }
}
