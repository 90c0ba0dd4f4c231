//! Every SIMD path equals the scalar reference on random data (within a tight bound
//! relative to sum |w a|: the integer sums are exact, only float rounding order differs),
//! and gemm equals a loop of vec_dot on odd shapes, for every ISA this CPU supports.

use proptest::prelude::*;

use super::util::{quantize, quantize_act};
use crate::kernels::{kernels_for, DType, Isa, TypeKernels};

const TYPES: [DType; 9] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::F32,
    DType::F16,
    DType::BF16,
];

fn deq(k: &TypeKernels, dt: DType, q: &[u8], n: usize) -> Vec<f32> {
    let dk = if dt == k.dtype {
        k
    } else {
        kernels_for(dt, Isa::Scalar).unwrap()
    };
    let mut y = vec![0f32; n];
    (dk.to_f32)(q, &mut y);
    y
}

/// Allowed difference between two float evaluations of the same quantized dot product.
fn bound(w: &[f32], a: &[f32]) -> f32 {
    let mag: f32 = w.iter().zip(a).map(|(x, y)| (x * y).abs()).sum();
    2e-5 * mag + 1e-6
}

fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
    (
        prop::collection::vec(-1.0f32..1.0, n),
        0.01f32..20.0,
        -2.0f32..2.0,
    )
        .prop_map(|(v, scale, shift)| v.into_iter().map(|x| x * scale + shift * scale).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn vec_dot_matches_scalar(nb in 1usize..12, wv in values(11 * 32), av in values(11 * 32)) {
        let n = nb * 32;
        let (wv, av) = (&wv[..n.min(wv.len())], &av[..n.min(av.len())]);
        let n = wv.len().min(av.len()) / 32 * 32;
        prop_assume!(n > 0);
        for dt in TYPES {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv[..n]);
            let qa = quantize_act(sk, &av[..n]);
            let want = (sk.vec_dot)(n, &qw, &qa);
            let tol = bound(&deq(sk, dt, &qw, n), &deq(sk, sk.vec_dot_type, &qa, n));
            for isa in Isa::tested() {
                let k = kernels_for(dt, isa).unwrap();
                let got = (k.vec_dot)(n, &qw, &qa);
                prop_assert!((got - want).abs() <= tol, "{} {}: {} vs {} (tol {})", isa, dt, got, want, tol);
            }
        }
    }

    #[test]
    fn gemm_matches_vec_dot(n_rows in 1usize..=13, n_tok in 1usize..=9, nb in 1usize..=5, wv in values(13 * 5 * 32), av in values(9 * 5 * 32)) {
        let k = nb * 32;
        let stride = n_rows + 3;
        for dt in TYPES {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv[..n_rows * k]);
            let qa = quantize_act(sk, &av[..n_tok * k]);
            let (wr, ar) = (qw.len() / n_rows, qa.len() / n_tok);
            for isa in Isa::tested() {
                let kk = kernels_for(dt, isa).unwrap();
                let mut out = vec![f32::NAN; (n_tok - 1) * stride + n_rows + 3];
                (kk.gemm)(k, &qw, n_rows, &qa, n_tok, &mut out, stride);
                for t in 0..n_tok {
                    let at = &qa[t * ar..(t + 1) * ar];
                    let ad = deq(sk, sk.vec_dot_type, at, k);
                    for r in 0..n_rows {
                        let wrow = &qw[r * wr..(r + 1) * wr];
                        let want = (sk.vec_dot)(k, wrow, at);
                        let got = out[t * stride + r];
                        let tol = bound(&deq(sk, dt, wrow, k), &ad);
                        prop_assert!((got - want).abs() <= tol, "{} {} r{} t{}: {} vs {}", isa, dt, r, t, got, want);
                    }
                    for pad in n_rows..stride.min(out.len() - t * stride) {
                        prop_assert!(out[t * stride + pad].is_nan(), "{} {} wrote outside its cells", isa, dt);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Q4_1, Q5_0 and Q8_0 follow llama.cpp's float order on every ISA (`legacy_kind::ggml_lanes`):
    /// `vec_dot` and `gemm` equal the scalar twin bit for bit, not just within rounding.
    #[test]
    fn llama_order_kinds_equal_scalar_bits(n_rows in 1usize..=6, n_tok in 1usize..=4, nb in 1usize..=9, wv in values(6 * 9 * 32), av in values(4 * 9 * 32)) {
        let k = nb * 32;
        for dt in [DType::Q4_1, DType::Q5_0, DType::Q8_0] {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv[..n_rows * k]);
            let qa = quantize_act(sk, &av[..n_tok * k]);
            let (wr, ar) = (qw.len() / n_rows, qa.len() / n_tok);
            for isa in Isa::tested() {
                let kk = kernels_for(dt, isa).unwrap();
                let mut out = vec![0f32; n_tok * n_rows];
                (kk.gemm)(k, &qw, n_rows, &qa, n_tok, &mut out, n_rows);
                for t in 0..n_tok {
                    let at = &qa[t * ar..(t + 1) * ar];
                    for r in 0..n_rows {
                        let wrow = &qw[r * wr..(r + 1) * wr];
                        let want = (sk.vec_dot)(k, wrow, at).to_bits();
                        prop_assert_eq!((kk.vec_dot)(k, wrow, at).to_bits(), want, "{} {} vec_dot", isa, dt);
                        prop_assert_eq!(out[t * n_rows + r].to_bits(), want, "{} {} gemm r{} t{}", isa, dt, r, t);
                    }
                }
            }
        }
    }
}

/// Larger shapes than the proptest: full and partial 16-row panels, token tiles past 16,
/// and enough blocks that the AVX-512 activation tables split the tokens into groups.
#[test]
fn gemm_matches_vec_dot_on_large_shapes() {
    let (n_rows, n_tok) = (37, 21);
    for nb in [18, 300] {
        let k = nb * 32;
        let wv: Vec<f32> = (0..n_rows * k)
            .map(|i| ((i * 7919) % 1999) as f32 / 999.0 - 1.0)
            .collect();
        let av: Vec<f32> = (0..n_tok * k)
            .map(|i| ((i * 104729) % 2003) as f32 / 1001.0 - 1.0)
            .collect();
        for dt in [DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_1] {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv);
            let qa = quantize_act(sk, &av);
            let (wr, ar) = (qw.len() / n_rows, qa.len() / n_tok);
            for isa in Isa::tested() {
                let kk = kernels_for(dt, isa).unwrap();
                let mut out = vec![0f32; n_tok * n_rows];
                (kk.gemm)(k, &qw, n_rows, &qa, n_tok, &mut out, n_rows);
                for t in 0..n_tok {
                    let at = &qa[t * ar..(t + 1) * ar];
                    let ad = deq(sk, sk.vec_dot_type, at, k);
                    for r in 0..n_rows {
                        let wrow = &qw[r * wr..(r + 1) * wr];
                        let want = (sk.vec_dot)(k, wrow, at);
                        let tol = bound(&deq(sk, dt, wrow, k), &ad);
                        let got = out[t * n_rows + r];
                        assert!(
                            (got - want).abs() <= tol,
                            "{isa} {dt} k{k} r{r} t{t}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// SIMD activation quantizers produce the scalar reference's exact bytes.
    #[test]
    fn q8_quantizers_match_scalar_bytes(nb in 1usize..6, v in values(6 * 32), halves in prop::collection::vec(-300i32..300, 8)) {
        let mut x = v[..nb * 32].to_vec();
        // Exact .5 products round away from zero: plant some (amax 127 -> id 1).
        x[0] = 127.0;
        for (i, h) in halves.iter().enumerate() {
            x[1 + i] = (*h as f32 + 0.5).clamp(-127.0, 127.0);
        }
        for dt in [DType::Q8_0, DType::Q8_1] {
            let want = quantize(kernels_for(dt, Isa::Scalar).unwrap(), &x);
            for isa in Isa::tested() {
                let got = quantize(kernels_for(dt, isa).unwrap(), &x);
                prop_assert_eq!(&got, &want, "{} {}", isa, dt);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Float rows take any length (tails shorter than a vector).
    #[test]
    fn float_vec_dot_any_length(n in 1usize..100, wv in values(100), av in values(100)) {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv[..n]);
            let qa = quantize_act(sk, &av[..n]);
            let want = (sk.vec_dot)(n, &qw, &qa);
            let tol = bound(&deq(sk, dt, &qw, n), &av[..n]);
            for isa in Isa::tested() {
                let got = (kernels_for(dt, isa).unwrap().vec_dot)(n, &qw, &qa);
                prop_assert!((got - want).abs() <= tol, "{} {} n{}: {} vs {}", isa, dt, n, got, want);
            }
        }
    }
}

/// Float weights: `gemm` (several tokens per weight row) equals the same ISA's `vec_dot` bit
/// for bit, so a token's logits do not depend on how many tokens share its step. Up to 13
/// tokens: every tile of the AVX2 (3 tokens) and AVX-512 (6 tokens) kernels and their tails.
#[test]
fn float_gemm_equals_vec_dot_bits() {
    let (n_rows, n_tok) = (5, 13);
    for k in [8, 40, 96, 101] {
        let wv: Vec<f32> = (0..n_rows * k)
            .map(|i| ((i * 7919) % 1999) as f32 / 999.0 - 1.0)
            .collect();
        let av: Vec<f32> = (0..n_tok * k)
            .map(|i| ((i * 104729) % 2003) as f32 / 1001.0 - 1.0)
            .collect();
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let qw = quantize(sk, &wv);
            let qa = quantize_act(sk, &av);
            let (wr, ar) = (qw.len() / n_rows, qa.len() / n_tok);
            for isa in Isa::tested() {
                let kk = kernels_for(dt, isa).unwrap();
                for nt in 1..=n_tok {
                    let mut out = vec![0f32; nt * n_rows];
                    (kk.gemm)(k, &qw, n_rows, &qa[..nt * ar], nt, &mut out, n_rows);
                    for t in 0..nt {
                        let at = &qa[t * ar..(t + 1) * ar];
                        for r in 0..n_rows {
                            let want = (kk.vec_dot)(k, &qw[r * wr..(r + 1) * wr], at);
                            assert_eq!(
                                out[t * n_rows + r].to_bits(),
                                want.to_bits(),
                                "{isa} {dt} k{k} r{r} t{t} of {nt}"
                            );
                        }
                    }
                }
            }
        }
    }
}
