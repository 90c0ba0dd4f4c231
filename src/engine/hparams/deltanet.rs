//! Qwen3.5's gated DeltaNet layers as the file describes them (llama.cpp
//! `llama_model_qwen35::load_arch_hparams`): the `ssm.*` keys, which layers are recurrent
//! (`attention.recurrent_layers`, else every layer but each `full_attention_interval`-th,
//! default 4), and the multi-section RoPE of the attention layers (`rope.dimension_sections`).

use super::{inconsistent, invalid, HParamsError, Keys};
use crate::gguf::{MetaArray, MetaValue};
use serde::Serialize;

/// The gated DeltaNet mixer's shape and the layers that run it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GatedDeltaNet {
    /// Taps of the causal depthwise convolution over q, k and v (`ssm.conv_kernel`).
    pub d_conv: u32,
    /// Width of one key (and value) head, the side of each head's state matrix
    /// (`ssm.state_size`).
    pub head_dim: u32,
    /// Key heads (`ssm.group_count`).
    pub n_k_heads: u32,
    /// Value heads (`ssm.time_step_rank`; a multiple of the key heads: value head `h` reads
    /// key head `h % n_k_heads`, as ggml_gated_delta_net broadcasts).
    pub n_v_heads: u32,
    /// Per layer: true when the layer's mixer is the gated DeltaNet.
    pub layers: Vec<bool>,
}

impl GatedDeltaNet {
    /// `n_k_heads * head_dim`: the width of q and of k.
    pub fn key_dim(&self) -> usize {
        (self.n_k_heads * self.head_dim) as usize
    }

    /// `n_v_heads * head_dim` (`ssm.inner_size`): the width of v, of the gate z and of the
    /// output.
    pub fn value_dim(&self) -> usize {
        (self.n_v_heads * self.head_dim) as usize
    }

    /// Channels of the convolution: q, k, then v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 values of one layer's state: the convolution's last `d_conv - 1` inputs, then one
    /// `head_dim x head_dim` matrix per value head.
    pub fn state_floats(&self) -> usize {
        (self.d_conv as usize - 1) * self.conv_dim()
            + self.n_v_heads as usize * (self.head_dim * self.head_dim) as usize
    }

    /// Layers that run the DeltaNet.
    pub fn n_recurrent(&self) -> usize {
        self.layers.iter().filter(|&&r| r).count()
    }

    /// For the one-line variant: "gated DeltaNet (2 key / 4 value heads of 64, 4 conv taps)
    /// on 3 of 4 layers, gated attention".
    pub fn describe(&self, n_layer: u32) -> String {
        format!(
            "gated DeltaNet ({} key / {} value heads of {}, {} conv taps) on {} of {n_layer} layers, gated attention",
            self.n_k_heads,
            self.n_v_heads,
            self.head_dim,
            self.d_conv,
            self.n_recurrent(),
        )
    }

    /// True when layer `il` runs the DeltaNet.
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.layers.get(il).copied().unwrap_or(false)
    }
}

/// For a family with the DeltaNet (`used`): reads its keys and the layer pattern, and checks
/// that the multi-section RoPE is, for text, the NeoX RoPE of `rope_dim` dimensions kiln
/// applies. (A DeltaNet layer's `attn_qkv` is its own projection, not a fused attention one.)
pub(super) fn read(
    k: &Keys<'_>,
    used: bool,
    n_layer: u32,
    rope_dim: u32,
) -> Result<Option<GatedDeltaNet>, HParamsError> {
    if !used {
        return Ok(None);
    }
    let d_conv = k.u32_pos("ssm.conv_kernel")?;
    if d_conv < 2 {
        return Err(invalid(
            k.key("ssm.conv_kernel"),
            d_conv,
            "must be at least 2",
        ));
    }
    let d_inner = k.u32_pos("ssm.inner_size")?;
    let head_dim = k.u32_pos("ssm.state_size")?;
    let n_v_heads = k.u32_pos("ssm.time_step_rank")?;
    let n_k_heads = k.u32_pos("ssm.group_count")?;
    if !n_v_heads.is_multiple_of(n_k_heads) {
        return Err(inconsistent(format!(
            "{n_v_heads} value heads (ssm.time_step_rank) are not a multiple of {n_k_heads} key heads (ssm.group_count)"
        )));
    }
    if u64::from(d_inner) != u64::from(n_v_heads) * u64::from(head_dim) {
        return Err(inconsistent(format!(
            "ssm.inner_size {d_inner} is not {n_v_heads} value heads x state size {head_dim} (the delta rule needs square head states)"
        )));
    }
    let layers = match k.f.get(&k.key("attention.recurrent_layers")) {
        Some(MetaValue::Array(arr)) => {
            let v: Option<Vec<bool>> = match arr {
                MetaArray::Bool(v) if v.len() == n_layer as usize => Some(v.clone()),
                _ => None,
            };
            v.ok_or_else(|| {
                invalid(
                    k.key("attention.recurrent_layers"),
                    arr.type_desc(),
                    "must be one boolean per layer",
                )
            })?
        }
        _ => {
            let every = k.u32_opt("full_attention_interval")?.unwrap_or(4);
            if every == 0 {
                return Err(invalid(
                    k.key("full_attention_interval"),
                    0,
                    "must be positive",
                ));
            }
            (0..n_layer)
                .map(|i| !(i + 1).is_multiple_of(every))
                .collect()
        }
    };
    check_sections(k, rope_dim)?;
    Ok(Some(GatedDeltaNet {
        d_conv,
        head_dim,
        n_k_heads,
        n_v_heads,
        layers,
    }))
}

/// llama.cpp rotates qwen35's q and k with interleaved multi-section RoPE (`ggml_rope_multi`,
/// `LLAMA_ROPE_TYPE_IMROPE`); a text token's position is the same in the first three sections
/// and 0 in the fourth. So every pair the first three sections cover rotates exactly as NeoX
/// RoPE does; a pair falling in the fourth would stay unrotated, which kiln does not model:
/// such a file is refused by name.
fn check_sections(k: &Keys<'_>, rope_dim: u32) -> Result<(), HParamsError> {
    let key = k.key("rope.dimension_sections");
    let s: Vec<i64> = match k.f.get(&key) {
        Some(MetaValue::Array(MetaArray::I32(v))) => v.iter().map(|&x| i64::from(x)).collect(),
        Some(MetaValue::Array(MetaArray::U32(v))) => v.iter().map(|&x| i64::from(x)).collect(),
        Some(MetaValue::Array(arr)) => {
            return Err(invalid(key, arr.type_desc(), "must be integers"));
        }
        Some(_) => return Err(invalid(key, "a scalar", "must be an array of 4 integers")),
        None => return Err(HParamsError::Missing { key }),
    };
    if s.len() < 3 || s.iter().any(|&x| x < 0) {
        return Err(invalid(
            key,
            format!("{s:?}"),
            "must be 4 non-negative integers",
        ));
    }
    let total: i64 = s.iter().take(4).sum();
    if total <= 0 {
        return Err(invalid(key, format!("{s:?}"), "must not all be 0"));
    }
    for pair in 0..i64::from(rope_dim / 2) {
        let sector = pair % total;
        let text = match sector % 3 {
            0 => sector < 3 * s[0],
            1 => sector < 3 * s[1],
            _ => sector < 3 * s[2],
        };
        if !text {
            return Err(invalid(
                key,
                format!("{s:?}"),
                "leaves rotated pairs in the fourth section (unrotated for text); kiln rotates every pair",
            ));
        }
    }
    Ok(())
}

impl GatedDeltaNet {
    /// Checks a DeltaNet layer's tensors (`blk.{il}.*`, shapes as llama.cpp's
    /// `load_block_trunk` creates them) with `expect(name, shape, required)`.
    pub(super) fn check_tensors(
        &self,
        expect: &super::ExpectTensor<'_>,
        il: u32,
        e: u64,
    ) -> Result<(), HParamsError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (vd, hv) = (self.value_dim() as u64, u64::from(self.n_v_heads));
        expect(&n("attn_qkv.weight"), &[e, self.conv_dim() as u64], true)?;
        expect(&n("attn_gate.weight"), &[e, vd], true)?;
        expect(
            &n("ssm_conv1d.weight"),
            &[u64::from(self.d_conv), self.conv_dim() as u64],
            true,
        )?;
        expect(&n("ssm_dt.bias"), &[hv], true)?;
        expect(&n("ssm_a"), &[hv], true)?;
        expect(&n("ssm_beta.weight"), &[e, hv], true)?;
        expect(&n("ssm_alpha.weight"), &[e, hv], true)?;
        expect(&n("ssm_norm.weight"), &[u64::from(self.head_dim)], true)?;
        expect(&n("ssm_out.weight"), &[vd, e], true)
    }
}
