//! Reference kernels for the 4-bit non-linear formats: IQ4_NL and MXFP4 (x Q8_0 activations)
//! and IQ4_XS (x Q8_K activations), the pairings of ggml's CPU backend.
//!
//! Dequantization is ggml's (`dequantize_row_iq4_nl`, `_iq4_xs`, `_mxfp4` in
//! `ggml/src/ggml-quants.c`), value for value. The dot products are kiln's own order, which
//! every SIMD twin (AVX2, AVX-512, NEON) computes bit for bit:
//!
//! - Each output keeps eight f32 lanes. Lane `i` of a 32-value block is the exact integer sum
//!   of the products of values `4i..4i+4` (table value x activation quant).
//! - IQ4_NL / MXFP4, per block `b`: `c = d_w * d_a` (f32; `d_w` the f16 `d` or
//!   `2^(e - 128)`, `d_a` the Q8_0 block's f16 `d`), then `acc_i = fma(c, f32(lane_i), acc_i)`.
//! - IQ4_XS, per super-block: lane `i` is `sum over the 8 groups g of (ls_g - 32) * lane_i(g)`,
//!   still an exact integer (|.| < 2^24, so its f32 is exact too); `c = d_w * d_a` (`d_a` the
//!   Q8_K f32 scale), then the same fma.
//! - The result is [`hsum8`] of the lanes.
//!
//! Activation quants must lie in -127..=127 (kiln's Q8_0 and Q8_K quantizers never produce
//! -128); the x86 kernels rely on it (`vpsignb`). The quantizers are in `nonlinear_quant`.

use super::gemm_by_vec_dot;
use super::legacy::hsum8;
use crate::kernels::blocks::nonlinear::{
    code, d_of, e8m0_to_f32_half, iq4_xs_scale, IQ4_XS_BYTES, IQ4_XS_VALUES, KVALUES_IQ4NL,
    KVALUES_MXFP4,
};
use crate::kernels::blocks::{f16_to_f32_at, QK};
use crate::kernels::shape::{check_convert, check_vec_dot};
use crate::kernels::DType;

/// Bytes of a Q8_0 block (f16 d, 32 quants) and of a Q8_K block (f32 d, 256 quants, 16 sums).
const Q8_0_BYTES: usize = 34;
const Q8_K_BYTES: usize = 292;

/// The eight exact lane sums of one 32-value group: lane `i` = sum over `j` in `4i..4i+4` of
/// `table[code j] * a[j]`.
#[inline(always)]
fn lanes(table: &[i8; 16], qs: &[u8], a: &[u8]) -> [i32; 8] {
    std::array::from_fn(|i| {
        (4 * i..4 * i + 4)
            .map(|j| table[code(qs, j)] as i32 * a[j] as i8 as i32)
            .sum()
    })
}

/// `acc_i = fma(c, f32(lanes_i), acc_i)`.
#[inline(always)]
fn fma_lanes(acc: &mut [f32; 8], c: f32, l: &[i32; 8]) {
    for (x, &s) in acc.iter_mut().zip(l) {
        *x = c.mul_add(s as f32, *x);
    }
}

/// The dot product of a 32-value kind: `scale(block)` is its f32 `d_w`, `qoff` where its 16
/// code bytes start.
#[inline(always)]
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
    let mut acc = [0f32; 8];
    for (wb, ab) in w
        .chunks_exact(wdt.block_bytes())
        .zip(a.chunks_exact(Q8_0_BYTES))
        .take(n / QK)
    {
        let c = scale(wb) * f16_to_f32_at(ab, 0);
        fma_lanes(&mut acc, c, &lanes(table, &wb[qoff..qoff + 16], &ab[2..]));
    }
    hsum8(&acc)
}

/// IQ4_NL x Q8_0 dot product of `n` values (the module's float order).
pub fn vec_dot_iq4_nl(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot32(n, w, a, DType::IQ4_NL, &KVALUES_IQ4NL, 2, d_of)
}

/// MXFP4 x Q8_0 dot product of `n` values (the module's float order).
pub fn vec_dot_mxfp4(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot32(n, w, a, DType::MXFP4, &KVALUES_MXFP4, 1, |b| {
        e8m0_to_f32_half(b[0])
    })
}

/// IQ4_XS x Q8_K dot product of `n` values (the module's float order).
pub fn vec_dot_iq4_xs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, DType::IQ4_XS, w.len(), DType::Q8_K, a.len());
    let mut acc = [0f32; 8];
    for (wb, ab) in w
        .chunks_exact(IQ4_XS_BYTES)
        .zip(a.chunks_exact(Q8_K_BYTES))
        .take(n / IQ4_XS_VALUES)
    {
        let mut sum = [0i32; 8];
        for g in 0..8 {
            let ls = iq4_xs_scale(wb, g);
            let l = lanes(
                &KVALUES_IQ4NL,
                &wb[8 + 16 * g..8 + 16 * g + 16],
                &ab[4 + 32 * g..],
            );
            for (s, x) in sum.iter_mut().zip(l) {
                *s += ls * x;
            }
        }
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        fma_lanes(&mut acc, d_of(wb) * da, &sum);
    }
    hsum8(&acc)
}

/// Dequantizes 32-value blocks of a table kind (ggml's `y = d * table[q]`).
fn dequant32(
    src: &[u8],
    dst: &mut [f32],
    dt: DType,
    table: &[i8; 16],
    qoff: usize,
    scale: impl Fn(&[u8]) -> f32,
) {
    check_convert(dt, src.len(), dst.len());
    for (y, b) in dst
        .chunks_exact_mut(QK)
        .zip(src.chunks_exact(dt.block_bytes()))
    {
        let d = scale(b);
        for (j, v) in y.iter_mut().enumerate() {
            *v = d * table[code(&b[qoff..qoff + 16], j)] as f32;
        }
    }
}

/// Dequantizes IQ4_NL blocks.
pub fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    dequant32(src, dst, DType::IQ4_NL, &KVALUES_IQ4NL, 2, d_of);
}

/// Dequantizes MXFP4 blocks (`table[q] * 2^(e - 128)`).
pub fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    dequant32(src, dst, DType::MXFP4, &KVALUES_MXFP4, 1, |b| {
        e8m0_to_f32_half(b[0])
    });
}

/// Dequantizes IQ4_XS super-blocks (`(d * (ls - 32)) * table[q]`).
pub fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    check_convert(DType::IQ4_XS, src.len(), dst.len());
    for (y, b) in dst
        .chunks_exact_mut(IQ4_XS_VALUES)
        .zip(src.chunks_exact(IQ4_XS_BYTES))
    {
        let d = d_of(b);
        for (g, yg) in y.chunks_exact_mut(QK).enumerate() {
            let dl = d * iq4_xs_scale(b, g) as f32;
            let qs = &b[8 + 16 * g..8 + 16 * g + 16];
            for (j, v) in yg.iter_mut().enumerate() {
                *v = dl * KVALUES_IQ4NL[code(qs, j)] as f32;
            }
        }
    }
}

/// `TypeKernels::gemm` as a loop of the reference `vec_dot`.
pub fn gemm_iq4_nl(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    gemm_by_vec_dot(
        vec_dot_iq4_nl,
        DType::IQ4_NL,
        DType::Q8_0,
        k,
        w,
        n_rows,
        a,
        n_tok,
        out,
        os,
    )
}

/// `TypeKernels::gemm` as a loop of the reference `vec_dot`.
pub fn gemm_mxfp4(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    gemm_by_vec_dot(
        vec_dot_mxfp4,
        DType::MXFP4,
        DType::Q8_0,
        k,
        w,
        n_rows,
        a,
        n_tok,
        out,
        os,
    )
}

/// `TypeKernels::gemm` as a loop of the reference `vec_dot`.
pub fn gemm_iq4_xs(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    gemm_by_vec_dot(
        vec_dot_iq4_xs,
        DType::IQ4_XS,
        DType::Q8_K,
        k,
        w,
        n_rows,
        a,
        n_tok,
        out,
        os,
    )
}
