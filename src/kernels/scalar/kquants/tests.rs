//! Reference-kernel tests: round-trip and dot-product error within llama.cpp's
//! `tests/test-quantize-fns.cpp` limits, Q8_K bit-exactness, and vec_dot == dequantized dot.

use super::*;
use crate::kernels::blocks::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
use crate::kernels::DType;
use half::f16;

type Quant = fn(&[f32], &mut [u8]);
type Dequant = fn(&[u8], &mut [f32]);
type Dot = fn(usize, &[u8], &[u8]) -> f32;

/// (dtype, quantize, dequantize, vec_dot, max round-trip error, max dot error), with the limits
/// of test-quantize-fns.cpp (MAX_QUANTIZATION_TOTAL_ERROR{,_2BITS,_3BITS}, MAX_DOT_PRODUCT_ERROR
/// {,_LOWBIT}).
const TYPES: [(DType, Quant, Dequant, Dot, f32, f32); 5] = [
    (
        DType::Q2_K,
        quantize_row_q2_k,
        dequantize_row_q2_k,
        vec_dot_q2_k_q8_k,
        0.0075,
        0.04,
    ),
    (
        DType::Q3_K,
        quantize_row_q3_k,
        dequantize_row_q3_k,
        vec_dot_q3_k_q8_k,
        0.0040,
        0.02,
    ),
    (
        DType::Q4_K,
        quantize_row_q4_k,
        dequantize_row_q4_k,
        vec_dot_q4_k_q8_k,
        0.002,
        0.02,
    ),
    (
        DType::Q5_K,
        quantize_row_q5_k,
        dequantize_row_q5_k,
        vec_dot_q5_k_q8_k,
        0.002,
        0.02,
    ),
    (
        DType::Q6_K,
        quantize_row_q6_k,
        dequantize_row_q6_k,
        vec_dot_q6_k_q8_k,
        0.002,
        0.02,
    ),
];

/// test-quantize-fns.cpp's synthetic data: `0.1 + amplitude * cos(i + offset)`.
fn generate(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

/// test-quantize-fns.cpp's "rmse": sqrt(sum of squared differences) / n.
fn total_error(a: &[f32], b: &[f32]) -> f32 {
    let s: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    (s.sqrt() / a.len() as f64) as f32
}

fn bytes(d: DType, n: usize) -> Vec<u8> {
    vec![0u8; d.bytes_for(n as u64).unwrap() as usize]
}

const N: usize = 32 * 128;

#[test]
fn round_trip_and_dot_errors_within_llama_cpp_limits() {
    let x = generate(0.0, N);
    let y = generate(1.0, N);
    let mut a = bytes(DType::Q8_K, N);
    quantize_row_q8_k(&y, &mut a);
    let exact: f64 = x.iter().zip(&y).map(|(p, q)| (p * q) as f64).sum();
    for (d, quant, dequant, dot, max_err, max_dot) in TYPES {
        let mut w = bytes(d, N);
        quant(&x, &mut w);
        let mut back = vec![0f32; N];
        dequant(&w, &mut back);
        let err = total_error(&x, &back);
        assert!(err < max_err, "{d}: round-trip error {err} >= {max_err}");
        let dot_err = ((dot(N, &w, &a) as f64 - exact).abs() / N as f64) as f32;
        assert!(dot_err < max_dot, "{d}: dot error {dot_err} >= {max_dot}");
    }
}

#[test]
fn vec_dot_equals_dot_of_dequantized_rows() {
    let x = generate(0.5, N);
    let y = generate(2.0, N);
    let mut a = bytes(DType::Q8_K, N);
    quantize_row_q8_k(&y, &mut a);
    let mut ya = vec![0f32; N];
    dequantize_row_q8_k(&a, &mut ya);
    for (d, quant, dequant, dot, _, _) in TYPES {
        let mut w = bytes(d, N);
        quant(&x, &mut w);
        let mut xw = vec![0f32; N];
        dequant(&w, &mut xw);
        let want: f64 = xw.iter().zip(&ya).map(|(p, q)| (p * q) as f64).sum();
        let got = dot(N, &w, &a) as f64;
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{d}: {got} vs {want}"
        );
    }
}

#[test]
fn q8k_matches_ggml_rounding_and_bsums() {
    let mut x: Vec<f32> = (0..QK_K).map(|i| (i as f32 - 100.0) * 0.37).collect();
    x[7] = -60.0; // the first value of largest magnitude sets the sign of d
    x[9] = 60.0;
    let mut a = bytes(DType::Q8_K, QK_K);
    quantize_row_q8_k(&x, &mut a);
    let b: BlockQ8K = read_block(&a, 0);
    assert_eq!(b.d, 1.0 / (-127.0f32 / -60.0));
    assert_eq!(b.qs[7], -127);
    assert_eq!(b.qs[9], 127);
    let iscale = -127.0f32 / -60.0;
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(
            b.qs[i] as f32,
            (iscale * v).round_ties_even().clamp(-128.0, 127.0)
        );
    }
    for g in 0..16 {
        let s: i32 = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
        assert_eq!(b.bsums[g] as i32, s);
    }
    // Ties round to even, like ggml's nearest_int: 127/max * x = 2.5 exactly.
    let mut t = vec![0f32; QK_K];
    t[0] = -127.0;
    t[1] = -2.5;
    t[2] = -3.5;
    quantize_row_q8_k(&t, &mut a);
    let b: BlockQ8K = read_block(&a, 0);
    assert_eq!((b.qs[0], b.qs[1], b.qs[2]), (-127, -2, -4));
    // All zeros: d = 0, q = 0, sums = 0.
    quantize_row_q8_k(&[0.0; QK_K], &mut a);
    let b: BlockQ8K = read_block(&a, 0);
    assert_eq!(b.d, 0.0);
    assert!(b.qs.iter().all(|&q| q == 0) && b.bsums.iter().all(|&s| s == 0));
}

#[test]
fn quantizers_handle_zero_and_constant_blocks() {
    for (d, quant, dequant, _, _, _) in TYPES {
        for fill in [0.0f32, 1.5, -3.0] {
            let x = vec![fill; QK_K];
            let mut w = bytes(d, QK_K);
            quant(&x, &mut w);
            let mut back = vec![0f32; QK_K];
            dequant(&w, &mut back);
            for v in &back {
                assert!(
                    (v - fill).abs() <= 0.05 * fill.abs() + 1e-6,
                    "{d} {fill}: {v}"
                );
            }
        }
    }
}

#[test]
fn quantizers_survive_non_finite_and_extreme_input() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        1e-30,
        0.0,
    ];
    let x: Vec<f32> = (0..2 * QK_K)
        .map(|i| {
            if i % 7 == 0 {
                specials[i / 7 % specials.len()]
            } else {
                (i as f32).sin()
            }
        })
        .collect();
    let mut a = bytes(DType::Q8_K, x.len());
    quantize_row_q8_k(&x, &mut a);
    let mut ya = vec![0f32; x.len()];
    dequantize_row_q8_k(&a, &mut ya);
    for (d, quant, dequant, dot, _, _) in TYPES {
        let mut w = bytes(d, x.len());
        quant(&x, &mut w);
        let mut back = vec![0f32; x.len()];
        dequant(&w, &mut back);
        // Whatever the quantizer made of such input, the dot product is the dot of what the
        // row dequantizes to: close when that is finite, not finite when it is not.
        let want: f64 = back
            .iter()
            .zip(&ya)
            .map(|(p, q)| *p as f64 * *q as f64)
            .sum();
        let got = dot(x.len(), &w, &a);
        if want.is_finite() && want.abs() < f32::MAX as f64 {
            assert!(
                (got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{d}: {got} vs {want}"
            );
        } else {
            assert!(
                !got.is_finite(),
                "{d}: {got}, but the dequantized dot is {want}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "not a multiple")]
fn partial_blocks_are_rejected() {
    vec_dot_q4_k_q8_k(100, &[0; 144], &[0; 292]);
}

/// Make random bytes a valid row of `d` (one of the K-quants or Q8_K): finite scales taken
/// from `scales` (cycled), and for Q8_K block sums that match the quants. Shared with the
/// SIMD tests, which feed the same rows to both versions.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the x86 SIMD tests use it
pub(crate) fn sanitize_row(d: DType, row: &mut [u8], scales: &[f32]) {
    use std::mem::offset_of;
    let put16 = |b: &mut [u8], off: usize, v: f32| {
        b[off..off + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    };
    let bb = d.block_bytes();
    for (i, b) in row.chunks_exact_mut(bb).enumerate() {
        let s = scales[i % scales.len()];
        let s2 = scales[(i + 1) % scales.len()];
        match d {
            DType::Q2_K => {
                put16(b, offset_of!(BlockQ2K, d), s);
                put16(b, offset_of!(BlockQ2K, dmin), s2);
            }
            DType::Q3_K => put16(b, offset_of!(BlockQ3K, d), s),
            DType::Q4_K => {
                put16(b, offset_of!(BlockQ4K, d), s);
                put16(b, offset_of!(BlockQ4K, dmin), s2);
            }
            DType::Q5_K => {
                put16(b, offset_of!(BlockQ5K, d), s);
                put16(b, offset_of!(BlockQ5K, dmin), s2);
            }
            DType::Q6_K => put16(b, offset_of!(BlockQ6K, d), s),
            DType::Q8_K => {
                let mut blk: BlockQ8K = read_block(b, 0);
                blk.d = s;
                fill_bsums(&mut blk);
                write_block(b, 0, &blk);
            }
            other => panic!("sanitize_row: {other} is not a K-quant"),
        }
    }
}

/// Tolerance for comparing a SIMD dot product with the scalar one on the same row. Their
/// integer parts agree exactly (see `integer_parts_are_exact` in the SIMD tests), so only
/// float rounding differs, and every partial sum either side forms is bounded by
/// `M = sum |d_a| * (|d_w * scale| * (|q| + |offset|) * |q8| + |dmin_w * min * bsum|)`:
/// a few dozen roundings of at most `eps * M` each stay far below `1e-5 * M`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the x86 SIMD tests use it
pub(crate) fn dot_tolerance(_dot: Dot, d: DType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut m = 0.0f32;
    for i in 0..n / QK_K {
        let y: BlockQ8K = read_block(a, i);
        // (|d * scale| per 16-value group, value magnitudes incl. offset, |dmin * min| per group)
        let (ds, q, dm): ([f32; 16], [f32; QK_K], [f32; 16]) = match d {
            DType::Q2_K => {
                let x: BlockQ2K = read_block(w, i);
                let q = unpack_2bit(&x.qs);
                (
                    std::array::from_fn(|g| (x.d.to_f32() * (x.scales[g] & 0xF) as f32).abs()),
                    std::array::from_fn(|v| q[v] as f32),
                    std::array::from_fn(|g| (x.dmin.to_f32() * (x.scales[g] >> 4) as f32).abs()),
                )
            }
            DType::Q3_K => {
                let x: BlockQ3K = read_block(w, i);
                let (q, sc) = (unpack_q3k(&x), scales_q3k(&x.scales));
                (
                    std::array::from_fn(|g| (x.d.to_f32() * sc[g] as f32).abs()),
                    std::array::from_fn(|v| (q[v] as f32).abs() + 8.0),
                    [0.0; 16],
                )
            }
            DType::Q4_K | DType::Q5_K => {
                let (dd, dmin, scales, q) = if d == DType::Q4_K {
                    let x: BlockQ4K = read_block(w, i);
                    (x.d, x.dmin, x.scales, unpack_4bit(&x.qs))
                } else {
                    let x: BlockQ5K = read_block(w, i);
                    (x.d, x.dmin, x.scales, unpack_q5k(&x))
                };
                let (sc, mn) = scales_mins_k4(&scales);
                (
                    std::array::from_fn(|g| (dd.to_f32() * sc[g / 2] as f32).abs()),
                    std::array::from_fn(|v| q[v] as f32),
                    std::array::from_fn(|g| (dmin.to_f32() * mn[g / 2] as f32).abs()),
                )
            }
            DType::Q6_K => {
                let x: BlockQ6K = read_block(w, i);
                let q = unpack_q6k(&x);
                (
                    std::array::from_fn(|g| (x.d.to_f32() * x.scales[g] as f32).abs()),
                    std::array::from_fn(|v| q[v] as f32 + 32.0),
                    [0.0; 16],
                )
            }
            other => panic!("dot_tolerance: {other} is not a K-quant weight type"),
        };
        for g in 0..16 {
            let qq: f32 = (16 * g..16 * g + 16)
                .map(|v| q[v] * (y.qs[v] as f32).abs())
                .sum();
            m += y.d.abs() * (ds[g] * qq + dm[g] * (y.bsums[g] as f32).abs());
        }
    }
    1e-5 * m + 1e-30
}
