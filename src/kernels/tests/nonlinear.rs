//! IQ4_NL, IQ4_XS and MXFP4: the scalar reference against f32 arithmetic on the dequantized
//! values, and every SIMD `vec_dot` / `gemm` this CPU supports against the scalar twin, bit
//! for bit, on random blocks (every code, random scales), odd shapes and extreme scales.

use proptest::prelude::*;

use super::util::quantize_act;
use crate::kernels::blocks::nonlinear::{KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::kernels::{kernels_for, DType, Isa, TypeKernels};

const TYPES: [DType; 3] = [DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4];

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// How a random row's scales are drawn.
#[derive(Clone, Copy, Debug)]
enum Scales {
    /// Typical magnitudes (f16 d ~ 1e-3..1e-1, E8M0 exponents around 2^-7).
    Typical,
    /// MXFP4's extreme exponents 0 and 254 (and 1, 2, 253); f16 d at its subnormal and large
    /// ends.
    Extreme,
}

/// `n_rows` rows of `k` values of `dt`: every code byte random, scales per `s`.
fn random_rows(dt: DType, k: usize, n_rows: usize, s: Scales, rng: &mut Rng) -> Vec<u8> {
    let nb = k / dt.block_elems() * n_rows;
    let bb = dt.block_bytes();
    let mut out = vec![0u8; nb * bb];
    for b in out.chunks_exact_mut(bb) {
        for x in b.iter_mut() {
            *x = rng.next() as u8;
        }
        match dt {
            DType::MXFP4 => {
                b[0] = match s {
                    Scales::Typical => 118 + (rng.next() % 8) as u8,
                    Scales::Extreme => [0, 1, 2, 253, 254][(rng.next() % 5) as usize],
                };
            }
            _ => {
                let d = match s {
                    Scales::Typical => 1e-3 + rng.f32().abs() * 0.1,
                    Scales::Extreme => [6e-8, 1e-5, 3e3, 6e4][(rng.next() % 4) as usize],
                };
                let d = if rng.next().is_multiple_of(2) { d } else { -d };
                b[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            }
        }
    }
    out
}

/// `n_tok` activation rows of `k` values quantized with the scalar quantizer of `k_w`'s
/// activation type; `tiny` scales them so that MXFP4's 2^126 scale cannot overflow.
fn random_acts(k_w: &TypeKernels, k: usize, n_tok: usize, tiny: bool, rng: &mut Rng) -> Vec<u8> {
    let amp = if tiny { 1e-30 } else { 3.0 };
    let x: Vec<f32> = (0..k * n_tok).map(|_| rng.f32() * amp).collect();
    quantize_act(k_w, &x)
}

fn dequant(dt: DType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    (kernels_for(dt, Isa::Scalar).unwrap().to_f32)(q, &mut y);
    y
}

/// Every ISA's `vec_dot` and `gemm` equal the scalar `vec_dot` bit for bit; the gemm writes
/// only its cells.
fn check_simd(dt: DType, k: usize, n_rows: usize, n_tok: usize, s: Scales, seed: u64) {
    let mut rng = Rng(seed | 1);
    let sk = kernels_for(dt, Isa::Scalar).unwrap();
    let w = random_rows(dt, k, n_rows, s, &mut rng);
    let a = random_acts(sk, k, n_tok, matches!(s, Scales::Extreme), &mut rng);
    let (wr, ar) = (w.len() / n_rows, a.len() / n_tok);
    let stride = n_rows + 3;
    for isa in Isa::tested() {
        let kk = kernels_for(dt, isa).unwrap();
        let mut out = vec![f32::NAN; (n_tok - 1) * stride + n_rows + 3];
        (kk.gemm)(k, &w, n_rows, &a, n_tok, &mut out, stride);
        for t in 0..n_tok {
            let at = &a[t * ar..(t + 1) * ar];
            for r in 0..n_rows {
                let wrow = &w[r * wr..(r + 1) * wr];
                let want = (sk.vec_dot)(k, wrow, at);
                assert!(!want.is_nan(), "{dt} {s:?}: the reference is NaN");
                let got = (kk.vec_dot)(k, wrow, at);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{isa} {dt} {s:?} vec_dot k{k}: {got} vs {want}"
                );
                let g = out[t * stride + r];
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "{isa} {dt} {s:?} gemm k{k} r{r}/{n_rows} t{t}/{n_tok}: {g} vs {want}"
                );
            }
            for pad in n_rows..stride.min(out.len() - t * stride) {
                assert!(
                    out[t * stride + pad].is_nan(),
                    "{isa} {dt} wrote outside its cells"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn simd_equals_scalar_bits(n_rows in 1usize..=13, n_tok in 1usize..=9, nb in 1usize..=9, seed in any::<u64>()) {
        for dt in TYPES {
            let nb = if dt == DType::IQ4_XS { nb.div_ceil(3) } else { nb };
            check_simd(dt, nb * dt.block_elems(), n_rows, n_tok, Scales::Typical, seed);
        }
    }

    #[test]
    fn simd_equals_scalar_bits_at_extreme_scales(n_rows in 1usize..=5, n_tok in 1usize..=3, nb in 1usize..=4, seed in any::<u64>()) {
        for dt in TYPES {
            check_simd(dt, nb * dt.block_elems(), n_rows, n_tok, Scales::Extreme, seed);
        }
    }
}

/// Rows long enough for every unrolled loop and prefetch distance, and a row count past a
/// 64-row panel.
#[test]
fn simd_equals_scalar_bits_on_large_shapes() {
    for dt in TYPES {
        // 2880: gpt-oss's width, a multiple of 32 (IQ4_NL's, MXFP4's block) but not of 256.
        let gpt_oss = (dt.block_elems() == 32).then_some((2880, 9, 3));
        for (k, n_rows, n_tok) in [(4096, 70, 1), (2816, 19, 7), (11008, 3, 2)]
            .into_iter()
            .chain(gpt_oss)
        {
            check_simd(
                dt,
                k,
                n_rows,
                n_tok,
                Scales::Typical,
                k as u64 * 31 + n_rows as u64,
            );
        }
    }
}

/// The reference dot product is the f32 dot product of the dequantized rows, up to float
/// rounding (the integer part is exact; only the order of the float sums differs).
#[test]
fn scalar_dot_is_the_dequantized_dot() {
    let mut rng = Rng(7);
    for dt in TYPES {
        let sk = kernels_for(dt, Isa::Scalar).unwrap();
        for nb in 1..6 {
            let k = nb * dt.block_elems();
            let w = random_rows(dt, k, 1, Scales::Typical, &mut rng);
            let a = random_acts(sk, k, 1, false, &mut rng);
            let (wf, af) = (dequant(dt, &w, k), dequant(sk.vec_dot_type, &a, k));
            let want: f64 = wf.iter().zip(&af).map(|(x, y)| *x as f64 * *y as f64).sum();
            let mag: f64 = wf
                .iter()
                .zip(&af)
                .map(|(x, y)| (*x as f64 * *y as f64).abs())
                .sum();
            let got = (sk.vec_dot)(k, &w, &a) as f64;
            assert!(
                (got - want).abs() <= 1e-5 * mag + 1e-9,
                "{dt} k{k}: {got} vs {want}"
            );
        }
    }
}

/// Hand-made blocks dequantize to ggml's values.
#[test]
fn dequantize_known_blocks() {
    // IQ4_NL: d = 0.5, value j has code j % 16 (bytes j: low j, high j).
    let mut b = vec![0u8; 18];
    b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    for j in 0..16 {
        b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
    }
    let y = dequant(DType::IQ4_NL, &b, 32);
    for j in 0..16 {
        assert_eq!(y[j], 0.5 * KVALUES_IQ4NL[j] as f32);
        assert_eq!(y[16 + j], 0.5 * KVALUES_IQ4NL[15 - j] as f32);
    }
    // MXFP4: e = 130 (scale 2^2 on doubled values), codes 7 (12 -> 6.0 * 4) and 15 (-12).
    let mut b = vec![0xFFu8; 17];
    b[0] = 130;
    b[1] = 0xF7;
    let y = dequant(DType::MXFP4, &b, 32);
    assert_eq!(y[0], 48.0);
    assert_eq!(y[16], -48.0);
    assert_eq!(y[1], -48.0, "code 15 is -6.0");
}

/// IQ4_XS: group g's scale is `ls - 32`; d = 1, every code 8 (value 1) in group 3 with
/// ls = 0x25 and in group 0 with ls = 0.
#[test]
fn dequantize_iq4_xs_groups() {
    let mut b = vec![0x88u8; 136];
    b[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
    b[2..4].copy_from_slice(&(0b10u16 << 6).to_le_bytes());
    b[4..8].copy_from_slice(&[0x00, 0x50, 0x00, 0x00]);
    let y = dequant(DType::IQ4_XS, &b, 256);
    assert_eq!(y[0], -32.0 * KVALUES_IQ4NL[8] as f32);
    assert_eq!(y[3 * 32 + 5], (0x25 - 32) as f32 * KVALUES_IQ4NL[8] as f32);
    assert_eq!(KVALUES_MXFP4[8], 0, "MXFP4's negative zero is zero");
}

/// kiln's quantizers: quantize -> dequantize within a per-type RMS bound of the input, values
/// already on the grid come back exactly, and the edge cases give finite values.
mod quantizers {
    use super::*;

    fn roundtrip(dt: DType, x: &[f32]) -> Vec<f32> {
        let k = kernels_for(dt, Isa::Scalar).unwrap();
        let q = k.from_f32.expect("a quantizer");
        let mut bytes = vec![0u8; dt.bytes_for(x.len() as u64).unwrap() as usize];
        q(x, &mut bytes);
        let mut out = vec![0f32; x.len()];
        (k.to_f32)(&bytes, &mut out);
        out
    }

    fn rms(a: &[f32], b: &[f32]) -> f32 {
        let s: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        (s / a.len() as f32).sqrt()
    }

    fn row(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut r = Rng(seed);
        (0..n).map(|_| r.f32() * scale).collect()
    }

    #[test]
    fn error_is_bounded() {
        // Uniform values in [-1, 1] (RMS 0.577): 4-bit codes keep the error well under 10%.
        for (dt, bound) in [
            (DType::IQ4_NL, 0.05),
            (DType::IQ4_XS, 0.05),
            (DType::MXFP4, 0.09),
        ] {
            for seed in 1..6u64 {
                let x = row(seed, 1024, 1.0);
                let e = rms(&x, &roundtrip(dt, &x));
                assert!(e < bound, "{dt}: rms error {e} >= {bound}");
            }
        }
    }

    #[test]
    fn dequantized_values_come_back_exactly() {
        for dt in TYPES {
            for seed in 1..6u64 {
                let once = roundtrip(dt, &row(seed, 512, 3.0));
                let twice = roundtrip(dt, &once);
                assert_eq!(once, twice, "{dt}: seed {seed}");
            }
        }
    }

    #[test]
    fn edge_cases_are_finite() {
        for dt in TYPES {
            assert!(roundtrip(dt, &[0.0; 256]).iter().all(|&v| v == 0.0), "{dt}");
            for scale in [1e-30f32, 1e-8, 1e4, 6e4] {
                let x = row(7, 256, scale);
                let y = roundtrip(dt, &x);
                assert!(y.iter().all(|v| v.is_finite()), "{dt} at {scale}");
            }
            // One large value among zeros keeps its sign and most of its size (MXFP4's
            // exponent, ggml's, clips 3.5 to 3 = 12 * 2^-2).
            let mut x = [0f32; 256];
            x[5] = -3.5;
            let y = roundtrip(dt, &x);
            assert!((y[5] + 3.5).abs() <= 0.5, "{dt}: {}", y[5]);
            // Blocks of zeros stay zero (IQ4's table has no zero, so only outside x[5]'s).
            assert!(y[32..].iter().all(|&v| v == 0.0), "{dt}");
        }
        // MXFP4 spans E8M0's range: huge values stay finite and close.
        let x = row(9, 64, 1e38);
        let y = roundtrip(DType::MXFP4, &x);
        assert!(y.iter().all(|v| v.is_finite()));
        let mut x = [0f32; 32];
        x[5] = -3.5;
        let y = roundtrip(DType::MXFP4, &x);
        assert!(y.iter().enumerate().all(|(i, &v)| i == 5 || v == 0.0));
    }
}

/// The panel GEMM of IQ4_NL / MXFP4 prompt batches (`x86/nonlinear_tiles.rs`) equals the scalar
/// `vec_dot` bit for bit: token counts at its threshold, odd, and past a 64-token group; rows
/// in a whole panel, and past one into a partial panel; rows at its longest length (4096)
/// and one block past it (the register tiles again); typical and extreme scales. With the
/// register tiles equal too (above), a token's outputs never depend on how many tokens share
/// the call.
#[test]
fn panel_gemm_equals_scalar_bits() {
    for dt in [DType::IQ4_NL, DType::MXFP4] {
        for (k, n_rows, n_tok) in [
            (320, 37, 70),
            (96, 16, 4),
            (2880, 17, 5),
            (4096, 3, 4),
            (4128, 2, 4),
        ] {
            check_simd(
                dt,
                k,
                n_rows,
                n_tok,
                Scales::Typical,
                k as u64 + n_tok as u64,
            );
        }
        check_simd(dt, 64, 21, 6, Scales::Extreme, 11);
    }
}

/// A token's outputs are the same bits whatever call it is in (batch invariance): each token
/// alone (the single-token tiles: 8 rows, then 4, then single rows), then in calls of 2 and 3
/// tokens (the two-token tiles and a one-token tail) and 5 (the panel GEMM), on every ISA;
/// rows of 17 blocks (past one 16-block scale batch, an odd pair), 13 rows, typical and
/// extreme scales (those also against the scalar twin).
#[test]
fn one_token_equals_many_token_bits() {
    for dt in TYPES {
        let k = if dt == DType::IQ4_XS { 512 } else { 17 * 32 };
        let (n_rows, n_tok) = (13, 5);
        for (i, s) in [Scales::Typical, Scales::Extreme].into_iter().enumerate() {
            let mut rng = Rng(0x5EED + i as u64);
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let w = random_rows(dt, k, n_rows, s, &mut rng);
            let a = random_acts(sk, k, n_tok, matches!(s, Scales::Extreme), &mut rng);
            let ar = a.len() / n_tok;
            for isa in Isa::tested() {
                let kk = kernels_for(dt, isa).unwrap();
                let one: Vec<Vec<f32>> = (0..n_tok)
                    .map(|t| {
                        let mut o = vec![f32::NAN; n_rows];
                        (kk.gemm)(k, &w, n_rows, &a[t * ar..(t + 1) * ar], 1, &mut o, n_rows);
                        o
                    })
                    .collect();
                for n in [2, 3, 5] {
                    let mut o = vec![f32::NAN; n * n_rows];
                    (kk.gemm)(k, &w, n_rows, &a[..n * ar], n, &mut o, n_rows);
                    for t in 0..n {
                        for r in 0..n_rows {
                            assert_eq!(
                                o[t * n_rows + r].to_bits(),
                                one[t][r].to_bits(),
                                "{isa} {dt} {s:?} r{r} t{t}/{n}: {} vs {} alone",
                                o[t * n_rows + r],
                                one[t][r]
                            );
                        }
                    }
                }
            }
            check_simd(dt, k, n_rows, 3, s, 0xB17 + i as u64);
        }
    }
}
