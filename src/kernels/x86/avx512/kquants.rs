//! AVX-512 K-quant dot products (Q2_K..Q6_K x Q8_K); twins of `scalar::kquants`.
//!
//! Weights are unpacked to unsigned bytes by the AVX2 unpackers and joined into four 64-value
//! registers per block. With VNNI each register costs two instructions: `vpdpbusd` sums four
//! u8 x i8 products per i32 lane (every lane is one 16-value group's partial sum, at most
//! 4 * 63 * 128 < 2^15 in magnitude), then `vpdpwssd` multiplies the lane by its group scale
//! (held in the low 16 bits of a lane whose high 16 bits are zero) and accumulates. Without
//! VNNI the same lane sums come from `vpmaddubsw` + `vpmaddwd`. The per-block integer sums equal
//! the scalar ones exactly; only the float accumulation order differs.
//!
//! Two instantiations: [`bw`] (AVX-512 F+BW+VL) and [`vnni`] (plus VNNI). Q8_K quantization
//! and dequantization use the AVX2 / scalar versions.

/// One dot-product entry point: `$body` yields `(d_w, dmin_w, isum lanes, msum)` for block
/// pointers `$x` (weights) and `$y` (Q8_K); the result is `sum d_a * (d_w * isum - dmin_w * msum)`.
macro_rules! avx512_vec_dot {
    ($features:literal, $(#[$d:meta])* $name:ident, $block:ty, |$x:ident, $y:ident| $body:block) => {
        $(#[$d])*
        ///
        /// # Safety
        /// The CPU must have this module's features. Lengths are checked (panics like the
        /// scalar twin).
        #[target_feature(enable = $features)]
        pub unsafe fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = check::<$block>(n, w, a, stringify!($name));
            let mut acc = _mm512_setzero_ps();
            let mut acc_min = 0.0f32;
            for i in 0..nb {
                let $x = w.as_ptr().add(i * <$block as KBlock>::BYTES);
                let $y = a.as_ptr().add(i * BlockQ8K::BYTES);
                let (d, dmin, isum, msum): (f32, f32, __m512i, i32) = $body;
                let dy = $y.cast::<f32>().read_unaligned();
                acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * d), _mm512_cvtepi32_ps(isum), acc);
                acc_min += dy * dmin * msum as f32;
            }
            _mm512_reduce_add_ps(acc) - acc_min
        }
    };
}

macro_rules! avx512_kquants {
    ($(#[$doc:meta])* $module:ident, $features:literal, $vnni:literal) => {
        $(#[$doc])*
        pub mod $module {
            use std::arch::x86_64::*;
            use std::mem::offset_of;

            use crate::kernels::blocks::kquants::{
                scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, KBlock,
            };
            use crate::kernels::x86::avx2::kquants::{
                bsum_dot, check, groups_k4, groups_q2k, unpack_q2k, unpack_q3k, unpack_q4k,
                unpack_q5k, unpack_q6k, Groups, Unpacked,
            };

            #[inline(always)]
            fn f16_at(p: *const u8) -> f32 {
                // SAFETY: callers pass a pointer to 2 readable bytes inside a checked block.
                let bits = unsafe { p.cast::<u16>().read_unaligned() };
                half::f16::from_bits(u16::from_le(bits)).to_f32()
            }

            /// `sum_v scale[v / 16] * u[v] * q8[v]` for one block, as 16 i32 lanes.
            ///
            /// # Safety
            /// The CPU must have this module's features; `q8` must point to 256 bytes.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn scaled_sum(u: &Unpacked, q8: *const u8, scales: &Groups) -> __m512i {
                // Lane g: scale g in the low 16 bits, zero above.
                let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scales.as_ptr().cast()));
                let s = _mm512_cvtepu16_epi32(s16);
                let mut acc = _mm512_setzero_si512();
                for k in 0..4 {
                    let uk = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(u[2 * k]), u[2 * k + 1]);
                    let q = _mm512_loadu_si512(q8.add(64 * k).cast());
                    let g = 4 * k as i32;
                    let idx = _mm512_setr_epi32(
                        g, g, g, g, g + 1, g + 1, g + 1, g + 1,
                        g + 2, g + 2, g + 2, g + 2, g + 3, g + 3, g + 3, g + 3,
                    );
                    let sk = _mm512_permutexvar_epi32(idx, s);
                    if $vnni {
                        let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uk, q);
                        acc = _mm512_dpwssd_epi32(acc, dot, sk);
                    } else {
                        let pairs = _mm512_maddubs_epi16(uk, q);
                        let dot = _mm512_madd_epi16(pairs, _mm512_set1_epi16(1));
                        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(dot, sk));
                    }
                }
                acc
            }

            /// `v` plus `off` in lane 0.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn add_lane0(v: __m512i, off: i32) -> __m512i {
                _mm512_add_epi32(v, _mm512_zextsi128_si512(_mm_cvtsi32_si128(off)))
            }

            avx512_vec_dot!(
                $features,
                /// AVX-512 twin of `scalar::vec_dot_q2_k_q8_k`.
                vec_dot_q2_k_q8_k, BlockQ2K, |x, y| {
                    let sc = x.add(offset_of!(BlockQ2K, scales)).cast::<[u8; 16]>().read_unaligned();
                    let (gs, gm) = groups_q2k(&sc);
                    let isum = scaled_sum(&unpack_q2k(x), y.add(offset_of!(BlockQ8K, qs)), &gs);
                    let d = f16_at(x.add(offset_of!(BlockQ2K, d)));
                    (d, f16_at(x.add(offset_of!(BlockQ2K, dmin))), isum, bsum_dot(y, &gm))
                }
            );

            avx512_vec_dot!(
                $features,
                /// AVX-512 twin of `scalar::vec_dot_q3_k_q8_k`.
                vec_dot_q3_k_q8_k, BlockQ3K, |x, y| {
                    let sb = x.add(offset_of!(BlockQ3K, scales)).cast::<[u8; 12]>().read_unaligned();
                    let gs = scales_q3k(&sb);
                    let isum = scaled_sum(&unpack_q3k(x), y.add(offset_of!(BlockQ8K, qs)), &gs);
                    let isum = add_lane0(isum, -4 * bsum_dot(y, &gs));
                    (f16_at(x.add(offset_of!(BlockQ3K, d))), 0.0, isum, 0)
                }
            );

            avx512_vec_dot!(
                $features,
                /// AVX-512 twin of `scalar::vec_dot_q4_k_q8_k`.
                vec_dot_q4_k_q8_k, BlockQ4K, |x, y| {
                    let sb = x.add(offset_of!(BlockQ4K, scales)).cast::<[u8; 12]>().read_unaligned();
                    let (gs, gm) = groups_k4(&sb);
                    let isum = scaled_sum(&unpack_q4k(x), y.add(offset_of!(BlockQ8K, qs)), &gs);
                    let d = f16_at(x.add(offset_of!(BlockQ4K, d)));
                    (d, f16_at(x.add(offset_of!(BlockQ4K, dmin))), isum, bsum_dot(y, &gm))
                }
            );

            avx512_vec_dot!(
                $features,
                /// AVX-512 twin of `scalar::vec_dot_q5_k_q8_k`.
                vec_dot_q5_k_q8_k, BlockQ5K, |x, y| {
                    let sb = x.add(offset_of!(BlockQ5K, scales)).cast::<[u8; 12]>().read_unaligned();
                    let (gs, gm) = groups_k4(&sb);
                    let isum = scaled_sum(&unpack_q5k(x), y.add(offset_of!(BlockQ8K, qs)), &gs);
                    let d = f16_at(x.add(offset_of!(BlockQ5K, d)));
                    (d, f16_at(x.add(offset_of!(BlockQ5K, dmin))), isum, bsum_dot(y, &gm))
                }
            );

            avx512_vec_dot!(
                $features,
                /// AVX-512 twin of `scalar::vec_dot_q6_k_q8_k`.
                vec_dot_q6_k_q8_k, BlockQ6K, |x, y| {
                    let gs = x.add(offset_of!(BlockQ6K, scales)).cast::<Groups>().read_unaligned();
                    let isum = scaled_sum(&unpack_q6k(x), y.add(offset_of!(BlockQ8K, qs)), &gs);
                    let isum = add_lane0(isum, -32 * bsum_dot(y, &gs));
                    (f16_at(x.add(offset_of!(BlockQ6K, d))), 0.0, isum, 0)
                }
            );
        }
    };
}

avx512_kquants!(
    /// AVX-512 F+BW+VL versions (no VNNI).
    bw,
    "avx512f,avx512bw,avx512vl,avx2,fma",
    false
);
avx512_kquants!(
    /// AVX-512 F+BW+VL+VNNI versions (`vpdpbusd` / `vpdpwssd`).
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma",
    true
);

#[cfg(test)]
mod tests;
