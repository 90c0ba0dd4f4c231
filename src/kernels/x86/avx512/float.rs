//! The float-weight (F32, F16, BF16) `gemm` for AVX-512 CPUs: up to six tokens per weight row.
//!
//! The dot products are the AVX2 kernel's ([`avx2::float::dot_n`]: the same 8-lane FMAs in
//! the same order), so every cell stays bit-identical to the `vec_dot` this ISA uses (the AVX2
//! one). What AVX-512 VL adds is 32 vector registers: six tokens' 24 accumulators fit beside
//! the converted weights, so a speculative verify of 1 + 4 or 1 + 5 tokens reads and converts
//! each F16 weight once instead of twice (the AVX2 kernel's 16 registers hold three tokens).
//! Scalar twin: the scalar `gemm_f16` etc. (equal within the float tolerance, as the AVX2
//! `vec_dot` is); tested bit-identical to `vec_dot` in `float_gemm_equals_vec_dot_bits`.

use crate::kernels::shape::check_gemm;
use crate::kernels::x86::avx2::float::{dot_n, wdt, BF16, F16, F32};
use crate::kernels::DType;

/// Most tokens sharing one pass over a weight row.
const MAX_TOK: usize = 6;

/// Writes the dot products of weight row `r` with tokens `t..t + N` into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F/VL, AVX2, FMA and F16C; `wrow` holds `k` values of type `T`
/// and `a` rows of `ar` bytes, `k` f32 each, for every token (asserted in `dot_n`).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn cells<const T: u8, const N: usize>(
    k: usize,
    wrow: &[u8],
    a: &[u8],
    ar: usize,
    t: usize,
    r: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    // SAFETY: this function's features include dot_n's; lengths asserted by dot_n.
    let d = unsafe {
        dot_n::<T, N>(
            k,
            wrow,
            std::array::from_fn(|u| &a[(t + u) * ar..(t + u + 1) * ar]),
        )
    };
    for (u, v) in d.iter().enumerate() {
        out[(t + u) * out_stride + r] = *v;
    }
}

/// `gemm` of float weights: row by row, each row's weights converted once for up to
/// [`MAX_TOK`] tokens at a time. Every cell is bit-identical to the AVX2 `vec_dot`.
///
/// # Safety
/// The CPU must support AVX-512 F/VL, AVX2, FMA and F16C. Lengths are checked (panics).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn gemm<const T: u8>(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let (wr, ar) = check_gemm(
        k,
        wdt(T),
        w.len(),
        n_rows,
        DType::F32,
        a.len(),
        n_tok,
        out.len(),
        out_stride,
    );
    for r in 0..n_rows {
        let wrow = &w[r * wr..(r + 1) * wr];
        let mut t = 0;
        while t < n_tok {
            let m = (n_tok - t).min(MAX_TOK);
            // SAFETY: same target features as the caller; rows of `k` values (checked).
            unsafe {
                match m {
                    1 => cells::<T, 1>(k, wrow, a, ar, t, r, out, out_stride),
                    2 => cells::<T, 2>(k, wrow, a, ar, t, r, out, out_stride),
                    3 => cells::<T, 3>(k, wrow, a, ar, t, r, out, out_stride),
                    4 => cells::<T, 4>(k, wrow, a, ar, t, r, out, out_stride),
                    5 => cells::<T, 5>(k, wrow, a, ar, t, r, out, out_stride),
                    _ => cells::<T, MAX_TOK>(k, wrow, a, ar, t, r, out, out_stride),
                }
            }
            t += m;
        }
    }
}

macro_rules! entry_points {
    ($($t:ident: $gm:ident;)*) => {$(
        /// The AVX-512 `gemm` ([`gemm`]): every cell bit-identical to the AVX2 `vec_dot`.
        ///
        /// # Safety
        /// The CPU must support AVX-512 F/VL, AVX2, FMA and F16C. Lengths are checked (panics).
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            // SAFETY: same target features as the caller.
            unsafe { gemm::<$t>(k, w, n_rows, a, n_tok, out, out_stride) }
        }
    )*};
}

entry_points! {
    F32: gemm_f32;
    F16: gemm_f16;
    BF16: gemm_bf16;
}
