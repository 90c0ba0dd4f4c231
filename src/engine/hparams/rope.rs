//! RoPE context scaling as the file declares it (`{arch}.rope.scaling.*`), with llama.cpp's
//! defaults: no type key means linear, a factor of 0 or 1 means none.

use super::{invalid, HParamsError, Keys};
use serde::Serialize;

/// `{arch}.rope.scaling.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeScalingKind {
    None,
    /// Positions divided by `factor`.
    Linear,
    /// YaRN: frequencies interpolated per dimension between the scaled and unscaled ones, and
    /// the rotation magnitude corrected.
    Yarn,
    /// Phi-3's LongRoPE: per-dimension factors (`rope_factors_long/short.weight`), the long
    /// ones when the context served exceeds `original_context_length`.
    LongRope,
}

impl RopeScalingKind {
    pub fn name(self) -> &'static str {
        match self {
            RopeScalingKind::None => "none",
            RopeScalingKind::Linear => "linear",
            RopeScalingKind::Yarn => "yarn",
            RopeScalingKind::LongRope => "longrope",
        }
    }
}

/// RoPE context scaling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RopeScaling {
    pub kind: RopeScalingKind,
    /// 1.0 when `kind` is `None`.
    pub factor: f32,
    /// `{arch}.rope.scaling.original_context_length`, if given (YaRN's and LongRoPE's base
    /// context).
    pub original_ctx: Option<u32>,
    /// `{arch}.rope.scaling.attn_factor` (default 1): cos and sin are multiplied by it
    /// (phi3's LongRoPE magnitude correction).
    pub attn_factor: f32,
    /// YaRN's ramp bounds (`yarn_beta_fast` 32, `yarn_beta_slow` 1) and
    /// `yarn_log_multiplier` (0 = none); files set them for mistral3 only.
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub yarn_log_mul: f32,
}

impl RopeScaling {
    /// Reads the scaling keys; `yarn_keys` when the family reads the YaRN tuning keys
    /// (llama.cpp does for mistral3).
    pub(crate) fn from_keys(k: &Keys<'_>, yarn_keys: bool) -> Result<RopeScaling, HParamsError> {
        let type_key = k.key("rope.scaling.type");
        let declared = match k.f.get_str(&type_key)? {
            None => None,
            Some("none") => Some(RopeScalingKind::None),
            Some("linear") => Some(RopeScalingKind::Linear),
            Some("yarn") => Some(RopeScalingKind::Yarn),
            Some("longrope") => Some(RopeScalingKind::LongRope),
            Some(other) => {
                return Err(invalid(
                    type_key,
                    other,
                    "kiln knows none, linear, yarn and longrope",
                ));
            }
        };
        // `rope.scaling.factor`, else the older `rope.scale_linear`; 0 means not set.
        let factor = match k.f.get_f32(&k.key("rope.scaling.factor"))? {
            Some(_) => k.f32_pos("rope.scaling.factor", None)?,
            None => match k.f.get_f32(&k.key("rope.scale_linear"))? {
                Some(_) => k.f32_pos("rope.scale_linear", None)?,
                None => 1.0,
            },
        };
        let kind = match declared {
            Some(kind) => kind,
            None if factor != 1.0 => RopeScalingKind::Linear,
            None => RopeScalingKind::None,
        };
        let factor = if kind == RopeScalingKind::None {
            1.0
        } else {
            factor
        };
        let f32_or = |suffix: &str, default: f32| -> Result<f32, HParamsError> {
            match k.f.get_f32(&k.key(suffix))? {
                Some(v) if v.is_finite() => Ok(v),
                Some(v) => Err(invalid(k.key(suffix), v, "must be a finite number")),
                None => Ok(default),
            }
        };
        let (beta_fast, beta_slow, log_mul) = if yarn_keys {
            (
                f32_or("rope.scaling.yarn_beta_fast", 32.0)?,
                f32_or("rope.scaling.yarn_beta_slow", 1.0)?,
                f32_or("rope.scaling.yarn_log_multiplier", 0.0)?,
            )
        } else {
            (32.0, 1.0, 0.0)
        };
        Ok(RopeScaling {
            kind,
            factor,
            original_ctx: k
                .u32_opt("rope.scaling.original_context_length")?
                .filter(|&n| n > 0),
            attn_factor: k.f32_pos("rope.scaling.attn_factor", Some(1.0))?,
            yarn_beta_fast: beta_fast,
            yarn_beta_slow: beta_slow,
            yarn_log_mul: log_mul,
        })
    }
}
