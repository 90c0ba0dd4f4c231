//! The mixture-of-experts keys of a file (`{arch}.expert_count`, `expert_used_count`,
//! `expert_feed_forward_length`, `expert_shared_feed_forward_length`) read as llama.cpp does
//! for the families kiln runs (`load_hparams`, `src/models/{qwen3moe,olmoe,granite-moe,
//! granite-hybrid,qwen35moe}.cpp`), and the shapes of their expert tensors.

use super::{inconsistent, invalid, Activation, HParamsError, Keys};
use crate::gguf::GgufFile;
use serde::Serialize;

/// Most experts per layer accepted (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: u32 = 1024;

/// How a family's router turns its logits into expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Gating {
    /// Softmax over all experts, top-k of the probabilities (llama.cpp's
    /// `LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX`).
    Softmax,
    /// Top-k of the logits themselves, then a softmax over the k chosen logits (llama.cpp's
    /// `LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT`, gpt-oss).
    SoftmaxWeight,
}

/// Whether and how a family's mixture has a shared expert every token runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedRule {
    /// No shared expert.
    None,
    /// A shared expert when `expert_shared_feed_forward_length` is positive (granitemoe,
    /// granitehybrid), its output added to the experts'.
    IfWidth,
    /// Always a shared expert (`expert_shared_feed_forward_length`, default
    /// `feed_forward_length`), its output scaled per token by `sigmoid(ffn_gate_inp_shexp ·
    /// m)` before it is added to the experts' (qwen35moe, as Qwen3-Next).
    Gated,
}

/// The per-family MoE rule of [`super::ArchRules`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeRule {
    pub gating: Gating,
    /// The k chosen weights are divided by their sum (`norm_w` of `build_moe_ffn`).
    pub norm_weights: bool,
    /// An expert's FFN width is `expert_feed_forward_length` (default `n_ff / n_expert_used`);
    /// otherwise it is `feed_forward_length` (olmoe, granitemoe).
    pub reads_expert_width: bool,
    /// The shared expert.
    pub shared: SharedRule,
    /// The family's files may also be dense: the FFN is a mixture only when `expert_count`
    /// is present and positive (granitehybrid: Granite 4.0-H Tiny against 1B/350M/micro).
    pub optional: bool,
    /// The router and every expert matrix have a bias (`ffn_gate_inp.bias`,
    /// `ffn_{gate,up,down}_exps.bias`; gpt-oss), required.
    pub biases: bool,
    /// The experts' gated activation.
    pub act: Activation,
}

/// A mixture-of-experts FFN: every layer's FFN is `n_expert` gated experts (`act`) of width
/// `n_ff_exp`, of which the router picks `n_expert_used` per token, plus a shared expert of
/// width `n_ff_shexp` every token runs when the family has one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MoeParams {
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_ff_exp: u32,
    pub gating: Gating,
    pub norm_weights: bool,
    pub n_ff_shexp: Option<u32>,
    /// The shared expert's output is scaled by the sigmoid of its own one-row router
    /// (`ffn_gate_inp_shexp.weight`, `[n_embd]`).
    pub shared_gate: bool,
    /// The router and the experts have biases.
    pub biases: bool,
    pub act: Activation,
}

impl MoeParams {
    /// The MoE description of a family with `rule`, from its keys; `n_ff` is the file's
    /// `feed_forward_length` (0 when absent). `None` for a dense file of a family whose
    /// mixture is optional.
    pub(super) fn from_keys(
        k: &Keys<'_>,
        rule: MoeRule,
        n_ff: u32,
    ) -> Result<Option<MoeParams>, HParamsError> {
        if rule.optional && k.u32_opt("expert_count")?.unwrap_or(0) == 0 {
            return Ok(None);
        }
        let n_expert = k.u32_pos("expert_count")?;
        if n_expert > MAX_EXPERTS {
            return Err(invalid(k.key("expert_count"), n_expert, "above 1024"));
        }
        let n_expert_used = k.u32_pos("expert_used_count")?;
        if n_expert_used > n_expert {
            return Err(inconsistent(format!(
                "{n_expert_used} experts used per token of {n_expert}"
            )));
        }
        let n_ff_exp = if rule.reads_expert_width {
            match k.u32_opt("expert_feed_forward_length")? {
                Some(0) | None => n_ff / n_expert_used,
                Some(w) => w,
            }
        } else {
            n_ff
        };
        if n_ff_exp == 0 {
            return Err(invalid(
                k.key("expert_feed_forward_length"),
                0,
                "must be positive",
            ));
        }
        let shared_width = k.u32_opt("expert_shared_feed_forward_length")?;
        let n_ff_shexp = match rule.shared {
            SharedRule::None => None,
            SharedRule::IfWidth => shared_width.filter(|&w| w > 0),
            SharedRule::Gated => match shared_width.filter(|&w| w > 0).unwrap_or(n_ff) {
                0 => {
                    return Err(HParamsError::Missing {
                        key: k.key("expert_shared_feed_forward_length"),
                    })
                }
                w => Some(w),
            },
        };
        Ok(Some(MoeParams {
            n_expert,
            n_expert_used,
            n_ff_exp,
            gating: rule.gating,
            norm_weights: rule.norm_weights,
            n_ff_shexp,
            shared_gate: rule.shared == SharedRule::Gated,
            biases: rule.biases,
            act: rule.act,
        }))
    }

    /// Checks layer `il`'s router, expert and shared-expert tensors (`e` = n_embd).
    pub(super) fn check_tensors(&self, f: &GgufFile, il: u32, e: u64) -> Result<(), HParamsError> {
        let (ne, fe) = (u64::from(self.n_expert), u64::from(self.n_ff_exp));
        let mut want: Vec<(&str, Vec<u64>)> = vec![
            ("ffn_gate_inp.weight", vec![e, ne]),
            ("ffn_gate_exps.weight", vec![e, fe, ne]),
            ("ffn_up_exps.weight", vec![e, fe, ne]),
            ("ffn_down_exps.weight", vec![fe, e, ne]),
        ];
        if let Some(s) = self.n_ff_shexp {
            let s = u64::from(s);
            want.push(("ffn_gate_shexp.weight", vec![e, s]));
            want.push(("ffn_up_shexp.weight", vec![e, s]));
            want.push(("ffn_down_shexp.weight", vec![s, e]));
            if self.shared_gate {
                want.push(("ffn_gate_inp_shexp.weight", vec![e]));
            }
        }
        if self.biases {
            want.push(("ffn_gate_inp.bias", vec![ne]));
            want.push(("ffn_gate_exps.bias", vec![fe, ne]));
            want.push(("ffn_up_exps.bias", vec![fe, ne]));
            want.push(("ffn_down_exps.bias", vec![e, ne]));
        }
        for (suffix, shape) in want {
            let name = format!("blk.{il}.{suffix}");
            match f.tensor(&name) {
                None => return Err(HParamsError::MissingTensor(name)),
                Some(t) if t.shape == shape => {}
                Some(t) => {
                    return Err(inconsistent(format!(
                        "tensor {name} has shape {:?}, the metadata implies {shape:?}",
                        t.shape
                    )))
                }
            }
        }
        Ok(())
    }

    /// "mixture of 64 experts (8 used, width 768), ..." for the variant line.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "mixture of {} experts ({} used per token, width {}, {:?} router{})",
            self.n_expert,
            self.n_expert_used,
            self.n_ff_exp,
            self.gating,
            if self.norm_weights {
                ", top-k weights normalized"
            } else {
                ""
            }
        );
        if let Some(w) = self.n_ff_shexp {
            s.push_str(&format!(", shared expert width {w}"));
            if self.shared_gate {
                s.push_str(" with a sigmoid gate");
            }
        }
        if self.biases {
            s.push_str(", router and expert biases");
        }
        if self.act != Activation::Silu {
            s.push_str(&format!(", {}", self.act.name()));
        }
        s
    }
}
