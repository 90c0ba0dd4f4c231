//! NEON K-quant dots: the `sdot` version of each equals the `smull` one and the scalar twin
//! bit for bit (the group sums are exact i32 either way), on random blocks.
//! `KILN_EXPECT_DOTPROD=1` (set by `make neon-test`) makes a CPU without dotprod a failure.

use super::util::quantize;
use crate::kernels::aarch64::neon::{self, kquants as nk};
use crate::kernels::{kernels_for, DType, Isa};

/// A NEON K-quant dot product (`nk::vec_dot_*`).
///
/// # Safety
/// The CPU must have NEON, and dotprod for the `_sdot` versions; lengths are checked.
type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;

const DOTS: [(DType, Dot, Dot); 5] = [
    (
        DType::Q2_K,
        nk::vec_dot_q2_k_q8_k,
        nk::vec_dot_q2_k_q8_k_sdot,
    ),
    (
        DType::Q3_K,
        nk::vec_dot_q3_k_q8_k,
        nk::vec_dot_q3_k_q8_k_sdot,
    ),
    (
        DType::Q4_K,
        nk::vec_dot_q4_k_q8_k,
        nk::vec_dot_q4_k_q8_k_sdot,
    ),
    (
        DType::Q5_K,
        nk::vec_dot_q5_k_q8_k,
        nk::vec_dot_q5_k_q8_k_sdot,
    ),
    (
        DType::Q6_K,
        nk::vec_dot_q6_k_q8_k,
        nk::vec_dot_q6_k_q8_k_sdot,
    ),
];

/// Values in `[-scale, scale] + shift` from a seed (a small LCG).
fn values(seed: u64, n: usize, scale: f32, shift: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale + shift
        })
        .collect()
}

#[test]
fn sdot_kquant_dots_equal_smull_and_scalar_bitwise() {
    if std::env::var("KILN_EXPECT_DOTPROD").is_ok_and(|v| v.trim() == "1") {
        assert!(neon::has_dotprod(), "KILN_EXPECT_DOTPROD=1 but no dotprod");
    }
    if !neon::has_dotprod() {
        crate::test_skip::skip("no dotprod on this CPU: the sdot K-quant dots are not tested");
        return;
    }
    let q8k = kernels_for(DType::Q8_K, Isa::Scalar).unwrap();
    for (dt, smull, sdot) in DOTS {
        let ks = kernels_for(dt, Isa::Scalar).unwrap();
        // The table runs the sdot version on this CPU.
        let kn = kernels_for(dt, Isa::Neon).unwrap();
        for (i, n) in [256usize, 768, 2048].into_iter().enumerate() {
            for seed in 0..4u64 {
                let s = seed + 10 * i as u64 + 100 * dt as u64;
                let w = quantize(ks, &values(s, n, 0.5 + seed as f32 * 3.0, 0.2));
                let a = quantize(q8k, &values(s ^ 0xC3, n, 2.0, -0.3));
                // SAFETY: NEON is baseline on aarch64; dotprod was detected above.
                let (x, y) = unsafe { (smull(n, &w, &a), sdot(n, &w, &a)) };
                let z = (ks.vec_dot)(n, &w, &a);
                let t = (kn.vec_dot)(n, &w, &a);
                assert_eq!(x.to_bits(), y.to_bits(), "{dt} n{n} seed{seed}: {x} vs {y}");
                assert_eq!(
                    z.to_bits(),
                    y.to_bits(),
                    "{dt} n{n} seed{seed}: scalar {z} vs {y}"
                );
                assert_eq!(t.to_bits(), y.to_bits(), "{dt} n{n}: table's dot");
            }
        }
    }
}
