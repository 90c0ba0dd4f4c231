//! K-quant rows of the dispatch table, on every ISA this CPU supports: accuracy against f32
//! with llama.cpp's test-quantize-fns limits, every row's vec_dot/gemm/Q8_K quantizer against
//! the scalar row, and the SIMD versions actually installed.

use super::util::{cos_data, quantize, quantize_act};
use crate::kernels::{kernels_for, DType, Isa};

const N: usize = 32 * 128;

/// (dtype, max round-trip error, max dot error / n): MAX_QUANTIZATION_TOTAL_ERROR{_2BITS,
/// _3BITS,} and MAX_DOT_PRODUCT_ERROR{_LOWBIT,} of llama.cpp's tests/test-quantize-fns.cpp.
const KQUANTS: [(DType, f32, f32); 6] = [
    (DType::Q2_K, 0.0075, 0.04),
    (DType::Q3_K, 0.0040, 0.02),
    (DType::Q4_K, 0.002, 0.02),
    (DType::Q5_K, 0.002, 0.02),
    (DType::Q6_K, 0.002, 0.02),
    (DType::Q8_K, 0.002, 0.02),
];

fn rmse(a: &[f32], b: &[f32]) -> f32 {
    let s: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    (s.sqrt() / a.len() as f64) as f32
}

#[test]
fn kquant_rows_are_accurate_on_every_isa() {
    let x = cos_data(0.0, N);
    let y = cos_data(1.0, N);
    let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
    for isa in Isa::tested() {
        for (dt, max_err, max_dot) in KQUANTS {
            let k = kernels_for(dt, isa).unwrap();
            assert_eq!(k.vec_dot_type, DType::Q8_K);
            let w = quantize(k, &x);
            let mut back = vec![0f32; N];
            (k.to_f32)(&w, &mut back);
            let e = rmse(&x, &back);
            assert!(e < max_err, "{isa} {dt}: round-trip error {e}");
            let a = quantize_act(k, &y);
            let dot_err = (((k.vec_dot)(N, &w, &a) as f64 - exact).abs() / N as f64) as f32;
            assert!(dot_err < max_dot, "{isa} {dt}: dot error {dot_err}");
        }
    }
}

#[test]
fn kquant_rows_match_the_scalar_rows() {
    let (rows, toks, k) = (3, 5, 512);
    let w_f32 = cos_data(0.3, rows * k);
    let a_f32: Vec<f32> = (0..toks * k)
        .map(|i| (i as f32 * 0.61).sin() * 3.0)
        .collect();
    let q8k = kernels_for(DType::Q8_K, Isa::Scalar).unwrap();
    let a = quantize(q8k, &a_f32);
    for isa in Isa::tested() {
        // Q8_K quantization is bit-identical everywhere.
        assert_eq!(
            quantize(kernels_for(DType::Q8_K, isa).unwrap(), &a_f32),
            a,
            "{isa}"
        );
        for (dt, _, _) in KQUANTS {
            let (kr, ks) = (
                kernels_for(dt, isa).unwrap(),
                kernels_for(dt, Isa::Scalar).unwrap(),
            );
            let w = quantize(ks, &w_f32);
            let stride = rows + 1;
            let mut got = vec![0f32; toks * stride];
            let mut want = got.clone();
            (kr.gemm)(k, &w, rows, &a, toks, &mut got, stride);
            (ks.gemm)(k, &w, rows, &a, toks, &mut want, stride);
            let (wb, ab) = (dt.bytes_for(k as u64).unwrap() as usize, 292 * k / 256);
            for t in 0..toks {
                for r in 0..rows {
                    let (g, s) = (got[t * stride + r], want[t * stride + r]);
                    let v = (kr.vec_dot)(k, &w[r * wb..(r + 1) * wb], &a[t * ab..(t + 1) * ab]);
                    assert!(
                        (g - s).abs() <= 1e-4 * s.abs().max(1.0),
                        "{isa} {dt}: {g} vs {s}"
                    );
                    assert!(
                        (v - s).abs() <= 1e-4 * s.abs().max(1.0),
                        "{isa} {dt}: {v} vs {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn simd_kquant_kernels_are_installed() {
    let best = Isa::detect();
    if best == Isa::Scalar {
        crate::test_skip::skip("no SIMD instruction set on this CPU: nothing to install");
        return;
    }
    for (dt, _, _) in KQUANTS.iter().take(5) {
        let (kb, ks) = (
            kernels_for(*dt, best).unwrap(),
            kernels_for(*dt, Isa::Scalar).unwrap(),
        );
        assert_ne!(
            kb.vec_dot as usize, ks.vec_dot as usize,
            "{best} {dt}: scalar vec_dot"
        );
        assert_ne!(
            kb.gemm as usize, ks.gemm as usize,
            "{best} {dt}: scalar gemm"
        );
    }
}
