//! Granite 4.0-H's Mamba2 layers as the file describes them (llama.cpp
//! `llama_model_granite_hybrid::load_arch_hparams`): a per-layer `attention.head_count_kv`
//! array whose 0 entries are Mamba2 layers, and the `ssm.*` keys of their shape.

use super::shortconv::{head_count_kv, per_layer_kv, ShortConv};
use super::ArchRules;
use super::{inconsistent, invalid, ExpectTensor, HParamsError, Keys};
use serde::Serialize;

/// The Mamba2 mixer's shape and which layers run it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mamba2 {
    /// Taps of the causal depthwise convolution over x, B and C (`ssm.conv_kernel`, 4).
    pub d_conv: u32,
    /// Width of x and z (`ssm.inner_size`; `n_head * head_dim`).
    pub d_inner: u32,
    /// State size per head dimension, the width of B and C per group (`ssm.state_size`).
    pub d_state: u32,
    /// Groups of B and C shared by `n_head / n_group` heads each (`ssm.group_count`).
    pub n_group: u32,
    /// Heads, each with its own dt, A and D (`ssm.time_step_rank`).
    pub n_head: u32,
    /// Per layer: true when the layer's mixer is Mamba2.
    pub layers: Vec<bool>,
}

impl Mamba2 {
    /// Layers that run Mamba2.
    pub fn n_ssm(&self) -> usize {
        self.layers.iter().filter(|&&c| c).count()
    }

    /// True when layer `il` runs Mamba2.
    pub fn is_ssm(&self, il: usize) -> bool {
        self.layers.get(il).copied().unwrap_or(false)
    }

    /// Width of one head of x (`d_inner / n_head`).
    pub fn head_dim(&self) -> u32 {
        self.d_inner / self.n_head
    }

    /// Channels of the convolution: x, then B, then C (`d_inner + 2 n_group d_state`).
    pub fn conv_dim(&self) -> u64 {
        u64::from(self.d_inner) + 2 * u64::from(self.n_group) * u64::from(self.d_state)
    }

    /// Rows of the input projection: z, x, B, C, dt.
    pub fn d_in_proj(&self) -> u64 {
        u64::from(self.d_inner) + self.conv_dim() + u64::from(self.n_head)
    }

    /// In words, for [`super::HParams::variant`].
    pub fn describe(&self, n_layer: u32) -> String {
        format!(
            "Mamba2 (inner {}, state {}, {} heads, {} groups, conv {}) on {} of {n_layer} layers",
            self.d_inner,
            self.d_state,
            self.n_head,
            self.n_group,
            self.d_conv,
            self.n_ssm()
        )
    }

    /// The Mamba2 tensors of layer `il` (llama.cpp `load_arch_tensors`).
    pub(super) fn check_tensors(
        &self,
        expect: &ExpectTensor<'_>,
        il: u32,
        e: u64,
    ) -> Result<(), HParamsError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (inner, nh, ng) = (
            u64::from(self.d_inner),
            u64::from(self.n_head),
            u64::from(self.n_group),
        );
        expect(&n("ssm_in.weight"), &[e, self.d_in_proj()], true)?;
        expect(
            &n("ssm_conv1d.weight"),
            &[u64::from(self.d_conv), self.conv_dim()],
            true,
        )?;
        expect(&n("ssm_conv1d.bias"), &[self.conv_dim()], false)?;
        expect(&n("ssm_dt.bias"), &[nh], true)?;
        expect(&n("ssm_a"), &[1, nh], true)?;
        expect(&n("ssm_d"), &[1, nh], true)?;
        expect(&n("ssm_norm.weight"), &[inner / ng, ng], true)?;
        expect(&n("ssm_out.weight"), &[inner, e], true)
    }
}

/// The attention layers' kv heads and the family's recurrent layers, if any: lfm2's short
/// convolutions or granitehybrid's Mamba2 (`attention.head_count_kv` 0 entries).
pub(super) fn mixers(
    k: &Keys<'_>,
    rules: &ArchRules,
    n_layer: u32,
    n_head: u32,
) -> Result<(u32, Option<ShortConv>, Option<Mamba2>), HParamsError> {
    if rules.mamba2 {
        let (h, m) = read(k, n_layer, n_head)?;
        return Ok((h, None, Some(m)));
    }
    let (h, c) = head_count_kv(k, rules.shortconv, n_layer, n_head)?;
    Ok((h, c, None))
}

/// `attention.head_count_kv` (0 = a Mamba2 layer) and the `ssm.*` keys: the attention layers'
/// kv heads and the Mamba2 shape.
fn read(k: &Keys<'_>, n_layer: u32, n_head: u32) -> Result<(u32, Mamba2), HParamsError> {
    let (n_head_kv, layers) = per_layer_kv(k, true, n_layer, n_head)?;
    let m = Mamba2 {
        d_conv: k.u32_pos("ssm.conv_kernel")?,
        d_inner: k.u32_pos("ssm.inner_size")?,
        d_state: k.u32_pos("ssm.state_size")?,
        n_group: k.u32_pos("ssm.group_count")?,
        n_head: k.u32_pos("ssm.time_step_rank")?,
        layers,
    };
    if m.d_conv < 2 {
        return Err(invalid(
            k.key("ssm.conv_kernel"),
            m.d_conv,
            "must be at least 2",
        ));
    }
    if !m.d_inner.is_multiple_of(m.n_head) || !m.n_head.is_multiple_of(m.n_group) {
        return Err(inconsistent(format!(
            "Mamba2 inner size {} must be a multiple of its {} heads, and they of its {} groups",
            m.d_inner, m.n_head, m.n_group
        )));
    }
    Ok((n_head_kv, m))
}
