//! K-quant panel GEMMs (Q4_K, Q5_K, Q6_K): every ISA's version == the scalar twin, bit for bit
//! (and the twin within rounding of the GGUF-layout scalar `gemm`), on random blocks (every quant, scale and
//! min bit pattern; Q8_K quants including -128; tiny to huge f16 scales), full and ragged
//! panels, 1..=20 and 64+ tokens, and row ranges starting at a later panel.

use crate::kernels::packed::kquant::is_kquant;
use crate::kernels::packed::{pack, PackedWeights};
use crate::kernels::scalar::packed_k::gemm_packed_k;
use crate::kernels::{kernels_for, DType, Isa};

/// Offsets of the f16 fields of each GGUF K block (all other bytes are free bit patterns).
fn f16_fields(dt: DType) -> &'static [usize] {
    match dt {
        DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => unreachable!(),
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 16
    }
    /// A finite f32 of magnitude about 10^[-4, 1], sometimes extreme, either sign.
    fn scale(&mut self, extreme: bool) -> f32 {
        let m = (self.next() % 1000) as f32 / 1000.0;
        let e = if extreme && self.next().is_multiple_of(4) {
            [-7.0f32, 4.5][(self.next() % 2) as usize]
        } else {
            -4.0 + 5.0 * m
        };
        let v = 10f32.powf(e) * (1.0 + m);
        if self.next().is_multiple_of(2) {
            v
        } else {
            -v
        }
    }
}

/// `n_rows` random GGUF rows of `k` values.
fn weights(dt: DType, k: usize, n_rows: usize, rng: &mut Rng, extreme: bool) -> Vec<u8> {
    let bb = dt.block_bytes();
    let mut w: Vec<u8> = (0..n_rows * k / 256 * bb)
        .map(|_| rng.next() as u8)
        .collect();
    for blk in w.chunks_exact_mut(bb) {
        for &at in f16_fields(dt) {
            // dmin is non-negative in real files but any sign is a valid bit pattern; one in
            // eight zero (the AVX-512 row kernel skips the mins then).
            let v = if rng.next().is_multiple_of(8) {
                0.0
            } else {
                rng.scale(extreme)
            };
            blk[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

/// `n_tok` random Q8_K rows: quants anywhere in -128..=127, consistent group sums.
fn activations(k: usize, n_tok: usize, rng: &mut Rng) -> Vec<u8> {
    let mut a = vec![0u8; n_tok * k / 256 * 292];
    for blk in a.chunks_exact_mut(292) {
        blk[0..4].copy_from_slice(&rng.scale(false).to_le_bytes());
        let full = rng.next().is_multiple_of(3);
        for q in &mut blk[4..260] {
            *q = if full {
                rng.next() as u8
            } else {
                (rng.next() % 64) as u8 ^ 0xE0
            };
        }
        for g in 0..16 {
            let s: i16 = blk[4 + 16 * g..20 + 16 * g]
                .iter()
                .map(|&q| q as i8 as i16)
                .sum();
            blk[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
        }
    }
    a
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Asserts `got` is within float rounding of `want` (the same sums in another order): the
/// difference at most 1e-4 of the largest magnitude among the token's outputs.
fn assert_close(got: &[f32], want: &[f32], ctx: &str) {
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * scale + f32::MIN_POSITIVE,
            "row {r}: {g} vs {w} (scale {scale}) {ctx}"
        );
    }
}

fn check(dt: DType, k: usize, n_rows: usize, tokens: &[usize], seed: u64, extreme: bool) {
    let mut rng = Rng(seed);
    let max_tok = *tokens.iter().max().unwrap();
    let w = weights(dt, k, n_rows, &mut rng, extreme);
    let act = activations(k, max_tok, &mut rng);
    let ar = act.len() / max_tok;
    let pw: PackedWeights = pack(dt, k, &w, n_rows).expect("packable");
    let scalar = kernels_for(dt, Isa::Scalar).unwrap();
    let mut checked = 0;
    for &n_tok in tokens {
        let a = &act[..n_tok * ar];
        let os = n_rows + 3;
        let len = (n_tok - 1) * os + n_rows;
        let mut twin = vec![0f32; len];
        gemm_packed_k(
            dt,
            k,
            pw.bytes(),
            n_rows,
            a,
            n_tok,
            twin.as_mut_slice().into(),
            os,
        );
        let mut row = vec![0f32; len];
        (scalar.gemm)(k, &w, n_rows, a, n_tok, &mut row, os);
        for t in 0..n_tok {
            let s = t * os..t * os + n_rows;
            let ctx = format!("{dt} twin vs scalar row gemm k{k} tok{n_tok} t{t} seed{seed}");
            assert_close(&twin[s.clone()], &row[s], &ctx);
        }
        for isa in Isa::all_supported() {
            let kern = kernels_for(dt, isa).unwrap();
            let Some(pk) = kern.packed else { continue };
            checked += 1;
            let mut got = vec![f32::NAN; len];
            (pk.gemm)(
                k,
                pw.bytes(),
                n_rows,
                a,
                n_tok,
                got.as_mut_slice().into(),
                os,
            );
            let mut part = vec![f32::NAN; len - 16];
            (pk.gemm)(
                k,
                pw.from_row(16),
                n_rows - 16,
                a,
                n_tok,
                part.as_mut_slice().into(),
                os,
            );
            for t in 0..n_tok {
                let s = t * os..t * os + n_rows;
                let ctx = format!("{dt} {isa} k{k} rows{n_rows} tok{n_tok} t{t} seed{seed}");
                assert_eq!(bits(&got[s.clone()]), bits(&twin[s.clone()]), "simd {ctx}");
                assert_eq!(
                    bits(&part[t * os..t * os + n_rows - 16]),
                    bits(&twin[t * os + 16..t * os + n_rows]),
                    "simd from row 16 {ctx}"
                );
                if t + 1 < n_tok {
                    assert!(
                        got[t * os + n_rows..(t + 1) * os]
                            .iter()
                            .all(|x| x.is_nan()),
                        "wrote outside its cells {ctx}"
                    );
                }
            }
        }
        // The AVX-512 tiles themselves: a CPU with 256-bit AVX-512 datapaths installs the
        // AVX2 ones for decode-sized calls, so the table alone would leave those untested.
        #[cfg(target_arch = "x86_64")]
        for (paced, gemm) in avx512_tiles(dt).into_iter().flatten().enumerate() {
            let mut got = vec![f32::NAN; len];
            // SAFETY: `avx512_tiles` returns them only when the CPU has AVX-512 VNNI.
            unsafe {
                gemm(
                    k,
                    pw.bytes(),
                    n_rows,
                    a,
                    n_tok,
                    got.as_mut_slice().into(),
                    os,
                )
            };
            for t in 0..n_tok {
                let s = t * os..t * os + n_rows;
                let ctx = format!(
                    "{dt} avx512 tiles (paced {paced}) k{k} rows{n_rows} tok{n_tok} t{t} seed{seed}"
                );
                assert_eq!(bits(&got[s.clone()]), bits(&twin[s]), "{ctx}");
                if t + 1 < n_tok {
                    assert!(
                        got[t * os + n_rows..(t + 1) * os]
                            .iter()
                            .all(|x| x.is_nan()),
                        "wrote outside its cells {ctx}"
                    );
                }
            }
        }
    }
    if cfg!(target_arch = "x86_64") {
        for isa in Isa::all_supported() {
            let has = kernels_for(dt, isa).unwrap().packed.is_some();
            let vnni = crate::kernels::isa::has_avx512_vnni();
            let want = match isa {
                Isa::Avx2 | Isa::AvxVnni => true,
                Isa::Avx512 => vnni,
                _ => false,
            };
            assert_eq!(
                has, want,
                "{dt} {isa}: packed GEMM installed where it exists"
            );
        }
        if crate::kernels::isa::supported(Isa::Avx2) {
            assert!(checked > 0, "no ISA checked");
        }
    }
    #[cfg(target_arch = "aarch64")]
    super::packed_neon::check_k_installed(dt);
}

/// The GEMMs of the AVX-512 K-quant tiles for every call size, plain and with paced 2-token
/// tiles, when this CPU can run them.
///
/// # Safety
/// Calling the returned GEMM needs only the lengths it checks: it is returned only when the CPU
/// has its features (AVX-512 VNNI).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::type_complexity)]
fn avx512_tiles(
    dt: DType,
) -> Option<
    [unsafe fn(usize, &[u8], usize, &[u8], usize, crate::kernels::cells::OutCells<'_>, usize); 2],
> {
    use crate::kernels::x86::avx512::packed_k as z;
    if !crate::kernels::isa::has_avx512_vnni() {
        return None;
    }
    Some(match dt {
        DType::Q4_K => [
            z::gemm_packed_k::<{ z::Q4K }>,
            z::gemm_packed_k_paced::<{ z::Q4K }>,
        ],
        DType::Q5_K => [
            z::gemm_packed_k::<{ z::Q5K }>,
            z::gemm_packed_k_paced::<{ z::Q5K }>,
        ],
        _ => [
            z::gemm_packed_k::<{ z::Q6K }>,
            z::gemm_packed_k_paced::<{ z::Q6K }>,
        ],
    })
}

const TYPES: [DType; 3] = [DType::Q4_K, DType::Q6_K, DType::Q5_K];

#[test]
fn packed_k_gemm_is_bit_identical_few_tokens() {
    let tokens: Vec<usize> = (1..=20).collect();
    for dt in TYPES {
        for (i, k) in [256, 512, 1536].into_iter().enumerate() {
            check(dt, k, 40, &tokens, 7 + i as u64, i == 1);
        }
    }
}

#[test]
fn packed_k_gemm_is_bit_identical_many_tokens_and_long_rows() {
    for dt in TYPES {
        check(dt, 4096, 33, &[1, 3], 99, true);
        check(dt, 512, 17 + 16, &[64, 67, 130], 5, false);
        // A last panel of 13 rows: both 8-row halves of the AVX2 tile, the second partial.
        check(dt, 256, 45, &[1, 2, 5], 11, false);
    }
}

#[test]
fn pack_k_rejects_what_it_cannot_lay_out() {
    for dt in TYPES {
        assert!(is_kquant(dt));
        let bb = dt.block_bytes();
        assert!(pack(dt, 128, &vec![0; bb], 1).is_none(), "{dt} k 128");
        assert!(pack(dt, 300, &vec![0; 2 * bb], 1).is_none(), "{dt} k 300");
        assert!(pack(dt, 256, &vec![0; bb - 1], 1).is_none(), "{dt} short");
        assert!(pack(dt, 256, &[], 0).is_none(), "{dt} no rows");
        let p = pack(dt, 512, &vec![0; 2 * bb], 1).unwrap();
        assert_eq!(p.bytes().len() % 64, 0);
        assert_eq!(p.bytes().as_ptr() as usize % 64, 0);
    }
    assert!(!is_kquant(DType::Q2_K));
}
