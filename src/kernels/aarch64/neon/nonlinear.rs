//! NEON kernels for IQ4_NL, MXFP4 (x Q8_0) and IQ4_XS (x Q8_K) weights: twins of
//! `scalar/nonlinear.rs`, bit for bit (its module doc states the float order). Plain NEON, so
//! any ARMv8 core runs them.
//!
//! A group's 16 code bytes become two i8x16 vectors of values with `tbl` (`vqtbl1q_s8`) into
//! the 16-entry table; `smull` + `saddlp` + `addp` leave lane `i` = the exact sum of the
//! products of values `4i..4i+4` (lanes 0..4 in one i32x4, 4..8 in another): the reference's
//! lanes, then one `fmla` per lane and block (IQ4_XS: per super-block, after the group scales
//! in i32). `gemm` is the loop of these `vec_dot`s. `make neon-test` runs their tests under
//! qemu-user.

use std::arch::aarch64::*;

use crate::kernels::blocks::f16_to_f32_at;
use crate::kernels::blocks::nonlinear::{
    e8m0_to_f32_half, iq4_xs_scale, IQ4_XS_BYTES, IQ4_XS_VALUES, KVALUES_IQ4NL, KVALUES_MXFP4,
};
use crate::kernels::scalar::gemm_by_vec_dot;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::DType;

const Q8_0_BYTES: usize = 34;
const Q8_K_BYTES: usize = 292;

/// The values of the group whose 16 code bytes start `qs`: values 0..16 and 16..32.
#[inline]
#[target_feature(enable = "neon")]
fn values(tbl: int8x16_t, qs: &[u8]) -> (int8x16_t, int8x16_t) {
    assert!(qs.len() >= 16);
    // SAFETY: 16 readable bytes (checked above).
    let x = unsafe { vld1q_u8(qs.as_ptr()) };
    (
        vqtbl1q_s8(tbl, vandq_u8(x, vdupq_n_u8(0x0F))),
        vqtbl1q_s8(tbl, vshrq_n_u8::<4>(x)),
    )
}

/// Lanes 0..4 and 4..8 of a 32-value group: the exact sums of `w * a` over values `4i..4i+4`;
/// `a` holds the group's 32 activation quants.
#[inline]
#[target_feature(enable = "neon")]
fn lanes(w: (int8x16_t, int8x16_t), a: &[u8]) -> (int32x4_t, int32x4_t) {
    assert!(a.len() >= 32);
    // SAFETY: 32 readable bytes (checked above).
    let (a0, a1) = unsafe {
        (
            vld1q_s8(a.as_ptr() as *const i8),
            vld1q_s8(a.as_ptr().add(16) as *const i8),
        )
    };
    let half = |w: int8x16_t, a: int8x16_t| {
        let lo = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)));
        let hi = vpaddlq_s16(vmull_high_s8(w, a));
        vpaddq_s32(lo, hi)
    };
    (half(w.0, a0), half(w.1, a1))
}

/// The reference's `hsum8` of lanes `lo` (0..4) and `hi` (4..8).
#[inline]
#[target_feature(enable = "neon")]
fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let s = vaddq_f32(lo, hi);
    (vgetq_lane_f32::<0>(s) + vgetq_lane_f32::<2>(s))
        + (vgetq_lane_f32::<1>(s) + vgetq_lane_f32::<3>(s))
}

/// The dot product of a 32-value kind (IQ4_NL, MXFP4) against Q8_0.
#[inline]
#[target_feature(enable = "neon")]
fn dot32(
    n: usize,
    w: &[u8],
    a: &[u8],
    wdt: DType,
    table: &[i8; 16],
    qoff: usize,
    scale: impl Fn(&[u8]) -> f32,
) -> f32 {
    check_vec_dot(n, wdt, w.len(), DType::Q8_0, a.len());
    // SAFETY: the table is 16 bytes.
    let tbl = unsafe { vld1q_s8(table.as_ptr()) };
    let (mut lo, mut hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    for (wb, ab) in w
        .chunks_exact(wdt.block_bytes())
        .zip(a.chunks_exact(Q8_0_BYTES))
        .take(n / 32)
    {
        let c = vdupq_n_f32(scale(wb) * f16_to_f32_at(ab, 0));
        let (l0, l1) = lanes(values(tbl, &wb[qoff..]), &ab[2..]);
        lo = vfmaq_f32(lo, c, vcvtq_f32_s32(l0));
        hi = vfmaq_f32(hi, c, vcvtq_f32_s32(l1));
    }
    hsum8(lo, hi)
}

/// NEON twin of the scalar `vec_dot_iq4_nl` (bit-identical).
///
/// # Safety
/// The CPU must support NEON. Lengths are checked (panics).
#[target_feature(enable = "neon")]
pub unsafe fn vec_dot_iq4_nl(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot32(n, w, a, DType::IQ4_NL, &KVALUES_IQ4NL, 2, |b| {
        f16_to_f32_at(b, 0)
    })
}

/// NEON twin of the scalar `vec_dot_mxfp4` (bit-identical).
///
/// # Safety
/// The CPU must support NEON. Lengths are checked (panics).
#[target_feature(enable = "neon")]
pub unsafe fn vec_dot_mxfp4(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot32(n, w, a, DType::MXFP4, &KVALUES_MXFP4, 1, |b| {
        e8m0_to_f32_half(b[0])
    })
}

/// NEON twin of the scalar `vec_dot_iq4_xs` (bit-identical).
///
/// # Safety
/// The CPU must support NEON. Lengths are checked (panics).
#[target_feature(enable = "neon")]
pub unsafe fn vec_dot_iq4_xs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, DType::IQ4_XS, w.len(), DType::Q8_K, a.len());
    // SAFETY: the table is 16 bytes.
    let tbl = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
    let (mut lo, mut hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    for (wb, ab) in w
        .chunks_exact(IQ4_XS_BYTES)
        .zip(a.chunks_exact(Q8_K_BYTES))
        .take(n / IQ4_XS_VALUES)
    {
        let (mut s0, mut s1) = (vdupq_n_s32(0), vdupq_n_s32(0));
        for g in 0..8 {
            let ls = iq4_xs_scale(wb, g);
            let (l0, l1) = lanes(values(tbl, &wb[8 + 16 * g..]), &ab[4 + 32 * g..]);
            s0 = vmlaq_n_s32(s0, l0, ls);
            s1 = vmlaq_n_s32(s1, l1, ls);
        }
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let c = vdupq_n_f32(f16_to_f32_at(wb, 0) * da);
        lo = vfmaq_f32(lo, c, vcvtq_f32_s32(s0));
        hi = vfmaq_f32(hi, c, vcvtq_f32_s32(s1));
    }
    hsum8(lo, hi)
}

macro_rules! gemm_fns {
    ($($name:ident = $dot:ident, $w:ident, $a:ident;)*) => {$(
        /// `TypeKernels::gemm` as a loop of this module's `vec_dot`.
        ///
        /// # Safety
        /// The CPU must support NEON. Lengths are checked (panics).
        #[target_feature(enable = "neon")]
        pub unsafe fn $name(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: reached only through this NEON function's callers, which verified NEON.
                unsafe { $dot(n, w, a) }
            }
            gemm_by_vec_dot(vd, DType::$w, DType::$a, k, w, n_rows, a, n_tok, out, os)
        }
    )*};
}

gemm_fns! {
    gemm_iq4_nl = vec_dot_iq4_nl, IQ4_NL, Q8_0;
    gemm_mxfp4 = vec_dot_mxfp4, MXFP4, Q8_0;
    gemm_iq4_xs = vec_dot_iq4_xs, IQ4_XS, Q8_K;
}
