//! The tensor-shape checks of a file against its hyper-parameters: every tensor the forward
//! pass will read exists with the shape the metadata implies (a named error otherwise).

use super::{inconsistent, HParams, HParamsError};
use crate::gguf::{same_dims, GgufFile};

impl HParams {
    /// Checks the shapes of the embedding, output and every block's tensors against the
    /// description, and that no block lies beyond `n_layer`.
    pub(super) fn check_tensors(&self, f: &GgufFile) -> Result<(), HParamsError> {
        let (e, v) = (u64::from(self.n_embd), u64::from(self.n_vocab));
        let expect = |name: &str, shape: &[u64], required: bool| -> Result<(), HParamsError> {
            match f.tensor(name) {
                None if required => Err(HParamsError::MissingTensor(name.to_string())),
                None => Ok(()),
                Some(t) if same_dims(&t.shape, shape) => Ok(()),
                Some(t) => Err(inconsistent(format!(
                    "tensor {name} has shape {:?}, the metadata implies {shape:?}",
                    t.shape
                ))),
            }
        };
        expect("token_embd.weight", &[e, v], true)?;
        expect("output.weight", &[e, v], false)?;
        expect("output.bias", &[v], false)?;
        let rules = self.arch.rules();
        expect(rules.output_norm_tensor, &[e], true)?;
        for il in 0..self.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let ff = u64::from(self.n_ff_layers[il as usize]);
            let (q, kv, hd, own_kv) = self.layer_attn(il);
            expect(&n("attn_norm.weight"), &[e], true)?;
            expect(&n(rules.ffn_norm_tensor), &[e], true)?;
            if let Some(c) = self.shortconv.as_ref().filter(|c| c.is_conv(il as usize)) {
                expect(
                    &n("shortconv.conv.weight"),
                    &[u64::from(c.l_cache), e],
                    true,
                )?;
                expect(&n("shortconv.in_proj.weight"), &[e, 3 * e], true)?;
                expect(&n("shortconv.out_proj.weight"), &[e, e], true)?;
                self.check_ffn(&expect, f, il, e, ff)?;
                continue;
            }
            if let Some(g) = self
                .deltanet
                .as_ref()
                .filter(|g| g.is_recurrent(il as usize))
            {
                g.check_tensors(&expect, il, e)?;
                self.check_ffn(&expect, f, il, e, ff)?;
                continue;
            }
            if let Some(m) = self.mamba2.as_ref().filter(|m| m.is_ssm(il as usize)) {
                m.check_tensors(&expect, il, e)?;
                self.check_ffn(&expect, f, il, e, ff)?;
                continue;
            }
            if self.fused_qkv {
                expect(&n("attn_qkv.weight"), &[e, q + 2 * kv], true)?;
                expect(&n("attn_qkv.bias"), &[q + 2 * kv], false)?;
            } else {
                let qg = q * (1 + u64::from(rules.attn_out_gate)); // + each head's gate
                expect(&n("attn_q.weight"), &[e, qg], true)?;
                expect(&n("attn_k.weight"), &[e, kv], own_kv)?;
                // Gemma 4 takes V = K when attn_v is absent.
                expect(
                    &n("attn_v.weight"),
                    &[e, kv],
                    own_kv && self.gemma4.is_none(),
                )?;
            }
            let bias_required = self.has_qkv_bias && !self.fused_qkv;
            expect(&n("attn_q.bias"), &[q], bias_required)?;
            expect(&n("attn_k.bias"), &[kv], bias_required)?;
            expect(&n("attn_v.bias"), &[kv], bias_required)?;
            expect(&n("attn_output.weight"), &[q, e], true)?;
            expect(&n("attn_output.bias"), &[e], false)?;
            if self.qk_norm {
                let (qn, kn) = if self.qk_norm_full { (q, kv) } else { (hd, hd) };
                expect(&n("attn_q_norm.weight"), &[qn], true)?;
                expect(&n("attn_k_norm.weight"), &[kn], own_kv)?;
            }
            if self.post_norms {
                expect(&n("post_attention_norm.weight"), &[e], true)?;
                expect(&n("post_ffw_norm.weight"), &[e], true)?;
            }
            if self.attn_sinks {
                expect(&n("attn_sinks.weight"), &[u64::from(self.n_head)], true)?;
            }
            self.check_ffn(&expect, f, il, e, ff)?;
        }
        if let Some(g) = &self.gemma4 {
            self.check_gemma4(g, &expect, f)?;
        }
        let factors = u64::from(self.rope_dim / 2);
        for name in [
            "rope_freqs.weight",
            "rope_factors_long.weight",
            "rope_factors_short.weight",
        ] {
            expect(name, &[factors], false)?;
        }
        let beyond = format!("blk.{}.", self.n_layer);
        if let Some(t) = f.tensors().iter().find(|t| t.name.starts_with(&beyond)) {
            return Err(inconsistent(format!(
                "tensor {} lies beyond block_count {}",
                t.name, self.n_layer
            )));
        }
        Ok(())
    }
}

/// Checks one tensor: `(name, shape, required)`.
pub(crate) type ExpectTensor<'a> = dyn Fn(&str, &[u64], bool) -> Result<(), HParamsError> + 'a;

impl HParams {
    /// The FFN tensors of layer `il` (`expect(name, shape, required)` checks one).
    fn check_ffn(
        &self,
        expect: &ExpectTensor<'_>,
        f: &GgufFile,
        il: u32,
        e: u64,
        ff: u64,
    ) -> Result<(), HParamsError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        if let Some(m) = &self.moe {
            return m.check_tensors(f, il, e);
        }
        if self.fused_gate_up {
            expect(&n("ffn_up.weight"), &[e, 2 * ff], true)?;
        } else {
            expect(&n("ffn_gate.weight"), &[e, ff], true)?;
            expect(&n("ffn_up.weight"), &[e, ff], true)?;
            expect(&n("ffn_gate.bias"), &[ff], false)?;
            expect(&n("ffn_up.bias"), &[ff], false)?;
        }
        expect(&n("ffn_down.weight"), &[ff, e], true)?;
        expect(&n("ffn_down.bias"), &[e], false)
    }
}
