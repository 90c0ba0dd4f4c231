//! NEON panel GEMMs (Q4_0, Q4_1, Q8_0): the `sdot` and the `smmla` variant, each called directly (whichever the
//! table installed), equal the scalar twin bit for bit on ragged panels, token counts 1..=20
//! and past a token group (64+), several row lengths, and write only their cells. The Q4_K
//! `sdot` panel GEMM is installed where it exists (`check_k_installed`; `packed_k.rs` compares
//! it with the scalar twin on its cases).
//!
//! `make neon-test` runs qemu with `-cpu max` and sets `KILN_EXPECT_DOTPROD=1` and
//! `KILN_EXPECT_I8MM=1`, so a missing feature fails instead of skipping a variant silently.

use super::util::{quantize, quantize_act};
use crate::kernels::aarch64::neon::{self, packed};
use crate::kernels::legacy_kind::{Q4_0, Q4_1, Q8_0};
use crate::kernels::packed::pack;
use crate::kernels::scalar::packed::gemm_packed;
use crate::kernels::{kernels_for, DType, Isa};

type Gemm = fn(usize, &[u8], usize, &[u8], usize, &mut [f32], usize);

fn expected(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v.trim() == "1")
}

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

fn dot_q4_0(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_dotprod());
    // SAFETY: dotprod detected just above (NEON is baseline on aarch64).
    unsafe { packed::gemm_dotprod::<Q4_0>(k, p, n, a, t, o.into(), os) }
}
fn dot_q8_0(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_dotprod());
    // SAFETY: as `dot_q4_0`.
    unsafe { packed::gemm_dotprod::<Q8_0>(k, p, n, a, t, o.into(), os) }
}
fn dot_q4_1(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_dotprod());
    // SAFETY: as `dot_q4_0`.
    unsafe { packed::gemm_dotprod::<Q4_1>(k, p, n, a, t, o.into(), os) }
}
fn mm_q4_1(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_i8mm());
    // SAFETY: as `mm_q4_0`.
    unsafe { packed::gemm_i8mm::<Q4_1>(k, p, n, a, t, o.into(), os) }
}
fn mm_q4_0(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_i8mm());
    // SAFETY: dotprod and i8mm detected just above.
    unsafe { packed::gemm_i8mm::<Q4_0>(k, p, n, a, t, o.into(), os) }
}
fn mm_q8_0(k: usize, p: &[u8], n: usize, a: &[u8], t: usize, o: &mut [f32], os: usize) {
    assert!(neon::has_i8mm());
    // SAFETY: as `mm_q4_0`.
    unsafe { packed::gemm_i8mm::<Q8_0>(k, p, n, a, t, o.into(), os) }
}

/// The variants this CPU runs for `dt`.
fn variants(dt: DType) -> Vec<(&'static str, Gemm)> {
    let (dot, mm): (Gemm, Gemm) = match dt {
        DType::Q4_0 => (dot_q4_0, mm_q4_0),
        DType::Q4_1 => (dot_q4_1, mm_q4_1),
        _ => (dot_q8_0, mm_q8_0),
    };
    let mut v: Vec<(&'static str, Gemm)> = Vec::new();
    if neon::has_dotprod() {
        v.push(("sdot", dot));
    } else {
        crate::test_skip::skip("no dotprod on this CPU: the sdot panel GEMMs are not tested");
    }
    if neon::has_i8mm() {
        v.push(("smmla", mm));
    } else {
        crate::test_skip::skip("no i8mm on this CPU: the smmla panel GEMMs are not tested");
    }
    v
}

#[test]
fn expected_neon_extensions_are_detected_and_installed() {
    if expected("KILN_EXPECT_DOTPROD") {
        assert!(neon::has_dotprod(), "KILN_EXPECT_DOTPROD=1 but no dotprod");
    }
    if expected("KILN_EXPECT_I8MM") {
        assert!(neon::has_i8mm(), "KILN_EXPECT_I8MM=1 but no i8mm");
    }
    for dt in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
        let installed = kernels_for(dt, Isa::Neon).unwrap().packed.map(|p| p.gemm);
        let want = neon::packed_gemms().map(|g| g.iter().find(|(d, _)| *d == dt).unwrap().1);
        assert_eq!(installed.is_some(), neon::has_dotprod(), "{dt}");
        assert_eq!(
            installed.map(|f| f as usize),
            want.map(|f| f as usize),
            "{dt}"
        );
    }
}

#[test]
fn neon_panel_gemms_equal_the_scalar_twin() {
    const MAX_ROWS: usize = 40;
    let tokens: Vec<usize> = (1..=20).chain([64, 67]).collect();
    let max_tok = *tokens.iter().max().unwrap();
    let mut checked = 0;
    for dt in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
        let vs = variants(dt);
        if expected("KILN_EXPECT_I8MM") {
            assert_eq!(vs.len(), 2, "both NEON variants must run");
        }
        for (i, k) in [32usize, 96, 576].into_iter().enumerate() {
            let sk = kernels_for(dt, Isa::Scalar).unwrap();
            let seed = 7 * i as u64 + dt as u64;
            let qw = quantize(sk, &values(seed, MAX_ROWS * k, 2.5, 0.3));
            let qa = quantize_act(sk, &values(seed ^ 0x5A5A, max_tok * k, 1.0, -0.1));
            let (wr, ar) = (qw.len() / MAX_ROWS, qa.len() / max_tok);
            let os = MAX_ROWS + 3;
            let full = pack(dt, k, &qw, MAX_ROWS).unwrap();
            let mut want = vec![0f32; (max_tok - 1) * os + MAX_ROWS];
            gemm_packed(
                dt,
                k,
                full.bytes(),
                MAX_ROWS,
                &qa,
                max_tok,
                want.as_mut_slice().into(),
                os,
            );
            for n_rows in [5, 16, 23, 40] {
                let pw = pack(dt, k, &qw[..n_rows * wr], n_rows).unwrap();
                for &n_tok in &tokens {
                    for (name, g) in &vs {
                        let mut got = vec![f32::NAN; (n_tok - 1) * os + n_rows];
                        g(
                            k,
                            pw.bytes(),
                            n_rows,
                            &qa[..n_tok * ar],
                            n_tok,
                            &mut got,
                            os,
                        );
                        for t in 0..n_tok {
                            let (o, w) = (&got[t * os..][..n_rows], &want[t * os..][..n_rows]);
                            let same = o.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
                            assert!(same, "{name} {dt} k{k} rows{n_rows} tok{n_tok} t{t}");
                            if t + 1 < n_tok {
                                let gap = &got[t * os + n_rows..(t + 1) * os];
                                assert!(gap.iter().all(|x| x.is_nan()), "{name} wrote a gap");
                            }
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    if expected("KILN_EXPECT_DOTPROD") {
        assert!(checked > 0);
    }
}

/// The K-quant panel GEMMs on NEON (Q4_K with dotprod; none for Q5_K/Q6_K) are installed
/// exactly then (`packed_k.rs` checks them against the scalar twin bit for bit).
pub(super) fn check_k_installed(dt: DType) {
    let kern = kernels_for(dt, Isa::Neon).unwrap();
    let want_packed = dt == DType::Q4_K && neon::has_dotprod();
    assert_eq!(
        kern.packed.is_some(),
        want_packed,
        "{dt}: NEON panel GEMM installed"
    );
    if expected("KILN_EXPECT_DOTPROD") && dt == DType::Q4_K {
        assert!(kern.packed.is_some(), "Q4_K sdot panel GEMM not installed");
    }
    if dt == DType::Q4_K && kern.packed.is_none() {
        crate::test_skip::skip("no dotprod on this CPU: the Q4_K panel GEMM is not tested");
    }
}
