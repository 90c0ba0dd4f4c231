//! Reference kernels for float rows: F32, F16, BF16 weights against F32 activations.
//!
//! Unlike ggml (which dots F16 weights with F16 activations), kiln keeps float-weight
//! activations in F32: `vec_dot_type` is F32 for all three. Bytes are little-endian.

use super::gemm_by_vec_dot;
use crate::kernels::shape::{check_convert, check_vec_dot};
use crate::kernels::DType;
use half::{bf16, f16};

#[inline(always)]
fn f32_at(c: &[u8]) -> f32 {
    f32::from_le_bytes([c[0], c[1], c[2], c[3]])
}

#[inline(always)]
fn f16_at(c: &[u8]) -> f32 {
    f16::from_le_bytes([c[0], c[1]]).to_f32()
}

#[inline(always)]
fn bf16_at(c: &[u8]) -> f32 {
    bf16::from_le_bytes([c[0], c[1]]).to_f32()
}

fn to_f32(src: &[u8], dst: &mut [f32], dt: DType, get: fn(&[u8]) -> f32) {
    check_convert(dt, src.len(), dst.len());
    let w = dt.block_bytes();
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(w)) {
        *d = get(c);
    }
}

/// Copies little-endian F32 bytes to f32.
pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    to_f32(src, dst, DType::F32, f32_at)
}

/// Converts F16 values to f32.
pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    to_f32(src, dst, DType::F16, f16_at)
}

/// Converts BF16 values to f32.
pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    to_f32(src, dst, DType::BF16, bf16_at)
}

/// Writes `x` as little-endian F32 bytes.
pub fn quantize_f32(x: &[f32], y: &mut [u8]) {
    check_convert(DType::F32, y.len(), x.len());
    for (c, v) in y.chunks_exact_mut(4).zip(x) {
        c.copy_from_slice(&v.to_le_bytes());
    }
}

/// Rounds `x` to F16 (nearest even).
pub fn quantize_f16(x: &[f32], y: &mut [u8]) {
    check_convert(DType::F16, y.len(), x.len());
    for (c, v) in y.chunks_exact_mut(2).zip(x) {
        c.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
}

/// Rounds `x` to BF16 (nearest even).
pub fn quantize_bf16(x: &[f32], y: &mut [u8]) {
    check_convert(DType::BF16, y.len(), x.len());
    for (c, v) in y.chunks_exact_mut(2).zip(x) {
        c.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
    }
}

fn dot(n: usize, w: &[u8], a: &[u8], dt: DType, get: fn(&[u8]) -> f32) -> f32 {
    check_vec_dot(n, dt, w.len(), DType::F32, a.len());
    let wb = dt.block_bytes();
    w.chunks_exact(wb)
        .zip(a.chunks_exact(4))
        .take(n)
        .map(|(x, y)| get(x) * f32_at(y))
        .sum()
}

/// F32 x F32 dot product of `n` values.
pub fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot(n, w, a, DType::F32, f32_at)
}

/// F16 x F32 dot product of `n` values.
pub fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot(n, w, a, DType::F16, f16_at)
}

/// BF16 x F32 dot product of `n` values.
pub fn vec_dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot(n, w, a, DType::BF16, bf16_at)
}

macro_rules! gemm_fns {
    ($($name:ident = $dot:ident, $w:ident;)*) => {$(
        /// `TypeKernels::gemm` as a loop of the reference `vec_dot`.
        pub fn $name(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            gemm_by_vec_dot($dot, DType::$w, DType::F32, k, w, n_rows, a, n_tok, out, out_stride)
        }
    )*};
}

gemm_fns! {
    gemm_f32 = vec_dot_f32, F32;
    gemm_f16 = vec_dot_f16, F16;
    gemm_bf16 = vec_dot_bf16, BF16;
}
