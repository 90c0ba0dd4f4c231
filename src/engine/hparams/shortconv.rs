//! LFM2's short-convolution layers as the file describes them: a per-layer
//! `attention.head_count_kv` array whose 0 entries are convolution layers, and
//! `shortconv.l_cache`, the convolution's taps (llama.cpp `llama_model_lfm2::load_arch_hparams`).

use super::{inconsistent, invalid, HParamsError, Keys};
use crate::gguf::{MetaArray, MetaValue};
use serde::Serialize;

/// LFM2's short convolutions: which layers run one instead of attention, and its taps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShortConv {
    /// Taps of the causal depthwise convolution (`shortconv.l_cache`, 3 in LFM2): each
    /// output sees its own position and the `l_cache - 1` before it.
    pub l_cache: u32,
    /// Per layer: true when the layer's mixer is the short convolution.
    pub layers: Vec<bool>,
}

impl ShortConv {
    /// Layers that run the convolution.
    pub fn n_conv(&self) -> usize {
        self.layers.iter().filter(|&&c| c).count()
    }

    /// True when layer `il` runs the convolution.
    pub fn is_conv(&self, il: usize) -> bool {
        self.layers.get(il).copied().unwrap_or(false)
    }
}

/// `attention.head_count_kv` for lfm2 and the families without recurrent layers: with
/// `shortconv` (lfm2) a 0 entry marks a short-convolution layer (read with `shortconv.l_cache`).
/// Returns the kv heads of an attention layer and the short convolutions, if any.
pub(super) fn head_count_kv(
    k: &Keys<'_>,
    shortconv: bool,
    n_layer: u32,
    n_head: u32,
) -> Result<(u32, Option<ShortConv>), HParamsError> {
    let (n_head_kv, conv) = per_layer_kv(k, shortconv, n_layer, n_head)?;
    if !shortconv {
        return Ok((n_head_kv, None));
    }
    if k.f
        .get_u32(&k.key("attention.sliding_window"))?
        .unwrap_or(0)
        > 0
    {
        return Err(invalid(
            k.key("attention.sliding_window"),
            "set",
            "LFM2 with sliding-window attention is not supported",
        ));
    }
    let l_cache = k.u32_pos("shortconv.l_cache")?;
    if l_cache < 2 {
        return Err(invalid(
            k.key("shortconv.l_cache"),
            l_cache,
            "must be at least 2",
        ));
    }
    Ok((
        n_head_kv,
        Some(ShortConv {
            l_cache,
            layers: conv,
        }),
    ))
}

/// `attention.head_count_kv`, one value for every layer or (llama.cpp's per-layer array) one
/// per layer: the attention layers' kv heads (they must agree) and, per layer, whether its
/// entry is 0, a recurrent layer (lfm2's short convolution, granitehybrid's Mamba2), refused
/// unless `recurrent_ok`.
pub(super) fn per_layer_kv(
    k: &Keys<'_>,
    recurrent_ok: bool,
    n_layer: u32,
    n_head: u32,
) -> Result<(u32, Vec<bool>), HParamsError> {
    let key = k.key("attention.head_count_kv");
    let per_layer: Vec<u32> = match k.f.get(&key) {
        Some(MetaValue::Array(arr)) => {
            let v: Option<Vec<u32>> = match arr {
                MetaArray::I32(v) => v.iter().map(|&x| u32::try_from(x).ok()).collect(),
                MetaArray::U32(v) => Some(v.clone()),
                MetaArray::I16(v) => v.iter().map(|&x| u32::try_from(x).ok()).collect(),
                MetaArray::U16(v) => Some(v.iter().map(|&x| u32::from(x)).collect()),
                _ => None,
            };
            match v {
                Some(v) if v.len() == n_layer as usize => v,
                _ => {
                    return Err(invalid(
                        key,
                        arr.type_desc(),
                        "must be one non-negative integer per layer",
                    ))
                }
            }
        }
        _ => vec![k.u32_opt("attention.head_count_kv")?.unwrap_or(n_head); n_layer as usize],
    };
    let recurrent: Vec<bool> = per_layer.iter().map(|&h| h == 0).collect();
    if recurrent.iter().any(|&c| c) && !recurrent_ok {
        return Err(invalid(key, 0, "must be positive"));
    }
    let mut heads = per_layer.iter().copied().filter(|&h| h > 0);
    let n_head_kv = heads.next().unwrap_or(n_head);
    if heads.any(|h| h != n_head_kv) {
        return Err(inconsistent(format!(
            "the attention layers' kv heads differ ({per_layer:?}); kiln needs one count"
        )));
    }
    Ok((n_head_kv, recurrent))
}
