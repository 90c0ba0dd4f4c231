//! Scalar reference kernels for the K-quants (Q2_K..Q6_K weights, Q8_K activations).
//!
//! Formats follow `ggml/src/ggml-common.h` (see `blocks::kquants`). Every dot product here
//! computes, per 256-value block, an exact integer sum (sub-block scales applied in integers)
//! and then one float step `d_w * d_a * sum - dmin_w * d_a * sum_mins`; the SIMD twins compute
//! the same integers, so they may differ from these only in float rounding.
//!
//! Weight quantizers (Q2_K..Q6_K) are kiln's own: a per-sub-block least-squares fit of scale
//! (and min) over a few candidate grids, then the sub-block scales quantized against a block
//! scale and the values re-rounded with the stored scales.

use crate::kernels::blocks::kquants::{
    read_block, scales_mins_k4, scales_q3k, write_block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K,
    BlockQ6K, BlockQ8K, KBlock, QK_K,
};
use half::f16;

/// Round half to even, like ggml's `nearest_int` (and the x86 default rounding mode).
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// Number of blocks in `n` values, checking the byte length of a row of block type `B`.
fn blocks_of<B: KBlock>(n: usize, bytes: usize, what: &str) -> usize {
    assert!(
        n.is_multiple_of(QK_K),
        "{what}: {n} values is not a multiple of {QK_K}"
    );
    let nb = n / QK_K;
    assert!(
        bytes >= nb * B::BYTES,
        "{what}: {bytes} bytes is less than {nb} blocks of {}",
        B::BYTES
    );
    nb
}

// ------------------------------------------------------------------ Q8_K (activations)

/// Quantize `src` (a whole number of 256-value blocks) to Q8_K, bit-exact with ggml's
/// `quantize_row_q8_K_ref`: `d = max / -127` where `max` is the first value of largest
/// magnitude, `q = round_half_even(x * (-127 / max))`, plus the 16 block sums.
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) {
    let nb = blocks_of::<BlockQ8K>(src.len(), dst.len(), "quantize_row_q8_k");
    for (i, x) in src.chunks_exact(QK_K).enumerate().take(nb) {
        write_block(dst, i, &q8k_block(x));
    }
}

/// One Q8_K block from 256 values.
pub(crate) fn q8k_block(x: &[f32]) -> BlockQ8K {
    let mut b = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).clamp(-128, 127) as i8;
    }
    fill_bsums(&mut b);
    b.d = 1.0 / iscale;
    b
}

/// Recompute `bsums` from `qs`.
pub(crate) fn fill_bsums(b: &mut BlockQ8K) {
    for (g, s) in b.bsums.iter_mut().enumerate() {
        *s = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
    }
}

/// Dequantize Q8_K: `x = d * q`.
pub fn dequantize_row_q8_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ8K>(dst.len(), src.len(), "dequantize_row_q8_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ8K = read_block(src, i);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = b.d * q as f32;
        }
    }
}

// ------------------------------------------------------------------ unpacking helpers

/// The 256 two-bit values of a Q2_K/Q3_K `qs` array, in value order.
#[inline(always)]
fn unpack_2bit(qs: &[u8; 64]) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for h in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                out[128 * h + 32 * s + l] = (qs[32 * h + l] >> (2 * s)) & 3;
            }
        }
    }
    out
}

/// Q3_K values as signed integers -4..=3, in value order.
#[inline(always)]
fn unpack_q3k(b: &BlockQ3K) -> [i8; QK_K] {
    let low = unpack_2bit(&b.qs);
    let mut out = [0i8; QK_K];
    for (v, o) in out.iter_mut().enumerate() {
        let high = (b.hmask[v % 32] >> (v / 32)) & 1;
        *o = low[v] as i8 - if high == 1 { 0 } else { 4 };
    }
    out
}

/// The 256 four-bit values of a Q4_K/Q5_K `qs` array, in value order.
#[inline(always)]
fn unpack_4bit(qs: &[u8; 128]) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for p in 0..4 {
        for l in 0..32 {
            out[64 * p + l] = qs[32 * p + l] & 0xF;
            out[64 * p + 32 + l] = qs[32 * p + l] >> 4;
        }
    }
    out
}

/// Q5_K values 0..=31, in value order.
#[inline(always)]
fn unpack_q5k(b: &BlockQ5K) -> [u8; QK_K] {
    let mut out = unpack_4bit(&b.qs);
    for (v, o) in out.iter_mut().enumerate() {
        *o |= ((b.qh[v % 32] >> (v / 32)) & 1) << 4;
    }
    out
}

/// Q6_K values 0..=63 (before the -32 offset), in value order.
#[inline(always)]
fn unpack_q6k(b: &BlockQ6K) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for h in 0..2 {
        for l in 0..32 {
            let (ql0, ql1, qh) = (b.ql[64 * h + l], b.ql[64 * h + 32 + l], b.qh[32 * h + l]);
            out[128 * h + l] = (ql0 & 0xF) | ((qh & 3) << 4);
            out[128 * h + 32 + l] = (ql1 & 0xF) | (((qh >> 2) & 3) << 4);
            out[128 * h + 64 + l] = (ql0 >> 4) | (((qh >> 4) & 3) << 4);
            out[128 * h + 96 + l] = (ql1 >> 4) | (((qh >> 6) & 3) << 4);
        }
    }
    out
}

// ------------------------------------------------------------------ dequantize

/// Dequantize Q2_K: `x = d * (sc & 15) * q - dmin * (sc >> 4)` per 16-value sub-block.
pub fn dequantize_row_q2_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ2K>(dst.len(), src.len(), "dequantize_row_q2_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ2K = read_block(src, i);
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        let q = unpack_2bit(&b.qs);
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (b.scales[g] & 0xF) as f32;
            let ml = dmin * (b.scales[g] >> 4) as f32;
            for (o, &v) in ys.iter_mut().zip(&q[16 * g..]) {
                *o = dl * v as f32 - ml;
            }
        }
    }
}

/// Dequantize Q3_K: `x = d * sc * q` with signed scales and q in -4..=3.
pub fn dequantize_row_q3_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ3K>(dst.len(), src.len(), "dequantize_row_q3_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ3K = read_block(src, i);
        let d = b.d.to_f32();
        let sc = scales_q3k(&b.scales);
        let q = unpack_q3k(&b);
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * sc[g] as f32;
            for (o, &v) in ys.iter_mut().zip(&q[16 * g..]) {
                *o = dl * v as f32;
            }
        }
    }
}

/// Dequantize Q4_K: `x = d * sc * q - dmin * m` per 32-value sub-block.
pub fn dequantize_row_q4_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ4K>(dst.len(), src.len(), "dequantize_row_q4_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ4K = read_block(src, i);
        dequant_affine32(b.d, b.dmin, &b.scales, &unpack_4bit(&b.qs), y);
    }
}

/// Dequantize Q5_K: as Q4_K with 5-bit values.
pub fn dequantize_row_q5_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ5K>(dst.len(), src.len(), "dequantize_row_q5_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ5K = read_block(src, i);
        dequant_affine32(b.d, b.dmin, &b.scales, &unpack_q5k(&b), y);
    }
}

fn dequant_affine32(d: f16, dmin: f16, scales: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    let (d, dmin) = (d.to_f32(), dmin.to_f32());
    let (sc, m) = scales_mins_k4(scales);
    for (j, ys) in y.chunks_exact_mut(32).enumerate() {
        let (dl, ml) = (d * sc[j] as f32, dmin * m[j] as f32);
        for (o, &v) in ys.iter_mut().zip(&q[32 * j..]) {
            *o = dl * v as f32 - ml;
        }
    }
}

/// Dequantize Q6_K: `x = d * sc * (q - 32)` per 16-value sub-block.
pub fn dequantize_row_q6_k(src: &[u8], dst: &mut [f32]) {
    let nb = blocks_of::<BlockQ6K>(dst.len(), src.len(), "dequantize_row_q6_k");
    for (i, y) in dst.chunks_exact_mut(QK_K).enumerate().take(nb) {
        let b: BlockQ6K = read_block(src, i);
        let d = b.d.to_f32();
        let q = unpack_q6k(&b);
        for (g, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * b.scales[g] as f32;
            for (o, &v) in ys.iter_mut().zip(&q[16 * g..]) {
                *o = dl * (v as i32 - 32) as f32;
            }
        }
    }
}

// ------------------------------------------------------------------ dot products

/// Integer dot product of 16-value group `g` of `q` with the activations.
#[inline(always)]
fn group_dot<T: Copy + Into<i32>>(q: &[T], a: &[i8; QK_K], start: usize, len: usize) -> i32 {
    q[start..start + len]
        .iter()
        .zip(&a[start..start + len])
        .map(|(&w, &x)| w.into() * x as i32)
        .sum()
}

/// Dot product of `n` values: Q2_K weights `w` with Q8_K activations `a`.
pub fn vec_dot_q2_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ2K>(n, w.len(), "vec_dot_q2_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q2_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ2K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        let q = unpack_2bit(&x.qs);
        let (mut isum, mut msum) = (0i32, 0i32);
        for g in 0..16 {
            isum += (x.scales[g] & 0xF) as i32 * group_dot(&q, &y.qs, 16 * g, 16);
            msum += (x.scales[g] >> 4) as i32 * y.bsums[g] as i32;
        }
        sum += y.d * x.d.to_f32() * isum as f32 - y.d * x.dmin.to_f32() * msum as f32;
    }
    sum
}

/// Dot product of `n` values: Q3_K weights `w` with Q8_K activations `a`.
pub fn vec_dot_q3_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ3K>(n, w.len(), "vec_dot_q3_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q3_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ3K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        let q = unpack_q3k(&x);
        let sc = scales_q3k(&x.scales);
        let isum: i32 = (0..16)
            .map(|g| sc[g] as i32 * group_dot(&q, &y.qs, 16 * g, 16))
            .sum();
        sum += y.d * x.d.to_f32() * isum as f32;
    }
    sum
}

/// Dot product of `n` values: Q4_K weights `w` with Q8_K activations `a`.
pub fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ4K>(n, w.len(), "vec_dot_q4_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q4_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ4K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        sum += affine32_dot(x.d, x.dmin, &x.scales, &unpack_4bit(&x.qs), &y);
    }
    sum
}

/// Dot product of `n` values: Q5_K weights `w` with Q8_K activations `a`.
pub fn vec_dot_q5_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ5K>(n, w.len(), "vec_dot_q5_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q5_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ5K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        sum += affine32_dot(x.d, x.dmin, &x.scales, &unpack_q5k(&x), &y);
    }
    sum
}

fn affine32_dot(d: f16, dmin: f16, scales: &[u8; 12], q: &[u8; QK_K], y: &BlockQ8K) -> f32 {
    let (sc, m) = scales_mins_k4(scales);
    let (mut isum, mut msum) = (0i32, 0i32);
    for j in 0..8 {
        isum += sc[j] as i32 * group_dot(q, &y.qs, 32 * j, 32);
        msum += m[j] as i32 * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32);
    }
    y.d * d.to_f32() * isum as f32 - y.d * dmin.to_f32() * msum as f32
}

/// Dot product of `n` values: Q6_K weights `w` with Q8_K activations `a`.
pub fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ6K>(n, w.len(), "vec_dot_q6_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q6_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ6K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        let q = unpack_q6k(&x);
        let isum: i32 = (0..16)
            .map(|g| {
                let dot = group_dot(&q, &y.qs, 16 * g, 16) - 32 * y.bsums[g] as i32;
                x.scales[g] as i32 * dot
            })
            .sum();
        sum += y.d * x.d.to_f32() * isum as f32;
    }
    sum
}

/// Dot product of `n` values: Q8_K with Q8_K (`sum d_w * d_a * sum(q_w * q_a)` per block).
pub fn vec_dot_q8_k_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = blocks_of::<BlockQ8K>(n, w.len(), "vec_dot_q8_k_q8_k w");
    blocks_of::<BlockQ8K>(n, a.len(), "vec_dot_q8_k_q8_k a");
    let mut sum = 0.0f32;
    for i in 0..nb {
        let (x, y): (BlockQ8K, BlockQ8K) = (read_block(w, i), read_block(a, i));
        sum += x.d * y.d * group_dot(&x.qs, &y.qs, 0, QK_K) as f32;
    }
    sum
}

macro_rules! gemm_by_vec_dot {
    ($($gemm:ident = $dot:ident, $dt:ident;)*) => {$(
        #[doc = concat!("`TypeKernels::gemm` for ", stringify!($dt),
            " x Q8_K as one [`", stringify!($dot), "`] per (row, token).")]
        pub fn $gemm(
            k: usize,
            w: &[u8],
            n_rows: usize,
            a: &[u8],
            n_tok: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            use crate::kernels::DType;
            super::gemm_by_vec_dot(
                $dot, DType::$dt, DType::Q8_K, k, w, n_rows, a, n_tok, out, out_stride,
            )
        }
    )*};
}

gemm_by_vec_dot! {
    gemm_q2_k_q8_k = vec_dot_q2_k_q8_k, Q2_K;
    gemm_q3_k_q8_k = vec_dot_q3_k_q8_k, Q3_K;
    gemm_q4_k_q8_k = vec_dot_q4_k_q8_k, Q4_K;
    gemm_q5_k_q8_k = vec_dot_q5_k_q8_k, Q5_K;
    gemm_q6_k_q8_k = vec_dot_q6_k_q8_k, Q6_K;
    gemm_q8_k_q8_k = vec_dot_q8_k_q8_k, Q8_K;
}

mod quantize;
pub use quantize::{
    quantize_row_q2_k, quantize_row_q3_k, quantize_row_q4_k, quantize_row_q5_k, quantize_row_q6_k,
};

#[cfg(test)]
pub(crate) mod tests;
