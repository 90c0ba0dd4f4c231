//! Which output type each tensor gets: the rules of llama.cpp's `llama-quantize`
//! (`src/llama-quant.cpp`: `tensor_allows_quantization`, `llama_tensor_get_type`,
//! `tensor_type_fallback`), reduced to a uniform ("pure") mix:
//!
//! 1. Only weight matrices are quantized: at least 2 dimensions, a name ending in `weight`
//!    that is not a norm (`_norm.weight`). Everything else (norms, biases, 1-D tensors) is
//!    copied byte for byte in its source type.
//! 2. With a quantized target, the output projection (`output.weight`) and, when the model
//!    ties it to the embedding (no `output.weight`), `token_embd.weight` keep more bits:
//!    Q6_K, or Q8_0 when the target is Q8_0 or the row length is not a multiple of 256
//!    (llama.cpp reaches the same Q8_0 through its Q6_K -> Q8_0 fallback).
//!    Float targets (F32, F16, BF16) convert every matrix to that type.
//! 3. A row length that is not a multiple of the chosen type's block size falls back to a
//!    32-element type of similar or higher precision: Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0,
//!    Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL (llama.cpp's table). If even that does
//!    not fit, F16.
//!
//! MXFP4 is not a target: llama.cpp writes it only through `MXFP4_MOE` (MXFP4 for expert
//! tensors, Q8_0 for the rest), a mix this uniform plan does not express.
//!
//! llama.cpp's `_M` mixes (more bits for some `attn_v`/`ffn_down` layers) are not applied:
//! every other matrix gets exactly the target type, so the file type is recorded as the
//! `_S` variant for K-quants.

use crate::kernels::DType;

/// Why a tensor gets its output type (printed by `kiln quantize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanReason {
    /// Not a weight matrix (norm, bias, 1-D): copied unchanged.
    NotAMatrix,
    /// Converted to the target type.
    Target,
    /// Output projection or tied token embedding: kept at higher precision.
    OutputPrecision,
    /// The row length does not fit `wanted`'s block size.
    Fallback { wanted: DType },
}

/// The target types `kiln quantize --type` accepts, in the order listed by errors and help.
pub const TARGETS: [DType; 15] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
    DType::F16,
    DType::BF16,
    DType::F32,
];

/// llama.cpp's `llama_ftype` number (`general.file_type`) for a uniform `target` file, `None`
/// if `target` is not one of [`TARGETS`]. K-quants map to the `_S` variants (no `_M` mix).
pub fn llama_ftype(target: DType) -> Option<u32> {
    use DType::*;
    Some(match target {
        F32 => 0,
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q8_0 => 7,
        Q5_0 => 8,
        Q5_1 => 9,
        Q2_K => 10,
        Q3_K => 11, // MOSTLY_Q3_K_S
        Q4_K => 14, // MOSTLY_Q4_K_S
        Q5_K => 16, // MOSTLY_Q5_K_S
        Q6_K => 18,
        IQ4_NL => 25,
        IQ4_XS => 30,
        BF16 => 32,
        // Not quantizer targets: activation formats, and MXFP4 (only in MXFP4_MOE's mix).
        Q8_1 | Q8_K | MXFP4 => return None,
    })
}

/// Whether llama-quantize would quantize a tensor with this name and number of dimensions.
pub fn is_quantizable(name: &str, n_dims: usize) -> bool {
    n_dims >= 2 && name.ends_with("weight") && !name.contains("_norm.weight")
}

/// The output type and reason for one tensor.
///
/// `row_len` is the contiguous dimension (`shape[0]`); `has_output` tells whether the model has
/// its own `output.weight` (if not, `token_embd.weight` doubles as the output projection).
/// `target` must be one of [`TARGETS`].
pub fn plan_tensor(
    name: &str,
    n_dims: usize,
    row_len: u64,
    src: DType,
    target: DType,
    has_output: bool,
) -> (DType, PlanReason) {
    if !is_quantizable(name, n_dims) {
        return (src, PlanReason::NotAMatrix);
    }
    let is_output = name == "output.weight" || (!has_output && name == "token_embd.weight");
    let fits = |d: DType| row_len.is_multiple_of(d.block_elems() as u64);
    let (wanted, reason) = if is_output && target.is_quantized() {
        if target == DType::Q8_0 || !fits(target) || !fits(DType::Q6_K) {
            (DType::Q8_0, PlanReason::OutputPrecision)
        } else {
            (DType::Q6_K, PlanReason::OutputPrecision)
        }
    } else {
        (target, PlanReason::Target)
    };
    if fits(wanted) {
        return (wanted, reason);
    }
    let fallback = match wanted {
        DType::Q2_K | DType::Q3_K => DType::Q4_0,
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        DType::IQ4_XS => DType::IQ4_NL,
        _ => DType::F16,
    };
    let fallback = if fits(fallback) { fallback } else { DType::F16 };
    (fallback, PlanReason::Fallback { wanted })
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    fn plan(name: &str, dims: usize, row: u64, target: DType, has_output: bool) -> DType {
        plan_tensor(name, dims, row, Q4_1, target, has_output).0
    }

    #[test]
    fn only_weight_matrices_are_quantized() {
        assert_eq!(plan("blk.0.attn_norm.weight", 1, 576, Q4_0, false), Q4_1);
        assert_eq!(plan("output_norm.weight", 1, 576, Q4_0, false), Q4_1);
        assert_eq!(plan("blk.0.attn_q.bias", 2, 576, Q4_0, false), Q4_1);
        assert_eq!(plan("blk.0.ffn_norm.weight", 2, 576, Q4_0, false), Q4_1);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, Q4_0, false), Q4_0);
        assert_eq!(
            plan_tensor("blk.0.attn_norm.weight", 1, 576, F32, Q4_0, false),
            (F32, PlanReason::NotAMatrix)
        );
    }

    #[test]
    fn tied_embedding_keeps_more_bits() {
        // 576 is not a multiple of 256: Q8_0, as llama.cpp does for SmolLM2.
        assert_eq!(
            plan_tensor("token_embd.weight", 2, 576, Q4_1, Q4_0, false),
            (Q8_0, PlanReason::OutputPrecision)
        );
        assert_eq!(plan("token_embd.weight", 2, 576, Q4_K, false), Q8_0);
        assert_eq!(plan("token_embd.weight", 2, 576, Q8_0, false), Q8_0);
        // A row that fits 256: Q6_K.
        assert_eq!(plan("token_embd.weight", 2, 4096, Q4_0, false), Q6_K);
        assert_eq!(plan("output.weight", 2, 4096, Q5_K, true), Q6_K);
        // Untied: the embedding is an ordinary matrix.
        assert_eq!(plan("token_embd.weight", 2, 4096, Q4_0, true), Q4_0);
        // Float targets: everything in that float type.
        assert_eq!(plan("token_embd.weight", 2, 576, F16, false), F16);
        assert_eq!(
            plan_tensor("output.weight", 2, 576, Q4_1, Q4_0, true).1,
            PlanReason::OutputPrecision
        );
    }

    #[test]
    fn k_quants_fall_back_when_rows_do_not_fit() {
        assert_eq!(plan("blk.0.ffn_down.weight", 2, 1536, Q4_K, false), Q4_K);
        assert_eq!(
            plan_tensor("blk.0.attn_q.weight", 2, 576, Q4_1, Q4_K, false),
            (Q5_0, PlanReason::Fallback { wanted: Q4_K })
        );
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, Q5_K, false), Q5_1);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, Q6_K, false), Q8_0);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, Q3_K, false), Q4_0);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, Q2_K, false), Q4_0);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, IQ4_XS, false), IQ4_NL);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 576, IQ4_NL, false), IQ4_NL);
        // Not even a multiple of 32: F16.
        assert_eq!(plan("blk.0.attn_q.weight", 2, 100, Q4_K, false), F16);
        assert_eq!(plan("blk.0.attn_q.weight", 2, 100, Q8_0, false), F16);
        assert_eq!(plan("token_embd.weight", 2, 100, Q4_0, false), F16);
    }

    #[test]
    fn every_target_has_a_file_type() {
        for t in TARGETS {
            assert!(llama_ftype(t).is_some(), "{t}");
        }
        assert_eq!(llama_ftype(Q4_0), Some(2));
        assert_eq!(llama_ftype(Q8_0), Some(7));
        assert_eq!(llama_ftype(Q8_K), None);
    }
}
