//! Panel GEMMs: the SIMD version == its scalar twin == the GGUF-layout `gemm` of the same ISA,
//! bit for bit, on random blocks, full and ragged panels, many token counts, and row ranges
//! starting at a later panel (as `Weight::gemm_rows` calls them).

use proptest::prelude::*;

use super::util::{quantize, quantize_act};
use crate::kernels::packed::{pack, PackedWeights};
use crate::kernels::scalar::packed::gemm_packed;
use crate::kernels::{kernels_for, DType, Isa};

const TYPES: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
];
/// Token counts: every token tile size (1..=8; 6 is the tail of 70) and a second 64-token group.
const TOKENS: [usize; 10] = [1, 2, 3, 4, 5, 7, 16, 17, 40, 70];
const ROWS: [usize; 3] = [16, 32, 40];

/// Values in `[-scale, scale] + shift` from a seed (a small LCG: cheap, reproducible).
fn values(seed: u64, n: usize, scale: f32, shift: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale + shift
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The panel GEMMs to check: the scalar twin, plus the installed SIMD one when the CPU has it,
/// each with the GGUF-layout gemm it must equal (`None`: no bitwise reference on this CPU).
type Gemm = Box<dyn Fn(usize, &[u8], usize, &[u8], usize, &mut [f32], usize)>;

fn packed_gemms(dt: DType) -> Vec<(String, Gemm)> {
    let mut v: Vec<(String, Gemm)> = vec![(
        "scalar twin".into(),
        Box::new(move |k, p: &[u8], n, a: &[u8], t, o: &mut [f32], os| {
            gemm_packed(dt, k, p, n, a, t, o.into(), os)
        }),
    )];
    for isa in Isa::tested() {
        if let Some(pk) = kernels_for(dt, isa).unwrap().packed {
            v.push((
                format!("{isa}"),
                Box::new(move |k, p: &[u8], n, a: &[u8], t, o: &mut [f32], os| {
                    (pk.gemm)(k, p, n, a, t, o.into(), os)
                }),
            ));
        }
    }
    v
}

/// The ISAs with a panel GEMM for `dt`: each one's GGUF-layout gemm must equal the twin too.
fn packed_isas(dt: DType) -> Vec<Isa> {
    Isa::tested()
        .into_iter()
        .filter(|&i| kernels_for(dt, i).unwrap().packed.is_some())
        .collect()
}

fn check(dt: DType, k: usize, seed: u64, scale: f32, shift: f32) -> Result<(), TestCaseError> {
    let max_rows = *ROWS.iter().max().unwrap();
    let max_tok = *TOKENS.iter().max().unwrap();
    let sk = kernels_for(dt, Isa::Scalar).unwrap();
    let qw = quantize(sk, &values(seed, max_rows * k, scale, shift));
    let qa = quantize_act(sk, &values(seed ^ 0xABCD, max_tok * k, 1.0, 0.1));
    let (wr, ar) = (qw.len() / max_rows, qa.len() / max_tok);
    let gemms = packed_gemms(dt);
    // Every x86 SIMD ISA this CPU has installs a panel GEMM: none may be skipped silently.
    for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512] {
        if crate::kernels::isa::supported(isa)
            && (isa != Isa::Avx512 || crate::kernels::isa::has_avx512_vnni())
        {
            prop_assert!(
                packed_isas(dt).contains(&isa),
                "{} panel GEMM not installed",
                isa
            );
        }
    }
    for n_rows in ROWS {
        let pw: PackedWeights = pack(dt, k, &qw[..n_rows * wr], n_rows).expect("packable");
        for n_tok in TOKENS {
            let a = &qa[..n_tok * ar];
            let os = n_rows + 3;
            let len = (n_tok - 1) * os + n_rows;
            let mut want = vec![0f32; len];
            gemm_packed(
                dt,
                k,
                pw.bytes(),
                n_rows,
                a,
                n_tok,
                want.as_mut_slice().into(),
                os,
            );
            for isa in packed_isas(dt) {
                let mut r = vec![0f32; len];
                (kernels_for(dt, isa).unwrap().gemm)(k, &qw, n_rows, a, n_tok, &mut r, os);
                for t in 0..n_tok {
                    let s = t * os..t * os + n_rows;
                    prop_assert_eq!(
                        bits(&want[s.clone()]),
                        bits(&r[s]),
                        "twin vs {} gemm {} k{} rows{} tok{} t{}",
                        isa,
                        dt,
                        k,
                        n_rows,
                        n_tok,
                        t
                    );
                }
            }
            for (name, g) in &gemms {
                let mut got = vec![f32::NAN; len];
                g(k, pw.bytes(), n_rows, a, n_tok, &mut got, os);
                for t in 0..n_tok {
                    let s = t * os..t * os + n_rows;
                    prop_assert_eq!(
                        bits(&got[s.clone()]),
                        bits(&want[s]),
                        "{} {} k{} rows{} tok{} t{}",
                        name,
                        dt,
                        k,
                        n_rows,
                        n_tok,
                        t
                    );
                    if t + 1 < n_tok {
                        prop_assert!(
                            got[t * os + n_rows..(t + 1) * os]
                                .iter()
                                .all(|x| x.is_nan()),
                            "{} wrote outside its cells",
                            name
                        );
                    }
                }
                // Rows from panel 1 on, as gemm_rows(16, n_rows) reads them.
                let mut part = vec![0f32; (n_tok - 1) * os + n_rows - 16];
                g(k, pw.from_row(16), n_rows - 16, a, n_tok, &mut part, os);
                for t in 0..n_tok {
                    prop_assert_eq!(
                        bits(&part[t * os..t * os + n_rows - 16]),
                        bits(&want[t * os + 16..t * os + n_rows]),
                        "{} row range from 16, t{}",
                        name,
                        t
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn packed_gemm_is_bit_identical(ki in 0usize..3, seed in any::<u64>(), scale in 0.01f32..20.0, shift in -1.0f32..1.0) {
        let k = [32, 576, 1536][ki];
        for dt in TYPES {
            check(dt, k, seed, scale, shift * scale)?;
        }
    }
}

#[test]
fn packed_gemm_is_bit_identical_on_every_shape() {
    // 4160: longer than the AVX-512 Q5_0 prefill tile unpacks (128 blocks).
    for k in [32, 576, 1536, 4160] {
        for dt in TYPES {
            check(dt, k, k as u64, 3.0, 0.5).unwrap();
        }
    }
}

#[test]
fn pack_rejects_what_it_cannot_lay_out() {
    assert!(pack(DType::Q2_K, 256, &[0; 84], 1).is_none());
    assert!(pack(DType::Q5_0, 48, &[0; 44], 1).is_none());
    assert!(pack(DType::Q5_1, 32, &[0; 23], 1).is_none());
    assert!(pack(DType::Q4_0, 48, &[0; 36], 1).is_none());
    assert!(pack(DType::Q4_0, 32, &[0; 17], 1).is_none());
    assert!(pack(DType::Q4_0, 32, &[], 0).is_none());
    let p = pack(DType::Q8_0, 64, &[0; 68], 1).unwrap();
    assert_eq!(p.bytes().len() % 64, 0);
    assert_eq!(p.bytes().as_ptr() as usize % 64, 0);
}
