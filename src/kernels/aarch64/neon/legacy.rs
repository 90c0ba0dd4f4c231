//! NEON kernels for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights (plain NEON: widening
//! `smull` + pairwise add; no `sdot` so any ARMv8 core runs them).
//!
//! Q4_1, Q5_0 and Q8_0 follow llama.cpp's summation order (eight partial sums per block,
//! `legacy_kind::ggml_lanes`), as on x86, so the panel GEMMs (`packed.rs`) can equal them bit
//! for bit. `gemm` is the loop of these
//! `vec_dot`s (no register tiling). `make neon-test` runs their tests under qemu-user.

use std::arch::aarch64::*;

use crate::kernels::blocks::f16_to_f32_at;
use crate::kernels::legacy_kind::*;
use crate::kernels::scalar::gemm_by_vec_dot;
use crate::kernels::shape::check_vec_dot;

/// Sum of the 16 products of two i8x16 vectors, widened to i32x4.
#[inline]
#[target_feature(enable = "neon")]
fn dot16(w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
    let hi = vmull_high_s8(w, a);
    vpaddlq_s16(vaddq_s16(lo, hi))
}

/// The block's 32 weights as two signed vectors (values 0..16 and 16..32), offset removed.
///
/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load_w<const T: u8>(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: `p` points at one whole block in the ggml layout (blocks/legacy.rs).
    unsafe {
        if T == Q8_0 {
            return (
                vld1q_s8(p.add(2) as *const i8),
                vld1q_s8(p.add(18) as *const i8),
            );
        }
        let qoff = match T {
            Q4_0 => 2,
            Q4_1 => 4,
            Q5_0 => 6,
            _ => 8,
        };
        let x = vld1q_u8(p.add(qoff));
        let mut lo = vandq_u8(x, vdupq_n_u8(0x0F));
        let mut hi = vshrq_n_u8(x, 4);
        if T == Q5_0 || T == Q5_1 {
            let hoff = if T == Q5_0 { 2 } else { 4 };
            let qh = (p.add(hoff) as *const u32).read_unaligned();
            let bits: [u8; 32] = std::array::from_fn(|j| (((qh >> j) & 1) as u8) << 4);
            lo = vorrq_u8(lo, vld1q_u8(bits.as_ptr()));
            hi = vorrq_u8(hi, vld1q_u8(bits.as_ptr().add(16)));
        }
        let off = match T {
            Q4_0 => 8,
            Q5_0 => 16,
            _ => 0,
        };
        let o = vdupq_n_s8(off);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), o),
            vsubq_s8(vreinterpretq_s8_u8(hi), o),
        )
    }
}

/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn vec_dot<const T: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(T), w.len(), adt(T), a.len());
    if ggml_lanes(T) {
        return dot_ggml::<T>(n, w, a);
    }
    let (bw, ab) = (wdt(T).block_bytes(), adt(T).block_bytes());
    let qoff = if has_min(T) { 4 } else { 2 };
    let mut sum = 0f32;
    for b in 0..n / 32 {
        let (wb, abk) = (&w[b * bw..(b + 1) * bw], &a[b * ab..(b + 1) * ab]);
        // SAFETY: `wb` and `abk` are whole blocks (lengths checked above).
        let s = unsafe {
            let (w0, w1) = load_w::<T>(wb.as_ptr());
            let a0 = vld1q_s8(abk.as_ptr().add(qoff) as *const i8);
            let a1 = vld1q_s8(abk.as_ptr().add(qoff + 16) as *const i8);
            vaddvq_s32(vaddq_s32(dot16(w0, a0), dot16(w1, a1)))
        };
        let d = f16_to_f32_at(wb, 0) * f16_to_f32_at(abk, 0);
        // One fused multiply-add per block, as the panel GEMMs (`packed.rs`) and their scalar
        // twin do: `gemm` over GGUF rows and over panels must agree bit for bit.
        sum = (s as f32).mul_add(d, sum);
        if has_min(T) {
            sum += f16_to_f32_at(wb, 2) * f16_to_f32_at(abk, 2);
        }
    }
    sum
}

/// Q4_1 x Q8_1, Q5_0 / Q8_0 x Q8_0 in llama.cpp's order, as `x86/avx512/ggml_order.rs` and
/// the panel GEMMs (`packed.rs`) do: lane `i` of two f32x4 holds the exact sum of values
/// `4i..4i+4` of each block, `acc_i = fma(f32(sum_i), d_w * d_a, acc_i)`, Q4_1's
/// `summs = fma(m_w, s_a, summs)`, then
/// `((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3))` (+ `summs`).
/// Lengths are checked by the caller.
#[inline]
#[target_feature(enable = "neon")]
fn dot_ggml<const T: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    /// Sums of the products of values 4i..4i+4, i < 4, of two i8x16 vectors (exact).
    #[inline]
    #[target_feature(enable = "neon")]
    fn sums4(w: int8x16_t, a: int8x16_t) -> int32x4_t {
        let lo = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)));
        let hi = vpaddlq_s16(vmull_high_s8(w, a));
        vpaddq_s32(lo, hi)
    }
    let (bw, ab) = (wdt(T).block_bytes(), adt(T).block_bytes());
    let qa = if has_min(T) { 4 } else { 2 };
    let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    let mut summs = 0f32;
    for b in 0..n / 32 {
        let (wb, abk) = (&w[b * bw..(b + 1) * bw], &a[b * ab..(b + 1) * ab]);
        // SAFETY: `wb` and `abk` are whole blocks (lengths checked by the caller).
        let (w0, w1, a0, a1) = unsafe {
            let (w0, w1) = load_w::<T>(wb.as_ptr());
            let a0 = vld1q_s8(abk.as_ptr().add(qa) as *const i8);
            (w0, w1, a0, vld1q_s8(abk.as_ptr().add(qa + 16) as *const i8))
        };
        let scale = vdupq_n_f32(f16_to_f32_at(wb, 0) * f16_to_f32_at(abk, 0));
        acc_lo = vfmaq_f32(acc_lo, vcvtq_f32_s32(sums4(w0, a0)), scale);
        acc_hi = vfmaq_f32(acc_hi, vcvtq_f32_s32(sums4(w1, a1)), scale);
        if has_min(T) {
            summs = f16_to_f32_at(wb, 2).mul_add(f16_to_f32_at(abk, 2), summs);
        }
    }
    let s = vaddq_f32(acc_hi, acc_lo);
    let (s0, s1, s2, s3) = (
        vgetq_lane_f32::<0>(s),
        vgetq_lane_f32::<1>(s),
        vgetq_lane_f32::<2>(s),
        vgetq_lane_f32::<3>(s),
    );
    let h = (s0 + s2) + (s1 + s3);
    if has_min(T) {
        h + summs
    } else {
        h
    }
}

macro_rules! entry_points {
    ($($t:ident: $vd:ident, $gm:ident;)*) => {$(
        /// NEON twin of the scalar `vec_dot` of the same name.
        ///
        /// # Safety
        /// The CPU must support NEON. Lengths are checked (panics).
        #[target_feature(enable = "neon")]
        pub unsafe fn $vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: same target features as the caller.
            unsafe { vec_dot::<$t>(n, w, a) }
        }

        /// `gemm` as a loop of the NEON `vec_dot`.
        ///
        /// # Safety
        /// The CPU must support NEON. Lengths are checked (panics).
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: `$gm`'s caller guarantees NEON.
                unsafe { $vd(n, w, a) }
            }
            gemm_by_vec_dot(vd, wdt($t), adt($t), k, w, n_rows, a, n_tok, out, out_stride)
        }
    )*};
}

entry_points! {
    Q4_0: vec_dot_q4_0, gemm_q4_0;
    Q4_1: vec_dot_q4_1, gemm_q4_1;
    Q5_0: vec_dot_q5_0, gemm_q5_0;
    Q5_1: vec_dot_q5_1, gemm_q5_1;
    Q8_0: vec_dot_q8_0, gemm_q8_0;
}
