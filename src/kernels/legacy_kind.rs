//! The legacy (32-value block) weight kinds as const-generic codes, shared by every ISA's
//! microkernels: `T` selects the weight dtype, its activation partner and whether blocks
//! carry a minimum (`m`), so one kernel body serves Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.

use crate::kernels::DType;

pub(crate) const Q4_0: u8 = 0;
pub(crate) const Q4_1: u8 = 1;
pub(crate) const Q5_0: u8 = 2;
pub(crate) const Q5_1: u8 = 3;
pub(crate) const Q8_0: u8 = 4;

/// The weight dtype of kind `t`.
pub(crate) const fn wdt(t: u8) -> DType {
    match t {
        Q4_0 => DType::Q4_0,
        Q4_1 => DType::Q4_1,
        Q5_0 => DType::Q5_0,
        Q5_1 => DType::Q5_1,
        _ => DType::Q8_0,
    }
}

/// Whether blocks of kind `t` store a minimum (value = d * q + m).
pub(crate) const fn has_min(t: u8) -> bool {
    t == Q4_1 || t == Q5_1
}

/// The activation dtype kind `t` is multiplied with: Q8_1 (with its sum) for the kinds with a
/// minimum, Q8_0 otherwise.
pub(crate) const fn adt(t: u8) -> DType {
    if has_min(t) {
        DType::Q8_1
    } else {
        DType::Q8_0
    }
}

/// Whether kind `t`'s dot products follow llama.cpp's x86 float order (`ggml_vec_dot_q4_1_q8_1`,
/// `_q5_0_q8_0`, `_q8_0_q8_0` and tinyBLAS's `tinyBLAS_Q0_AVX`, which its prompt batches take
/// for Q5_0 / Q8_0): eight f32 partial sums per output, lane `i` adding
/// `fma(d_w * d_a, f32(exact sum of the products of values 4i..4i+4), lane_i)` block after
/// block, then `hsum_float_8`'s order `((l4 + l0) + (l6 + l2)) + ((l5 + l1) + (l7 + l3))`
/// (plus Q4_1's separate `fma(m_w, s_a)` sum). Q4_0 and Q5_1 sum each block exactly instead.
pub(crate) const fn ggml_lanes(t: u8) -> bool {
    t == Q4_1 || t == Q5_0 || t == Q8_0
}
