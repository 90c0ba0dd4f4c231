//! Reference kernels for the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
//!
//! Rounding of the 4/5-bit formats follows ggml's `quantize_row_*_ref` in
//! `ggml/src/ggml-quants.c` exactly (`roundf` = half away from zero, `id = 1 / d`, truncating
//! casts). Q8_0/Q8_1 (the activation formats) follow llama.cpp's x86 `quantize_row_q8_0/1`
//! instead, the code its x86 builds run on activations: `id = 127 / amax` and round half to
//! even. That is what makes kiln's activations the same bytes as the reference's.
//! Pairings: Q4_0, Q5_0, Q8_0 weights dot Q8_0 activations; Q4_1, Q5_1 (and Q8_1) dot Q8_1.
//! Float order of the dot products: Q4_1, Q5_0 and Q8_0 follow llama.cpp's x86 order
//! ([`dot_lanes`]), bit for bit, so kiln's results on those files are the reference's; the
//! others sum each block exactly and add `f32(sum) * d_w * d_a` in block order.

use super::gemm_by_vec_dot;
use crate::kernels::blocks::legacy::{q4, Block};
use crate::kernels::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK,
};
use crate::kernels::shape::{check_convert, check_vec_dot};
use crate::kernels::DType;
use half::f16;

/// Iterates the `n / QK` blocks of a row and their value slices.
fn blocks_mut<'a>(
    x: &'a [f32],
    y: &'a mut [u8],
    bytes: usize,
) -> impl Iterator<Item = (&'a [f32], &'a mut [u8])> {
    x.chunks_exact(QK).zip(y.chunks_exact_mut(bytes))
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// The value with the largest magnitude, keeping its sign (first one on ties), as ggml does.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Q8_0 quantization of one 32-value block (also the activation format), as llama.cpp's x86
/// build does it: `d = amax / 127`, `q = round_half_even(x * (127 / amax))`.
#[inline]
pub fn quantize_block_q8_0(x: &[f32]) -> BlockQ8_0 {
    let m = amax(x);
    let id = if m != 0.0 { 127.0 / m } else { 0.0 };
    BlockQ8_0 {
        d: f16::from_f32(m / 127.0),
        qs: std::array::from_fn(|j| (x[j] * id).round_ties_even() as i8),
    }
}

/// Quantizes `x` (a multiple of 32 values) to Q8_0 blocks in `y`.
pub fn quantize_q8_0(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q8_0, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ8_0::BYTES) {
        quantize_block_q8_0(xb).write(yb);
    }
}

/// Quantizes `x` to Q8_1 blocks (`s = d * sum(q)`), the activations of Q4_1/Q5_1.
pub fn quantize_q8_1(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q8_1, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ8_1::BYTES) {
        let b = quantize_block_q8_0(xb);
        // ggml computes `s` from the f32 scale, before it is rounded to f16.
        let d32 = amax(xb) / 127.0;
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 {
            d: b.d,
            s: f16::from_f32(sum as f32 * d32),
            qs: b.qs,
        }
        .write(yb);
    }
}

/// Quantizes `x` to Q4_0 (`d = max / -8`, q = min(15, trunc(x / d + 8.5))).
pub fn quantize_q4_0(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q4_0, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ4_0::BYTES) {
        let d = signed_absmax(xb) / -8.0;
        let id = inv(d);
        let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        BlockQ4_0 {
            d: f16::from_f32(d),
            qs: std::array::from_fn(|j| q(xb[j]) | (q(xb[j + QK / 2]) << 4)),
        }
        .write(yb);
    }
}

/// Quantizes `x` to Q4_1 (`d = (max - min) / 15`, `m = min`).
pub fn quantize_q4_1(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q4_1, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ4_1::BYTES) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = inv(d);
        let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
        BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs: std::array::from_fn(|j| q(xb[j]) | (q(xb[j + QK / 2]) << 4)),
        }
        .write(yb);
    }
}

fn pack5(q: impl Fn(usize) -> u8) -> ([u8; 16], [u8; 4]) {
    let mut qh = 0u32;
    let qs = std::array::from_fn(|j| {
        let (lo, hi) = (q(j), q(j + QK / 2));
        qh |= ((lo as u32 & 0x10) >> 4) << j;
        qh |= ((hi as u32 & 0x10) >> 4) << (j + QK / 2);
        (lo & 0x0F) | ((hi & 0x0F) << 4)
    });
    (qs, qh.to_le_bytes())
}

/// Quantizes `x` to Q5_0 (`d = max / -16`, q = min(31, trunc(x / d + 16.5))).
pub fn quantize_q5_0(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q5_0, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ5_0::BYTES) {
        let d = signed_absmax(xb) / -16.0;
        let id = inv(d);
        let (qs, qh) = pack5(|j| ((xb[j] * id + 16.5) as i8).min(31) as u8);
        BlockQ5_0 {
            d: f16::from_f32(d),
            qh,
            qs,
        }
        .write(yb);
    }
}

/// Quantizes `x` to Q5_1 (`d = (max - min) / 31`, `m = min`).
pub fn quantize_q5_1(x: &[f32], y: &mut [u8]) {
    check_convert(DType::Q5_1, y.len(), x.len());
    for (xb, yb) in blocks_mut(x, y, BlockQ5_1::BYTES) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = inv(d);
        let (qs, qh) = pack5(|j| (((xb[j] - min) * id + 0.5) as u8).min(31));
        BlockQ5_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh,
            qs,
        }
        .write(yb);
    }
}

fn dequant<B: Block>(src: &[u8], dst: &mut [f32], dt: DType, f: impl Fn(&B, &mut [f32])) {
    check_convert(dt, src.len(), dst.len());
    for (yb, xb) in dst.chunks_exact_mut(QK).zip(src.chunks_exact(B::BYTES)) {
        f(&B::read(xb), yb);
    }
}

/// Dequantizes Q4_0 blocks.
pub fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q4_0, |b: &BlockQ4_0, y| {
        let d = b.d.to_f32();
        for (j, v) in y.iter_mut().enumerate() {
            *v = (q4(&b.qs, j) as i32 - 8) as f32 * d;
        }
    });
}

/// Dequantizes Q4_1 blocks.
pub fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q4_1, |b: &BlockQ4_1, y| {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, v) in y.iter_mut().enumerate() {
            *v = q4(&b.qs, j) as f32 * d + m;
        }
    });
}

/// Dequantizes Q5_0 blocks.
pub fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q5_0, |b: &BlockQ5_0, y| {
        let d = b.d.to_f32();
        for (j, v) in y.iter_mut().enumerate() {
            *v = (b.q(j) as i32 - 16) as f32 * d;
        }
    });
}

/// Dequantizes Q5_1 blocks.
pub fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q5_1, |b: &BlockQ5_1, y| {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, v) in y.iter_mut().enumerate() {
            *v = b.q(j) as f32 * d + m;
        }
    });
}

/// Dequantizes Q8_0 blocks.
pub fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q8_0, |b: &BlockQ8_0, y| {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = q as f32 * d;
        }
    });
}

/// Dequantizes Q8_1 blocks (`s` is not needed).
pub fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    dequant(src, dst, DType::Q8_1, |b: &BlockQ8_1, y| {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = q as f32 * d;
        }
    });
}

/// Sums `f(weight block, activation block)` over the `n / 32` block pairs.
#[inline(always)]
fn dot_blocks<W: Block, A: Block>(
    n: usize,
    w: &[u8],
    a: &[u8],
    wdt: DType,
    adt: DType,
    f: impl Fn(&W, &A) -> f32,
) -> f32 {
    check_vec_dot(n, wdt, w.len(), adt, a.len());
    let nb = n / QK;
    w.chunks_exact(W::BYTES)
        .zip(a.chunks_exact(A::BYTES))
        .take(nb)
        .map(|(wb, ab)| f(&W::read(wb), &A::read(ab)))
        .sum()
}

#[inline(always)]
fn isum(qs: &[i8; QK], q: impl Fn(usize) -> i32) -> i32 {
    (0..QK).map(|j| q(j) * qs[j] as i32).sum()
}

/// One block's terms in llama.cpp's order: `d_w * d_a`, the eight exact lane sums (lane `i`
/// = values `4i..4i+4`) and, for Q4_1, `(m_w, s_a)`.
struct LaneBlock {
    scale: f32,
    lanes: [i32; 8],
    min: Option<(f32, f32)>,
}

/// The eight lane sums of `q(j) * qs[j]` (lane `i` over `j` in `4i..4i+4`), exact.
#[inline(always)]
fn lanes(qs: &[i8; QK], q: impl Fn(usize) -> i32) -> [i32; 8] {
    std::array::from_fn(|i| (4 * i..4 * i + 4).map(|j| q(j) * qs[j] as i32).sum())
}

/// llama.cpp's x86 float order for Q4_1, Q5_0 and Q8_0 (`ggml_vec_dot_*` on AVX2/AVX-512 and
/// tinyBLAS's prompt path; see `legacy_kind::ggml_lanes`): per lane
/// `acc_i = fma(d_w * d_a, f32(lane_i), acc_i)` block after block, the minimum terms apart
/// (`summs = fma(m_w, s_a, summs)`), then [`hsum8`] plus `summs`. Every SIMD kernel of these
/// types computes exactly this, so the scalar twin is their bitwise reference.
#[inline(always)]
fn dot_lanes<W: Block, A: Block>(
    n: usize,
    w: &[u8],
    a: &[u8],
    wdt: DType,
    adt: DType,
    f: impl Fn(&W, &A) -> LaneBlock,
) -> f32 {
    check_vec_dot(n, wdt, w.len(), adt, a.len());
    let (mut acc, mut summs, mut has_min) = ([0f32; 8], 0f32, false);
    for (wb, ab) in w
        .chunks_exact(W::BYTES)
        .zip(a.chunks_exact(A::BYTES))
        .take(n / QK)
    {
        let blk = f(&W::read(wb), &A::read(ab));
        for (acc_i, &l) in acc.iter_mut().zip(&blk.lanes) {
            *acc_i = blk.scale.mul_add(l as f32, *acc_i);
        }
        if let Some((m, s)) = blk.min {
            summs = m.mul_add(s, summs);
            has_min = true;
        }
    }
    if has_min {
        hsum8(&acc) + summs
    } else {
        hsum8(&acc)
    }
}

/// llama.cpp's `hsum_float_8` order: `((l4 + l0) + (l6 + l2)) + ((l5 + l1) + (l7 + l3))`.
#[inline(always)]
pub fn hsum8(l: &[f32; 8]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|j| l[4 + j] + l[j]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Q4_0 x Q8_0 dot product of `n` values.
pub fn vec_dot_q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_blocks(
        n,
        w,
        a,
        DType::Q4_0,
        DType::Q8_0,
        |x: &BlockQ4_0, y: &BlockQ8_0| {
            let s = isum(&y.qs, |j| q4(&x.qs, j) as i32 - 8);
            s as f32 * (x.d.to_f32() * y.d.to_f32())
        },
    )
}

/// Q4_1 x Q8_1 dot product of `n` values: `d_w d_a sum(q_w q_a) + m_w s_a` per block, in
/// llama.cpp's order ([`dot_lanes`]).
pub fn vec_dot_q4_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes(
        n,
        w,
        a,
        DType::Q4_1,
        DType::Q8_1,
        |x: &BlockQ4_1, y: &BlockQ8_1| LaneBlock {
            scale: x.d.to_f32() * y.d.to_f32(),
            lanes: lanes(&y.qs, |j| q4(&x.qs, j) as i32),
            min: Some((x.m.to_f32(), y.s.to_f32())),
        },
    )
}

/// Q5_0 x Q8_0 dot product of `n` values, in llama.cpp's order ([`dot_lanes`]).
pub fn vec_dot_q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes(
        n,
        w,
        a,
        DType::Q5_0,
        DType::Q8_0,
        |x: &BlockQ5_0, y: &BlockQ8_0| LaneBlock {
            scale: x.d.to_f32() * y.d.to_f32(),
            lanes: lanes(&y.qs, |j| x.q(j) as i32 - 16),
            min: None,
        },
    )
}

/// Q5_1 x Q8_1 dot product of `n` values.
pub fn vec_dot_q5_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_blocks(
        n,
        w,
        a,
        DType::Q5_1,
        DType::Q8_1,
        |x: &BlockQ5_1, y: &BlockQ8_1| {
            let s = isum(&y.qs, |j| x.q(j) as i32);
            s as f32 * (x.d.to_f32() * y.d.to_f32()) + x.m.to_f32() * y.s.to_f32()
        },
    )
}

/// Q8_0 x Q8_0 dot product of `n` values, in llama.cpp's order ([`dot_lanes`]).
pub fn vec_dot_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes(
        n,
        w,
        a,
        DType::Q8_0,
        DType::Q8_0,
        |x: &BlockQ8_0, y: &BlockQ8_0| LaneBlock {
            scale: x.d.to_f32() * y.d.to_f32(),
            lanes: lanes(&y.qs, |j| x.qs[j] as i32),
            min: None,
        },
    )
}

/// Q8_1 x Q8_1 dot product of `n` values (Q8_1 as a weight format is rare; kept for completeness).
pub fn vec_dot_q8_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_blocks(
        n,
        w,
        a,
        DType::Q8_1,
        DType::Q8_1,
        |x: &BlockQ8_1, y: &BlockQ8_1| {
            let s = isum(&y.qs, |j| x.qs[j] as i32);
            s as f32 * (x.d.to_f32() * y.d.to_f32())
        },
    )
}

macro_rules! gemm_fns {
    ($($name:ident = $dot:ident, $w:ident, $a:ident;)*) => {$(
        /// `TypeKernels::gemm` as a loop of the reference `vec_dot`.
        pub fn $name(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            gemm_by_vec_dot($dot, DType::$w, DType::$a, k, w, n_rows, a, n_tok, out, out_stride)
        }
    )*};
}

gemm_fns! {
    gemm_q4_0 = vec_dot_q4_0, Q4_0, Q8_0;
    gemm_q4_1 = vec_dot_q4_1, Q4_1, Q8_1;
    gemm_q5_0 = vec_dot_q5_0, Q5_0, Q8_0;
    gemm_q5_1 = vec_dot_q5_1, Q5_1, Q8_1;
    gemm_q8_0 = vec_dot_q8_0, Q8_0, Q8_0;
    gemm_q8_1 = vec_dot_q8_1, Q8_1, Q8_1;
}
