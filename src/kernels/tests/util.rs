//! Shared helpers for kernel tests.

use crate::kernels::{DType, TypeKernels};

/// llama.cpp's test data: `0.1 + 2 cos(i + offset)`.
pub fn cos_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

/// Quantizes `x` with `dt`'s reference quantizer.
pub fn quantize(k: &TypeKernels, x: &[f32]) -> Vec<u8> {
    quantize_as(k.dtype, k.from_f32.expect("quantizer"), x)
}

pub fn quantize_as(dt: DType, f: fn(&[f32], &mut [u8]), x: &[f32]) -> Vec<u8> {
    let mut y = vec![0u8; dt.bytes_for(x.len() as u64).expect("whole blocks") as usize];
    f(x, &mut y);
    y
}

/// Quantizes activations `x` into `k.vec_dot_type` with the scalar table's quantizer.
pub fn quantize_act(k: &TypeKernels, x: &[f32]) -> Vec<u8> {
    let ak = crate::kernels::kernels_for(k.vec_dot_type, crate::kernels::Isa::Scalar)
        .expect("activation kernels");
    quantize(ak, x)
}
