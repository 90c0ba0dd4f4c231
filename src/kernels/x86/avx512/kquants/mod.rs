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

use crate::kernels::isa::has_avx512_vnni;
use crate::kernels::row::Table;
use crate::kernels::DType;

/// Installs the AVX-512 K-quant dot products and gemms in `t` (the VNNI versions when the CPU
/// has VNNI), over the AVX2 ones.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL plus AVX2/FMA/F16C: the installed safe wrappers call
/// `#[target_feature]` functions without re-checking (VNNI is checked here).
pub(crate) unsafe fn install(t: &mut Table) {
    macro_rules! set {
        ($m:ident: $($dt:ident: $dot:ident, $gemm:ident;)*) => {$(
            if let Some(r) = t[DType::$dt as usize].as_mut() {
                // SAFETY: `install`'s caller guarantees AVX-512 F/BW/VL and the AVX2 set; the
                // `vnni` module is only chosen when VNNI was detected.
                r.vec_dot = |n, w, a| unsafe { $m::$dot(n, w, a) };
                // SAFETY: the same guarantee covers the gemm's features.
                r.gemm = |k, w, nr, a, nt, o, s| unsafe { $m::$gemm(k, w, nr, a, nt, o, s) };
            }
        )*};
    }
    macro_rules! set_all {
        ($m:ident) => {
            set! { $m:
                Q2_K: vec_dot_q2_k_q8_k, gemm_q2_k_q8_k;
                Q3_K: vec_dot_q3_k_q8_k, gemm_q3_k_q8_k;
                Q4_K: vec_dot_q4_k_q8_k, gemm_q4_k_q8_k;
                Q5_K: vec_dot_q5_k_q8_k, gemm_q5_k_q8_k;
                Q6_K: vec_dot_q6_k_q8_k, gemm_q6_k_q8_k;
            }
        };
    }
    if has_avx512_vnni() {
        set_all!(vnni);
    } else {
        set_all!(bw);
    }
}

/// The public vec_dot / gemm pair of each weight type, for one feature set.
macro_rules! avx512_entry_points {
    ($features:literal; $($dot:ident, $gemm:ident, $dt:ident, $prep:ident;)*) => {$(
        /// AVX-512 twin of the scalar dot product of the same name (weights `w`, Q8_K `a`).
        ///
        /// # Safety
        /// The CPU must have this module's features. Lengths are checked (panics like the
        /// scalar twin).
        #[target_feature(enable = $features)]
        pub unsafe fn $dot(n: usize, w: &[u8], a: &[u8]) -> f32 {
            check_vec_dot(n, DType::$dt, w.len(), DType::Q8_K, a.len());
            // SAFETY: this function's features cover the helpers' (this module's set, which
            // includes AVX2, FMA and F16C for the AVX2 `prep_*`); the check above made `w` and
            // `a` hold `n / 256` blocks of the sizes `$prep` and the Q8_K reads expect.
            unsafe { vec_dot_with(n / QK_K, w, a, DType::$dt.block_bytes(), |x| $prep(x)) }
        }

        /// Tiled AVX-512 gemm for this weight type against Q8_K rows (see
        /// `TypeKernels::gemm`).
        ///
        /// # Safety
        /// The CPU must have this module's features. Lengths are checked.
        #[target_feature(enable = $features)]
        pub unsafe fn $gemm(
            k: usize,
            w: &[u8],
            n_rows: usize,
            a: &[u8],
            n_tok: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            // SAFETY: this function's features cover the helpers' (this module's set);
            // `gemm_with` checks the lengths before reading, and `$prep` is `$dt`'s.
            unsafe { gemm_with(k, w, n_rows, a, n_tok, out, out_stride, DType::$dt, |x| $prep(x)) }
        }
    )*};
}

macro_rules! avx512_kquants {
    ($(#[$doc:meta])* $module:ident, $features:literal, $vnni:literal) => {
        $(#[$doc])*
        pub mod $module {
            use std::arch::x86_64::*;
            use std::mem::offset_of;

            use crate::kernels::blocks::kquants::{BlockQ8K, KBlock, QK_K};
            use crate::kernels::shape::{check_gemm, check_vec_dot};
            use crate::kernels::x86::avx2::kquants::{
                offset_scales, prep_q2k, prep_q3k, prep_q4k, prep_q5k, prep_q6k, Prepared,
            };
            use crate::kernels::DType;

            /// Tokens per register tile in [`gemm_with`] (8 measured ~10% faster than 4 for
            /// 16+ tokens: the weight unpacking is shared by more tokens).
            const TILE: usize = 8;

            /// A prepared block's values as four 64-value registers and its scales as i32
            /// lanes (scale in the low 16 bits, zero above) matching each register.
            struct Wide {
                u: [__m512i; 4],
                s: [__m512i; 4],
            }

            /// # Safety
            /// The CPU must have this module's features.
            #[inline(always)]
            unsafe fn widen(p: &Prepared) -> Wide {
                // SAFETY: the caller guarantees this function's contract (`# Safety` above): The
                // CPU must have this module's features.
                unsafe {
                    let s16 = _mm256_cvtepi8_epi16(p.gs);
                    let s = _mm512_cvtepu16_epi32(s16);
                    let mut w = Wide { u: [_mm512_setzero_si512(); 4], s: [_mm512_setzero_si512(); 4] };
                    for k in 0..4 {
                        w.u[k] = _mm512_inserti64x4::<1>(
                            _mm512_castsi256_si512(p.u[2 * k]),
                            p.u[2 * k + 1],
                        );
                        let g = 4 * k as i32;
                        let idx = _mm512_setr_epi32(
                            g, g, g, g, g + 1, g + 1, g + 1, g + 1,
                            g + 2, g + 2, g + 2, g + 2, g + 3, g + 3, g + 3, g + 3,
                        );
                        w.s[k] = _mm512_permutexvar_epi32(idx, s);
                    }
                    w
                }
            }

            /// `sum_v scale[v / 16] * u[v] * q8[v]` for one block, as 16 i32 lanes.
            ///
            /// # Safety
            /// The CPU must have this module's features; `q8` must point to 256 bytes.
            #[inline(always)]
            unsafe fn scaled_sum(w: &Wide, q8: *const u8) -> __m512i {
                // SAFETY: the caller guarantees this function's contract (`# Safety` above): The
                // CPU must have this module's features; `q8` must point to 256 bytes.
                unsafe {
                    let mut acc = _mm512_setzero_si512();
                    for k in 0..4 {
                        let q = _mm512_loadu_si512(q8.add(64 * k).cast());
                        if $vnni {
                            let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u[k], q);
                            acc = _mm512_dpwssd_epi32(acc, dot, w.s[k]);
                        } else {
                            let pairs = _mm512_maddubs_epi16(w.u[k], q);
                            let dot = _mm512_madd_epi16(pairs, _mm512_set1_epi16(1));
                            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(dot, w.s[k]));
                        }
                    }
                    acc
                }
            }

            /// `acc + dy * (d * isum - dmin * mins)` for weight block `p` (widened) and
            /// Q8_K block `y`.
            ///
            /// # Safety
            /// The CPU must have this module's features; `y` must point to a Q8_K block.
            #[inline(always)]
            unsafe fn block_dot(p: &Prepared, wide: &Wide, y: *const u8, acc: __m512) -> __m512 {
                // SAFETY: the caller guarantees this function's contract (`# Safety` above): The
                // CPU must have this module's features; `y` must point to a Q8_K block.
                unsafe {
                    let bsums = _mm256_loadu_si256(y.add(offset_of!(BlockQ8K, bsums)).cast());
                    let mut isum = scaled_sum(wide, y.add(offset_of!(BlockQ8K, qs)));
                    if p.off != 0 {
                        let corr = _mm256_madd_epi16(bsums, offset_scales(p));
                        isum = _mm512_add_epi32(isum, _mm512_zextsi256_si512(corr));
                    }
                    let dy = y.cast::<f32>().read_unaligned();
                    let acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * p.d), _mm512_cvtepi32_ps(isum), acc);
                    if p.dmin == 0.0 {
                        return acc;
                    }
                    let gm = _mm256_cvtepi8_epi16(p.gm);
                    let mins = _mm512_zextsi256_si512(_mm256_madd_epi16(bsums, gm));
                    _mm512_fnmadd_ps(_mm512_set1_ps(dy * p.dmin), _mm512_cvtepi32_ps(mins), acc)
                }
            }

            /// Dot product of `nb` blocks (lengths already checked).
            ///
            /// # Safety
            /// The CPU must have this module's features; `prep` must be the AVX2 `prep_*`
            /// function for blocks of `bytes` bytes; `w` and `a` must hold `nb` blocks.
            #[inline(always)]
            unsafe fn vec_dot_with(
                nb: usize,
                w: &[u8],
                a: &[u8],
                bytes: usize,
                prep: impl Fn(*const u8) -> Prepared,
            ) -> f32 {
                // SAFETY: the caller guarantees this function's contract (`# Safety` above): The
                // CPU must have this module's features; `prep` must be the AVX2 `prep_*` function
                // for blocks of `bytes` bytes; `w` and `a` must hold `nb` blocks.
                unsafe {
                    let mut acc = _mm512_setzero_ps();
                    for i in 0..nb {
                        let p = prep(w.as_ptr().add(i * bytes));
                        let y = a.as_ptr().add(i * BlockQ8K::BYTES);
                        acc = block_dot(&p, &widen(&p), y, acc);
                    }
                    _mm512_reduce_add_ps(acc)
                }
            }

            /// See `avx2::kquants::gemm_with`; 512-bit lanes.
            ///
            /// # Safety
            /// The CPU must have this module's features; `prep` must be the AVX2 `prep_*`
            /// function for blocks of `bytes` bytes. Lengths are checked.
            #[allow(clippy::too_many_arguments)]
            #[inline(always)]
            unsafe fn gemm_with(
                k: usize,
                w: &[u8],
                n_rows: usize,
                a: &[u8],
                n_tok: usize,
                out: &mut [f32],
                out_stride: usize,
                dt: DType,
                prep: impl Fn(*const u8) -> Prepared,
            ) {
                // SAFETY: the caller guarantees this function's contract (`# Safety` above): The
                // CPU must have this module's features; `prep` must be the AVX2 `prep_*` function
                // for blocks of `bytes` bytes. Lengths are checked.
                unsafe {
                    let (w_row, a_row) = check_gemm(
                        k, dt, w.len(), n_rows, DType::Q8_K, a.len(), n_tok, out.len(), out_stride,
                    );
                    let (nb, bytes) = (k / QK_K, dt.block_bytes());
                    // Token tiles outside, rows inside: each token's outputs are written in order.
                    for t0 in (0..n_tok).step_by(TILE) {
                        let tn = TILE.min(n_tok - t0);
                        for r in 0..n_rows {
                            let mut acc = [_mm512_setzero_ps(); TILE];
                            for i in 0..nb {
                                let p = prep(w.as_ptr().add(r * w_row + i * bytes));
                                let wide = widen(&p);
                                for (t, acc_t) in acc.iter_mut().enumerate().take(tn) {
                                    let y = a.as_ptr().add((t0 + t) * a_row + i * BlockQ8K::BYTES);
                                    *acc_t = block_dot(&p, &wide, y, *acc_t);
                                }
                            }
                            for t in 0..tn {
                                out[(t0 + t) * out_stride + r] = _mm512_reduce_add_ps(acc[t]);
                            }
                        }
                    }
                }
            }

            avx512_entry_points! {
                $features;
                vec_dot_q2_k_q8_k, gemm_q2_k_q8_k, Q2_K, prep_q2k;
                vec_dot_q3_k_q8_k, gemm_q3_k_q8_k, Q3_K, prep_q3k;
                vec_dot_q4_k_q8_k, gemm_q4_k_q8_k, Q4_K, prep_q4k;
                vec_dot_q5_k_q8_k, gemm_q5_k_q8_k, Q5_K, prep_q5k;
                vec_dot_q6_k_q8_k, gemm_q6_k_q8_k, Q6_K, prep_q6k;
            }
        }
    };
}

avx512_kquants!(
    /// AVX-512 F+BW+VL versions (no VNNI).
    bw,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    false
);
avx512_kquants!(
    /// AVX-512 F+BW+VL+VNNI versions (`vpdpbusd` / `vpdpwssd`).
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    true
);

#[cfg(test)]
mod tests;
