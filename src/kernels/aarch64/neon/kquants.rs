//! NEON K-quant dot products (Q2_K..Q6_K x Q8_K); twins of `scalar::kquants`.
//!
//! Each block is unpacked to sixteen registers of 16 unsigned values (register g = 16-value
//! group g, in value order; the Q3_K/Q6_K offsets left out). Group dot products use
//! `vmull_s8` (values < 64 times i8 fit in i16, two of them still do) and a pairwise widening
//! add, then the group scale multiplies the i32 lanes. Offsets and mins go through Q8_K's block
//! sums. Per-block integer sums equal the scalar ones exactly. Where the CPU has dotprod the
//! group sums use `sdot` instead (`asm.rs`: its intrinsics are not stable in Rust); the sums,
//! and so the results, are the same bit for bit.

use std::arch::aarch64::*;
use std::mem::offset_of;

use super::asm::sdot;
use crate::kernels::blocks::kquants::{
    scales_mins_k4, scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, KBlock,
    QK_K,
};
use crate::kernels::row::Table;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::DType;

/// One block's 256 unsigned values, 16 per register, in value order.
type Unpacked = [uint8x16_t; 16];

/// Checks lengths (panics on a caller bug); returns the block count.
fn check(n: usize, dt: DType, w: &[u8], a: &[u8]) -> usize {
    check_vec_dot(n, dt, w.len(), DType::Q8_K, a.len());
    n / QK_K
}

#[inline(always)]
fn f16_at(p: *const u8) -> f32 {
    // SAFETY: callers pass a pointer to 2 readable bytes inside a checked block.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    half::f16::from_bits(u16::from_le(bits)).to_f32()
}

/// Q8_K block header: (d, bsums).
#[inline(always)]
fn q8k_head(y: *const u8) -> (f32, [i16; 16]) {
    // SAFETY: callers pass a pointer to a whole readable Q8_K block.
    unsafe {
        (
            y.cast::<f32>().read_unaligned(),
            y.add(offset_of!(BlockQ8K, bsums))
                .cast::<[i16; 16]>()
                .read_unaligned(),
        )
    }
}

fn bsum_dot(bsums: &[i16; 16], coeff: &[i32; 16]) -> i32 {
    bsums.iter().zip(coeff).map(|(&b, &c)| b as i32 * c).sum()
}

/// `sum_g scale[g] * sum_{v in g} u[v] * q8[v]`, exact (so the `sdot` form, `DOT`, gives the
/// same i32 as the `smull` one).
///
/// # Safety
/// `q8` must point to 256 readable bytes; with `DOT` the CPU must have dotprod.
#[inline(always)]
unsafe fn scaled_sum<const DOT: bool>(u: &Unpacked, q8: *const u8, scales: &[i32; 16]) -> i32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): `q8` must point to
    // 256 readable bytes; with `DOT` the CPU must have dotprod.
    unsafe {
        if DOT {
            return scaled_sum_dot(u, q8, scales);
        }
        let mut acc = vdupq_n_s32(0);
        for g in 0..16 {
            let w = vreinterpretq_s8_u8(u[g]);
            let q = vld1q_s8(q8.add(16 * g).cast());
            let p = vaddq_s16(
                vmull_s8(vget_low_s8(w), vget_low_s8(q)),
                vmull_high_s8(w, q),
            );
            acc = vmlaq_n_s32(acc, vpaddlq_s16(p), scales[g]);
        }
        vaddvq_s32(acc)
    }
}

/// [`scaled_sum`] with `sdot`: 16 products per group in one instruction (values < 64 and
/// bytes: exact in i32).
///
/// # Safety
/// `q8` must point to 256 readable bytes; the CPU must have dotprod.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn scaled_sum_dot(u: &Unpacked, q8: *const u8, scales: &[i32; 16]) -> i32 {
    let mut acc = vdupq_n_s32(0);
    for g in 0..16 {
        // SAFETY: group g's 16 bytes of the 256 at q8 (caller contract).
        let q = unsafe { vld1q_s8(q8.add(16 * g).cast()) };
        let d = sdot(vdupq_n_s32(0), vreinterpretq_s8_u8(u[g]), q);
        acc = vmlaq_n_s32(acc, d, scales[g]);
    }
    vaddvq_s32(acc)
}

/// `(v >> s) & mask` per byte.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn bits(v: uint8x16_t, s: i32, mask: u8) -> uint8x16_t {
    vandq_u8(vshlq_u8(v, vdupq_n_s8(-(s as i8))), vdupq_n_u8(mask))
}

/// # Safety
/// `qs` must point to 64 readable bytes (a Q2_K/Q3_K block's 2-bit quants).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn unpack_2bit(qs: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): `qs` must point to
    // 64 readable bytes (a Q2_K/Q3_K block's 2-bit quants).
    unsafe {
        let mut out = [vdupq_n_u8(0); 16];
        for h in 0..2 {
            let q = [vld1q_u8(qs.add(32 * h)), vld1q_u8(qs.add(32 * h + 16))];
            for s in 0..4 {
                out[8 * h + 2 * s] = bits(q[0], 2 * s as i32, 3);
                out[8 * h + 2 * s + 1] = bits(q[1], 2 * s as i32, 3);
            }
        }
        out
    }
}

/// # Safety
/// `qs` must point to 128 readable bytes (a Q4_K/Q5_K block's nibbles).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn unpack_nibbles(qs: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): `qs` must point to
    // 128 readable bytes (a Q4_K/Q5_K block's nibbles).
    unsafe {
        let mut out = [vdupq_n_u8(0); 16];
        for p in 0..4 {
            let q = [vld1q_u8(qs.add(32 * p)), vld1q_u8(qs.add(32 * p + 16))];
            out[4 * p] = vandq_u8(q[0], vdupq_n_u8(0xF));
            out[4 * p + 1] = vandq_u8(q[1], vdupq_n_u8(0xF));
            out[4 * p + 2] = vshrq_n_u8::<4>(q[0]);
            out[4 * p + 3] = vshrq_n_u8::<4>(q[1]);
        }
        out
    }
}

/// OR bit `r / 2` of `hb[16 * (r % 2) + l]`, shifted to `to`, into register `r`
/// (the Q3_K hmask / Q5_K qh layout: bit m of byte l belongs to value 32m + l).
///
/// # Safety
/// `hb` must point to 32 readable bytes (a Q3_K hmask or Q5_K qh).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn add_high_bits(out: &mut Unpacked, hb: *const u8, to: i32) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): `hb` must point to
    // 32 readable bytes (a Q3_K hmask or Q5_K qh).
    unsafe {
        let h = [vld1q_u8(hb), vld1q_u8(hb.add(16))];
        for (r, o) in out.iter_mut().enumerate() {
            let b = bits(h[r % 2], (r / 2) as i32, 1);
            *o = vorrq_u8(*o, vshlq_u8(b, vdupq_n_s8(to as i8)));
        }
    }
}

/// # Safety
/// `x` must point to a readable Q6_K block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn unpack_q6k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): `x` must point to
    // a readable Q6_K block.
    unsafe {
        let (ql, qh) = (
            x.add(offset_of!(BlockQ6K, ql)),
            x.add(offset_of!(BlockQ6K, qh)),
        );
        let mut out = [vdupq_n_u8(0); 16];
        for h in 0..2 {
            for half in 0..2 {
                let o = 16 * half;
                let l0 = vld1q_u8(ql.add(64 * h + o));
                let l1 = vld1q_u8(ql.add(64 * h + 32 + o));
                let hb = vld1q_u8(qh.add(32 * h + o));
                let hi = |s: i32| vshlq_n_u8::<4>(bits(hb, s, 3));
                out[8 * h + half] = vorrq_u8(vandq_u8(l0, vdupq_n_u8(0xF)), hi(0));
                out[8 * h + 2 + half] = vorrq_u8(vandq_u8(l1, vdupq_n_u8(0xF)), hi(2));
                out[8 * h + 4 + half] = vorrq_u8(vshrq_n_u8::<4>(l0), hi(4));
                out[8 * h + 6 + half] = vorrq_u8(vshrq_n_u8::<4>(l1), hi(6));
            }
        }
        out
    }
}

fn groups_k4(scales: *const u8) -> ([i32; 16], [i32; 16]) {
    // SAFETY: callers pass a pointer to the 12 scale bytes of a checked block.
    let (sc, m) = scales_mins_k4(&unsafe { scales.cast::<[u8; 12]>().read_unaligned() });
    (
        std::array::from_fn(|g| sc[g / 2] as i32),
        std::array::from_fn(|g| m[g / 2] as i32),
    )
}

/// NEON twin of `scalar::vec_dot_q2_k_q8_k` (`sdot` for the group sums with `DOT`).
///
/// # Safety
/// NEON must be available (always true on AArch64), and dotprod with `DOT`. Lengths are
/// checked.
#[inline(always)]
unsafe fn dot_q2_k<const DOT: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): NEON must be
    // available (always true on AArch64), and dotprod with `DOT`. Lengths are checked.
    unsafe {
        let nb = check(n, DType::Q2_K, w, a);
        let mut sum = 0.0f32;
        for i in 0..nb {
            let x = w.as_ptr().add(i * BlockQ2K::BYTES);
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            let sc = x
                .add(offset_of!(BlockQ2K, scales))
                .cast::<[u8; 16]>()
                .read_unaligned();
            let gs: [i32; 16] = std::array::from_fn(|g| (sc[g] & 0xF) as i32);
            let gm: [i32; 16] = std::array::from_fn(|g| (sc[g] >> 4) as i32);
            let u = unpack_2bit(x.add(offset_of!(BlockQ2K, qs)));
            let isum = scaled_sum::<DOT>(&u, y.add(offset_of!(BlockQ8K, qs)), &gs);
            let (dy, bsums) = q8k_head(y);
            let (d, dmin) = (
                f16_at(x.add(offset_of!(BlockQ2K, d))),
                f16_at(x.add(offset_of!(BlockQ2K, dmin))),
            );
            sum += dy * d * isum as f32 - dy * dmin * bsum_dot(&bsums, &gm) as f32;
        }
        sum
    }
}

/// NEON twin of `scalar::vec_dot_q3_k_q8_k` (`sdot` for the group sums with `DOT`).
///
/// # Safety
/// NEON must be available (always true on AArch64), and dotprod with `DOT`. Lengths are
/// checked.
#[inline(always)]
unsafe fn dot_q3_k<const DOT: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): NEON must be
    // available (always true on AArch64), and dotprod with `DOT`. Lengths are checked.
    unsafe {
        let nb = check(n, DType::Q3_K, w, a);
        let mut sum = 0.0f32;
        for i in 0..nb {
            let x = w.as_ptr().add(i * BlockQ3K::BYTES);
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            let sb = x
                .add(offset_of!(BlockQ3K, scales))
                .cast::<[u8; 12]>()
                .read_unaligned();
            let s8 = scales_q3k(&sb);
            let gs: [i32; 16] = std::array::from_fn(|g| s8[g] as i32);
            let mut u = unpack_2bit(x.add(offset_of!(BlockQ3K, qs)));
            add_high_bits(&mut u, x.add(offset_of!(BlockQ3K, hmask)), 2);
            let (dy, bsums) = q8k_head(y);
            // Values were unpacked +4.
            let isum = scaled_sum::<DOT>(&u, y.add(offset_of!(BlockQ8K, qs)), &gs)
                - 4 * bsum_dot(&bsums, &gs);
            sum += dy * f16_at(x.add(offset_of!(BlockQ3K, d))) * isum as f32;
        }
        sum
    }
}

/// NEON twin of `scalar::vec_dot_q4_k_q8_k` (`sdot` for the group sums with `DOT`).
///
/// # Safety
/// NEON must be available (always true on AArch64), and dotprod with `DOT`. Lengths are
/// checked.
#[inline(always)]
unsafe fn dot_q4_k<const DOT: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): NEON must be
    // available (always true on AArch64), and dotprod with `DOT`. Lengths are checked.
    unsafe {
        let nb = check(n, DType::Q4_K, w, a);
        let mut sum = 0.0f32;
        for i in 0..nb {
            let x = w.as_ptr().add(i * BlockQ4K::BYTES);
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            let (gs, gm) = groups_k4(x.add(offset_of!(BlockQ4K, scales)));
            let u = unpack_nibbles(x.add(offset_of!(BlockQ4K, qs)));
            let isum = scaled_sum::<DOT>(&u, y.add(offset_of!(BlockQ8K, qs)), &gs);
            let (dy, bsums) = q8k_head(y);
            let (d, dmin) = (
                f16_at(x.add(offset_of!(BlockQ4K, d))),
                f16_at(x.add(offset_of!(BlockQ4K, dmin))),
            );
            sum += dy * d * isum as f32 - dy * dmin * bsum_dot(&bsums, &gm) as f32;
        }
        sum
    }
}

/// NEON twin of `scalar::vec_dot_q5_k_q8_k` (`sdot` for the group sums with `DOT`).
///
/// # Safety
/// NEON must be available (always true on AArch64), and dotprod with `DOT`. Lengths are
/// checked.
#[inline(always)]
unsafe fn dot_q5_k<const DOT: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): NEON must be
    // available (always true on AArch64), and dotprod with `DOT`. Lengths are checked.
    unsafe {
        let nb = check(n, DType::Q5_K, w, a);
        let mut sum = 0.0f32;
        for i in 0..nb {
            let x = w.as_ptr().add(i * BlockQ5K::BYTES);
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            let (gs, gm) = groups_k4(x.add(offset_of!(BlockQ5K, scales)));
            let mut u = unpack_nibbles(x.add(offset_of!(BlockQ5K, qs)));
            add_high_bits(&mut u, x.add(offset_of!(BlockQ5K, qh)), 4);
            let isum = scaled_sum::<DOT>(&u, y.add(offset_of!(BlockQ8K, qs)), &gs);
            let (dy, bsums) = q8k_head(y);
            let (d, dmin) = (
                f16_at(x.add(offset_of!(BlockQ5K, d))),
                f16_at(x.add(offset_of!(BlockQ5K, dmin))),
            );
            sum += dy * d * isum as f32 - dy * dmin * bsum_dot(&bsums, &gm) as f32;
        }
        sum
    }
}

/// NEON twin of `scalar::vec_dot_q6_k_q8_k` (`sdot` for the group sums with `DOT`).
///
/// # Safety
/// NEON must be available (always true on AArch64), and dotprod with `DOT`. Lengths are
/// checked.
#[inline(always)]
unsafe fn dot_q6_k<const DOT: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): NEON must be
    // available (always true on AArch64), and dotprod with `DOT`. Lengths are checked.
    unsafe {
        let nb = check(n, DType::Q6_K, w, a);
        let mut sum = 0.0f32;
        for i in 0..nb {
            let x = w.as_ptr().add(i * BlockQ6K::BYTES);
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            let s8 = x
                .add(offset_of!(BlockQ6K, scales))
                .cast::<[i8; 16]>()
                .read_unaligned();
            let gs: [i32; 16] = std::array::from_fn(|g| s8[g] as i32);
            let u = unpack_q6k(x);
            let (dy, bsums) = q8k_head(y);
            // Values were unpacked +32.
            let isum = scaled_sum::<DOT>(&u, y.add(offset_of!(BlockQ8K, qs)), &gs)
                - 32 * bsum_dot(&bsums, &gs);
            sum += dy * f16_at(x.add(offset_of!(BlockQ6K, d))) * isum as f32;
        }
        sum
    }
}

macro_rules! neon_rows {
    ($($dt:ident: $body:ident, $neon:ident, $sdot:ident;)*) => {
        $(
            /// NEON twin of the scalar K-quant dot of the same dtype (`smull` group sums).
            ///
            /// # Safety
            /// NEON must be available (always true on AArch64). Lengths are checked.
            #[target_feature(enable = "neon")]
            pub unsafe fn $neon(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: this function's contract.
                unsafe { $body::<false>(n, w, a) }
            }

            /// As the `smull` version, with `sdot` group sums: bit-identical (exact i32 sums).
            ///
            /// # Safety
            /// The CPU must have NEON and dotprod. Lengths are checked.
            #[target_feature(enable = "neon,dotprod")]
            pub unsafe fn $sdot(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: this function's contract.
                unsafe { $body::<true>(n, w, a) }
            }
        )*

        /// Installs the NEON K-quant dot products (and gemms as loops over them) in `t`: the
        /// `sdot` versions when the CPU has dotprod.
        ///
        /// # Safety
        /// The CPU must support NEON.
        pub(crate) unsafe fn install(t: &mut Table) {
            let dotprod = super::has_dotprod();
            $(
                {
                    fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                        // SAFETY: only installed by `install`, whose caller guarantees NEON.
                        unsafe { $neon(n, w, a) }
                    }
                    fn vd_sdot(n: usize, w: &[u8], a: &[u8]) -> f32 {
                        // SAFETY: only installed by `install` after detecting dotprod.
                        unsafe { $sdot(n, w, a) }
                    }
                    fn gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                        crate::kernels::scalar::gemm_by_vec_dot(
                            vd, DType::$dt, DType::Q8_K, k, w, n_rows, a, n_tok, out, os,
                        )
                    }
                    fn gm_sdot(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                        crate::kernels::scalar::gemm_by_vec_dot(
                            vd_sdot, DType::$dt, DType::Q8_K, k, w, n_rows, a, n_tok, out, os,
                        )
                    }
                    if let Some(r) = t[DType::$dt as usize].as_mut() {
                        if dotprod {
                            (r.vec_dot, r.gemm) = (vd_sdot, gm_sdot);
                        } else {
                            (r.vec_dot, r.gemm) = (vd, gm);
                        }
                    }
                }
            )*
        }
    };
}

neon_rows! {
    Q2_K: dot_q2_k, vec_dot_q2_k_q8_k, vec_dot_q2_k_q8_k_sdot;
    Q3_K: dot_q3_k, vec_dot_q3_k_q8_k, vec_dot_q3_k_q8_k_sdot;
    Q4_K: dot_q4_k, vec_dot_q4_k_q8_k, vec_dot_q4_k_q8_k_sdot;
    Q5_K: dot_q5_k, vec_dot_q5_k_q8_k, vec_dot_q5_k_q8_k_sdot;
    Q6_K: dot_q6_k, vec_dot_q6_k_q8_k, vec_dot_q6_k_q8_k_sdot;
}
