//! The few AArch64 instructions the panel GEMMs need whose Rust intrinsics are still unstable
//! (rustc 1.95: `vdotq_laneq_s32` is behind `stdarch_neon_dotprod`, `vmmlaq_s32` behind
//! `stdarch_neon_i8mm`, `vcvt_f32_f16` needs the unstable `f16` type), each as one `asm!`
//! instruction on registers only.
//!
//! Every function carries the target feature its instruction belongs to, so it can only be
//! called (or inlined) where that feature is enabled, i.e. after run-time detection.

use std::arch::aarch64::*;
use std::arch::asm;

/// `sdot acc.4s, w.16b, a.4b[L]`: lane `i` of the result is `acc[i] + sum_{j<4} w[4i+j] *
/// a[4L+j]` (signed bytes, exact in i32: at most 4 * 128 * 128 per call).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_by_element<const L: i32>(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: one register-only instruction (no memory, no stack, no flags); this function's
    // `dotprod` target feature means the CPU has SDOT (callers detected it at run time).
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `sdot acc.4s, w.16b, a.16b`: lane `i` of the result is `acc[i] + sum_{j<4} w[4i+j] *
/// a[4i+j]` (signed bytes, exact in i32).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(super) fn sdot(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: one register-only instruction; this function's `dotprod` target feature means
    // the CPU has SDOT (callers detected it at run time).
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// [`sdot_by_element`] with the activation dword chosen by `lane` (0..4; callers index with constants
/// in unrolled loops, so the match folds away).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(super) fn sdot_lane(acc: int32x4_t, w: int8x16_t, a: int8x16_t, lane: usize) -> int32x4_t {
    match lane {
        0 => sdot_by_element::<0>(acc, w, a),
        1 => sdot_by_element::<1>(acc, w, a),
        2 => sdot_by_element::<2>(acc, w, a),
        _ => sdot_by_element::<3>(acc, w, a),
    }
}

/// `smmla acc.4s, n.16b, m.16b`: the 2x8 signed matrix `n` (row i = bytes 8i..8i+8) times
/// the 8x2 matrix whose column j is bytes 8j..8j+8 of `m`, added to the row-major 2x2 `acc`:
/// lane `2i + j` += `sum_k n[8i+k] * m[8j+k]` (exact in i32).
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub(super) fn smmla(mut acc: int32x4_t, n: int8x16_t, m: int8x16_t) -> int32x4_t {
    // SAFETY: one register-only instruction; this function's `i8mm` target feature means the
    // CPU has SMMLA (callers detected it at run time).
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {n:v}.16b, {m:v}.16b",
            acc = inout(vreg) acc,
            n = in(vreg) n,
            m = in(vreg) m,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Eight f16 (as their bit patterns) widened to f32 (`fcvtl`/`fcvtl2`, exact): lanes 0..4 and
/// 4..8.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn f16x8_to_f32(h: uint16x8_t) -> (float32x4_t, float32x4_t) {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: two register-only instructions of baseline AdvSIMD (NEON is this function's
    // target feature).
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            lo = out(vreg) lo,
            hi = out(vreg) hi,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    (lo, hi)
}
