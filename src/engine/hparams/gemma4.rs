//! Gemma 4's keys as llama.cpp reads them (`llama_model_gemma4::load_arch_hparams` and
//! `load_arch_tensors`, `llama-hparams.cpp`): the local (sliding-window) layers' own head width
//! and RoPE dims (`attention.key_length_swa`, `rope.dimension_count_swa`), the per-layer
//! embedding width (`embedding_length_per_layer_input`), the layers that read an earlier
//! layer's K/V (`attention.shared_kv_layers`), and a per-layer FFN width
//! (`feed_forward_length` may be an array: E2B's shared-K/V layers are twice as wide).

use super::{inconsistent, invalid, ExpectTensor, HParams, HParamsError, Keys, SlidingWindow};
use crate::gguf::{GgufFile, MetaArray, MetaValue};
use serde::Serialize;

/// What Gemma 4 adds to gemma3's description.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gemma4 {
    /// Width of one layer's slice of the per-layer embeddings; 0 when the file has none.
    pub n_embd_per_layer: u32,
    /// Head width of the local layers (`attention.key_length_swa`); the global layers' is
    /// `HParams::head_dim`. Never above it (kiln keeps one K/V width in its cache and pads the
    /// local layers' heads with zeros).
    pub head_dim_swa: u32,
    /// Rotated dims per head of the local layers (`rope.dimension_count_swa`).
    pub rope_dim_swa: u32,
    /// Layers `0..n_layer_kv` write their own K/V; every later layer reads the K/V of the last
    /// such layer of its kind (llama.cpp's `layer_reuse_cb`: a local layer layer
    /// `n_layer_kv - 2`'s, a global one layer `n_layer_kv - 1`'s).
    pub n_layer_kv: u32,
}

impl Gemma4 {
    /// Reads the keys; `head_dim` is the global layers' head width and `window` says which
    /// layers are local.
    pub(super) fn from_keys(
        k: &Keys<'_>,
        n_layer: u32,
        head_dim: u32,
        window: Option<&SlidingWindow>,
    ) -> Result<Gemma4, HParamsError> {
        let window =
            window.ok_or_else(|| inconsistent("gemma4 without a sliding window".into()))?;
        let head_dim_swa = match k.u32_opt("attention.key_length_swa")? {
            Some(0) => {
                return Err(invalid(
                    k.key("attention.key_length_swa"),
                    0,
                    "must be positive",
                ))
            }
            Some(d) => d,
            None => head_dim,
        };
        if head_dim_swa > head_dim {
            return Err(invalid(
                k.key("attention.key_length_swa"),
                head_dim_swa,
                "a local head wider than a global one is not supported",
            ));
        }
        if let Some(v) = k.u32_opt("attention.value_length_swa")? {
            if v != head_dim_swa {
                return Err(inconsistent(format!(
                    "local value head width {v} differs from local key head width {head_dim_swa}"
                )));
            }
        }
        let rope_dim_swa = k
            .u32_opt("rope.dimension_count_swa")?
            .unwrap_or(head_dim_swa);
        if rope_dim_swa == 0 || rope_dim_swa > head_dim_swa || !rope_dim_swa.is_multiple_of(2) {
            return Err(invalid(
                k.key("rope.dimension_count_swa"),
                rope_dim_swa,
                "must be even and in 1..=key_length_swa",
            ));
        }
        let shared = k.u32_opt("attention.shared_kv_layers")?.unwrap_or(0);
        let n_layer_kv = n_layer.saturating_sub(shared);
        if shared > 0 {
            let kind_ok = n_layer_kv >= 2
                && window.local[n_layer_kv as usize - 2]
                && !window.local[n_layer_kv as usize - 1];
            if !kind_ok {
                return Err(invalid(
                    k.key("attention.shared_kv_layers"),
                    shared,
                    "the two layers before the shared ones must be a local then a global layer",
                ));
            }
        }
        Ok(Gemma4 {
            n_embd_per_layer: k.u32_opt("embedding_length_per_layer_input")?.unwrap_or(0),
            head_dim_swa,
            rope_dim_swa,
            n_layer_kv,
        })
    }

    /// The layer whose K/V layer `il` reads, when it has none of its own.
    pub fn kv_source(&self, il: usize, local: bool) -> Option<usize> {
        let n = self.n_layer_kv as usize;
        (il >= n).then(|| if local { n - 2 } else { n - 1 })
    }

    /// "per-layer embeddings 256, local heads 256 wide (RoPE 256), 20 layers reading earlier K/V".
    pub fn describe(&self, n_layer: u32) -> String {
        let mut s = format!(
            "local heads {} wide (RoPE {})",
            self.head_dim_swa, self.rope_dim_swa
        );
        if self.n_embd_per_layer > 0 {
            s = format!("per-layer embeddings {}, {s}", self.n_embd_per_layer);
        }
        if self.n_layer_kv < n_layer {
            s.push_str(&format!(
                ", {} layers reading earlier K/V",
                n_layer - self.n_layer_kv
            ));
        }
        s
    }
}

/// `feed_forward_length`: one width for every layer, or one per layer (llama.cpp's
/// `get_key_or_arr`). Returns the widest and the per-layer widths.
pub(super) fn ff_lengths(k: &Keys<'_>, n_layer: u32) -> Result<(u32, Vec<u32>), HParamsError> {
    let key = k.key("feed_forward_length");
    let per_layer: Vec<u32> = match k.f.get(&key) {
        Some(MetaValue::Array(arr)) => {
            let v: Option<Vec<u32>> = match arr {
                MetaArray::I32(v) => v.iter().map(|&x| u32::try_from(x).ok()).collect(),
                MetaArray::U32(v) => Some(v.clone()),
                _ => None,
            };
            match v {
                Some(v) if v.len() == n_layer as usize && v.iter().all(|&x| x > 0) => v,
                _ => {
                    return Err(invalid(
                        key,
                        arr.type_desc(),
                        "must be one positive integer per layer",
                    ))
                }
            }
        }
        _ => vec![k.u32_pos("feed_forward_length")?; n_layer as usize],
    };
    let max = per_layer.iter().copied().max().unwrap_or(0);
    Ok((max, per_layer))
}

impl HParams {
    /// Layer `il`'s attention widths `(q, kv, head)` and whether it writes its own K/V (false on
    /// gemma4's shared-K/V layers).
    pub fn layer_attn(&self, il: u32) -> (u64, u64, u64, bool) {
        let local = self
            .sliding_window
            .as_ref()
            .is_some_and(|w| w.local[il as usize]);
        let (hd, own) = match &self.gemma4 {
            Some(g) if local => (g.head_dim_swa, il < g.n_layer_kv),
            Some(g) => (self.head_dim, il < g.n_layer_kv),
            None => (self.head_dim, true),
        };
        let hd = u64::from(hd);
        (
            u64::from(self.n_head) * hd,
            u64::from(self.n_head_kv) * hd,
            hd,
            own,
        )
    }

    /// Gemma 4's own tensors: the per-layer embedding table, its projection and norm, and per
    /// layer the input gate, projection, post-norm and output scale. Its mixture-of-experts
    /// sizes (26B-A4B) are refused by name.
    pub(super) fn check_gemma4(
        &self,
        g: &Gemma4,
        expect: &ExpectTensor<'_>,
        f: &GgufFile,
    ) -> Result<(), HParamsError> {
        if f.tensor("blk.0.ffn_gate_inp.weight").is_some() {
            return Err(inconsistent(
                "gemma4 with a mixture of experts (ffn_gate_inp) is not supported".into(),
            ));
        }
        let (e, v, nl) = (
            u64::from(self.n_embd),
            u64::from(self.n_vocab),
            u64::from(self.n_layer),
        );
        let pl = u64::from(g.n_embd_per_layer);
        if pl > 0 {
            expect("per_layer_token_embd.weight", &[pl * nl, v], true)?;
            expect("per_layer_model_proj.weight", &[e, pl * nl], true)?;
            expect("per_layer_proj_norm.weight", &[pl], true)?;
        }
        for il in 0..self.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            if pl > 0 {
                expect(&n("inp_gate.weight"), &[e, pl], true)?;
                expect(&n("proj.weight"), &[pl, e], true)?;
                expect(&n("post_norm.weight"), &[e], true)?;
            }
            expect(&n("layer_output_scale.weight"), &[1], false)?;
        }
        Ok(())
    }
}
