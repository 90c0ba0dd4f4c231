//! SIMD == scalar for the K-quant kernels on every x86 ISA this CPU supports (AVX2, AVX-512,
//! AVX-512 VNNI), on random blocks: dot products within float rounding of the scalar twin
//! (their integer parts are identical), Q8_K quantization bit-identical.

use proptest::prelude::*;

use crate::kernels::scalar::kquants as scalar;
use crate::kernels::scalar::kquants::tests::{dot_tolerance, sanitize_row};
use crate::kernels::x86::avx2::kquants as avx2;
use crate::kernels::DType;

type Dot = fn(usize, &[u8], &[u8]) -> f32;

fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

fn has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && has_avx2()
}

fn has_vnni() -> bool {
    has_avx512() && is_x86_feature_detected!("avx512vnni")
}

/// `cond` (the features `isa`'s kernels need are present); when not, a reported skip.
fn runs(cond: bool, isa: &str) -> bool {
    if !cond {
        crate::test_skip::skip(&format!(
            "this CPU lacks {isa}: its K-quant kernels are not tested"
        ));
    }
    cond
}

/// Every SIMD dot product this CPU can run, with the scalar twin it must match.
fn dots() -> Vec<(DType, &'static str, Dot, Dot)> {
    let mut v: Vec<(DType, &'static str, Dot, Dot)> = Vec::new();
    // SAFETY (all closures below): each is only pushed after the features its kernel
    // requires were detected on this CPU.
    macro_rules! push {
        ($cond:expr, $isa:literal, $d:expr, $simd:path, $scalar:path) => {
            if $cond {
                v.push((
                    $d,
                    $isa,
                    |n, w, a| {
                        // SAFETY: pushed only when `$cond` detected the features `$simd` needs.
                        unsafe { $simd(n, w, a) }
                    },
                    $scalar,
                ));
            }
        };
    }
    macro_rules! all_types {
        ($cond:expr, $isa:literal, $m:path) => {{
            use $m as m;
            push!(
                $cond,
                $isa,
                DType::Q2_K,
                m::vec_dot_q2_k_q8_k,
                scalar::vec_dot_q2_k_q8_k
            );
            push!(
                $cond,
                $isa,
                DType::Q3_K,
                m::vec_dot_q3_k_q8_k,
                scalar::vec_dot_q3_k_q8_k
            );
            push!(
                $cond,
                $isa,
                DType::Q4_K,
                m::vec_dot_q4_k_q8_k,
                scalar::vec_dot_q4_k_q8_k
            );
            push!(
                $cond,
                $isa,
                DType::Q5_K,
                m::vec_dot_q5_k_q8_k,
                scalar::vec_dot_q5_k_q8_k
            );
            push!(
                $cond,
                $isa,
                DType::Q6_K,
                m::vec_dot_q6_k_q8_k,
                scalar::vec_dot_q6_k_q8_k
            );
        }};
    }
    all_types!(
        runs(has_avx2(), "avx2"),
        "avx2",
        crate::kernels::x86::avx2::kquants
    );
    all_types!(runs(has_avx512(), "avx512"), "avx512", super::bw);
    all_types!(runs(has_vnni(), "avx512vnni"), "avx512vnni", super::vnni);
    v
}

fn scales() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(prop_oneof![Just(0.0f32), -2.0f32..2.0, 1e-4f32..1e-2], 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn simd_dot_equals_scalar(
        blocks in 1usize..4,
        raw_w in prop::collection::vec(any::<u8>(), 4 * 210),
        raw_a in prop::collection::vec(any::<u8>(), 4 * 292),
        ws in scales(),
        as_ in scales(),
    ) {
        let n = blocks * 256;
        let mut a = raw_a[..blocks * 292].to_vec();
        sanitize_row(DType::Q8_K, &mut a, &as_);
        for (d, isa, simd, reference) in dots() {
            let mut w = raw_w[..blocks * d.block_bytes()].to_vec();
            sanitize_row(d, &mut w, &ws);
            let (got, want) = (simd(n, &w, &a), reference(n, &w, &a));
            let tol = dot_tolerance(reference, d, n, &w, &a);
            prop_assert!((got - want).abs() <= tol, "{} {}: {} vs {} (tol {})", d, isa, got, want, tol);
        }
    }

    /// With unit scales and small activations every sum is an integer below 2^24, so float
    /// rounding vanishes and the SIMD result must equal the scalar one exactly.
    #[test]
    fn integer_parts_are_exact(
        blocks in 1usize..3,
        raw_w in prop::collection::vec(any::<u8>(), 2 * 210),
        raw_a in prop::collection::vec(any::<u8>(), 2 * 292),
    ) {
        let n = blocks * 256;
        let mut a = raw_a[..blocks * 292].to_vec();
        for blk in a.chunks_exact_mut(292) {
            for q in &mut blk[4..260] {
                *q = ((*q as i8) % 5) as u8;
            }
        }
        sanitize_row(DType::Q8_K, &mut a, &[1.0]);
        for (d, isa, simd, reference) in dots() {
            let mut w = raw_w[..blocks * d.block_bytes()].to_vec();
            sanitize_row(d, &mut w, &[1.0]);
            prop_assert_eq!(simd(n, &w, &a), reference(n, &w, &a), "{} {}", d, isa);
        }
    }

    #[test]
    fn simd_q8k_quantization_is_bit_identical(
        x in prop::collection::vec(
            prop_oneof![-1e3f32..1e3, -1.0f32..1.0, Just(0.0f32), Just(f32::NAN)], 512),
    ) {
        if !runs(has_avx2(), "avx2") {
            return Ok(());
        }
        let mut want = vec![0u8; 2 * 292];
        let mut got = vec![0u8; 2 * 292];
        scalar::quantize_row_q8_k(&x, &mut want);
        // SAFETY: AVX2 was detected above.
        unsafe { avx2::quantize_row_q8_k(&x, &mut got) };
        prop_assert_eq!(got, want);
    }
}

#[test]
fn simd_q8k_handles_ties_and_zero_blocks() {
    assert!(has_avx2());
    let mut x = vec![0f32; 512];
    x[0] = -127.0;
    x[1] = -2.5;
    x[2] = 3.5;
    x[3] = 0.5;
    let mut want = vec![0u8; 2 * 292];
    let mut got = vec![0u8; 2 * 292];
    scalar::quantize_row_q8_k(&x, &mut want);
    // SAFETY: AVX2 was asserted above.
    unsafe { avx2::quantize_row_q8_k(&x, &mut got) };
    assert_eq!(got, want);
}

type Gemm = unsafe fn(usize, &[u8], usize, &[u8], usize, &mut [f32], usize);

/// Every SIMD gemm this CPU can run, with the scalar dot product each cell must match.
fn gemms() -> Vec<(DType, &'static str, Gemm, Dot)> {
    let mut v: Vec<(DType, &'static str, Gemm, Dot)> = Vec::new();
    macro_rules! all_types {
        ($cond:expr, $isa:literal, $m:path) => {{
            use $m as m;
            if $cond {
                v.push((
                    DType::Q2_K,
                    $isa,
                    m::gemm_q2_k_q8_k,
                    scalar::vec_dot_q2_k_q8_k,
                ));
                v.push((
                    DType::Q3_K,
                    $isa,
                    m::gemm_q3_k_q8_k,
                    scalar::vec_dot_q3_k_q8_k,
                ));
                v.push((
                    DType::Q4_K,
                    $isa,
                    m::gemm_q4_k_q8_k,
                    scalar::vec_dot_q4_k_q8_k,
                ));
                v.push((
                    DType::Q5_K,
                    $isa,
                    m::gemm_q5_k_q8_k,
                    scalar::vec_dot_q5_k_q8_k,
                ));
                v.push((
                    DType::Q6_K,
                    $isa,
                    m::gemm_q6_k_q8_k,
                    scalar::vec_dot_q6_k_q8_k,
                ));
            }
        }};
    }
    all_types!(
        runs(has_avx2(), "avx2"),
        "avx2",
        crate::kernels::x86::avx2::kquants
    );
    all_types!(runs(has_avx512(), "avx512"), "avx512", super::bw);
    all_types!(runs(has_vnni(), "avx512vnni"), "avx512vnni", super::vnni);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn simd_gemm_equals_scalar_dots(
        blocks in 1usize..3,
        n_rows in 1usize..4,
        n_tok in 1usize..12,
        pad in 0usize..3,
        seed in any::<u64>(),
        ws in scales(),
        as_ in scales(),
    ) {
        let k = blocks * 256;
        let mut rng = seed;
        let mut bytes = |len: usize| -> Vec<u8> {
            (0..len)
                .map(|_| {
                    rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (rng >> 56) as u8
                })
                .collect()
        };
        let a_row = blocks * 292;
        let mut a = bytes(n_tok * a_row);
        sanitize_row(DType::Q8_K, &mut a, &as_);
        let stride = n_rows + pad;
        for (d, isa, gemm, reference) in gemms() {
            let w_row = blocks * d.block_bytes();
            let mut w = bytes(n_rows * w_row);
            sanitize_row(d, &mut w, &ws);
            let mut out = vec![f32::NAN; n_tok * stride];
            // SAFETY: gemms() only lists kernels whose features were detected.
            unsafe { gemm(k, &w, n_rows, &a, n_tok, &mut out, stride) };
            for t in 0..n_tok {
                for r in 0..stride {
                    let got = out[t * stride + r];
                    if r >= n_rows {
                        prop_assert!(got.is_nan(), "{} {}: wrote outside the rows", d, isa);
                        continue;
                    }
                    let (wr, ar) = (&w[r * w_row..][..w_row], &a[t * a_row..][..a_row]);
                    let want = reference(k, wr, ar);
                    let tol = dot_tolerance(reference, d, k, wr, ar);
                    prop_assert!((got - want).abs() <= tol, "{} {} r{} t{}: {} vs {}", d, isa, r, t, got, want);
                }
            }
        }
    }
}
