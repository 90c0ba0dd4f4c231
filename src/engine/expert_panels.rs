//! The K-quant experts' GEMMs through the panel kernels, over a panel copy made lazily.
//!
//! A mixture's experts are not repacked at load: `kiln serve` starts as fast as for a dense
//! file of the same size, and a step reads only the experts it chose. The row kernels
//! (`TypeKernels::gemm`) unpack every block again for every tile of 8 tokens, which held the
//! prefill of `Q4_K_M` mixtures (Q4_K and Q6_K experts) at the row kernels' rate. So a K-quant
//! expert matrix gets the dense matrices' panel copy ([`crate::kernels::packed::pack`]) the
//! first time a step multiplies by it, made by the task that first needs it (the others of
//! that step wait for it), kept in [`Weight::lazy_panels`], and the file's pages of those rows
//! are released: as for a dense matrix, the copy replaces the mapped bytes, so resident
//! memory stays what the file's touched experts take (plus the layout's padding), and the
//! memory budget's count of the file's size stays honest. An expert no step chose is never
//! read nor copied.
//!
//! Why the copy is kept and not repacked per step: repacking in every step costs decode (one
//! token per expert) more than the whole GEMM (measured: pack 60% of a decode step's time),
//! and the choice between the two GEMMs cannot follow the step's token count: the K-quant
//! panel GEMM rounds differently from the row kernels (it follows llama.cpp's repacked order,
//! `scalar/packed_k.rs`), so a token's bits would depend on how many tokens chose its expert.
//!
//! Batch invariance: [`panels`] depends only on the weight (its dtype, width and the ISA's
//! kernels), so every GEMM of such an expert, a decode token's or a 512-token prompt's, the
//! first step's or a later one's, goes through the panel GEMM, whose result for a token is
//! bit-identical whatever the call's other tokens (its contract).

use crate::engine::weights::Weight;
use crate::kernels::packed::kquant::is_kquant;
use crate::kernels::packed::{pack, PackedWeights, PanelLayout};
use crate::kernels::row::PackedKernels;

/// Whether `w`'s GEMMs go through a lazily made panel copy: a K-quant with a panel layout for
/// its width whose ISA has a panel GEMM. A property of the weight alone (module docs).
pub fn uses_panels(w: &Weight) -> bool {
    w.kern.packed.is_some() && is_kquant(w.dtype) && PanelLayout::new(w.dtype, w.k).is_some()
}

/// The panel GEMM of `w` and its panel copy, made now if this is the first use (and the
/// file's pages of `w` released), or `None` when `w` takes the row kernels
/// ([`uses_panels`]). Allocates only on a weight's first use.
pub fn panels(w: &Weight) -> Option<(PackedKernels, &PackedWeights)> {
    if !uses_panels(w) {
        return None;
    }
    let pk = w.kern.packed?;
    let p = w.lazy_panels.get_or_init(|| {
        let p = pack(w.dtype, w.k, w.data.bytes(), w.n_out)
            .expect("a K-quant matrix with a panel layout packs");
        w.data.release_pages();
        p
    });
    Some((pk, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufFile, GgufWriter};
    use crate::kernels::packed::kquant::QK_K;
    use crate::kernels::scalar::kquants::quantize_row_q8_k;
    use crate::kernels::DType;

    /// A small LCG: the tests' bytes are arbitrary but reproducible.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 24
        }
        fn unit(&mut self) -> f32 {
            (self.next() % 2001) as f32 / 1000.0 - 1.0
        }
    }

    /// `n_rows` GGUF rows of `k` values of `dt`: random bytes, finite f16 scales.
    fn rows(dt: DType, k: usize, n_rows: usize, rng: &mut Rng) -> Vec<u8> {
        let bb = dt.block_bytes();
        let mut w: Vec<u8> = (0..n_rows * k / QK_K * bb)
            .map(|_| rng.next() as u8)
            .collect();
        let f16s: &[usize] = if dt == DType::Q6_K { &[208] } else { &[0, 2] };
        for blk in w.chunks_exact_mut(bb) {
            for &at in f16s {
                let v = half::f16::from_f32(rng.unit() * 0.01);
                blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        w
    }

    /// A K-quant expert matrix takes the panel GEMM from its first use on (the copy made once,
    /// equal to a load-time copy), a token's outputs are the same bits alone or among 66
    /// tokens, and the row kernels' results are within rounding (the two orders differ).
    #[test]
    fn a_k_quant_expert_multiplies_from_one_lazy_panel_copy() {
        let mut rng = Rng(11);
        let (k, n_rows) = (512, 40);
        for dt in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
            let w_bytes = rows(dt, k, n_rows, &mut rng);
            let mut gw = GgufWriter::new();
            gw.add_tensor("w", dt, &[k as u64, n_rows as u64], w_bytes.clone())
                .unwrap();
            let file = GgufFile::from_bytes(gw.to_bytes().unwrap()).unwrap();
            let w = Weight::new("w", file.tensor_data("w").unwrap(), n_rows, k).unwrap();
            if !uses_panels(&w) {
                // Only an ISA without a K-quant panel GEMM (scalar) keeps the row kernels.
                assert!(w.kern.packed.is_none(), "{dt}: a panel GEMM left unused");
                assert!(panels(&w).is_none() && w.lazy_panels.get().is_none());
                continue;
            }
            assert!(
                w.lazy_panels.get().is_none(),
                "{dt}: packed before its first use"
            );
            let (pk, p) = panels(&w).unwrap();
            let copy = pack(dt, k, &w_bytes, n_rows).unwrap();
            assert!(
                p.bytes() == copy.bytes(),
                "{dt}: the lazy copy is the load-time copy"
            );
            let again = panels(&w).unwrap().1;
            assert!(std::ptr::eq(p, again), "{dt}: packed twice");
            let n_tok = 66;
            let ar = w.act_row_bytes;
            let mut a = vec![0u8; n_tok * ar];
            for t in 0..n_tok {
                let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
                quantize_row_q8_k(&x, &mut a[t * ar..(t + 1) * ar]);
            }
            let mut all = vec![f32::NAN; n_tok * n_rows];
            (pk.gemm)(
                k,
                p.bytes(),
                n_rows,
                &a,
                n_tok,
                (&mut all[..]).into(),
                n_rows,
            );
            let mut row = vec![0f32; n_tok * n_rows];
            (w.kern.gemm)(k, &w_bytes, n_rows, &a, n_tok, &mut row, n_rows);
            for t in [0, 1, 37, 65] {
                let mut alone = vec![f32::NAN; n_rows];
                let at = &a[t * ar..(t + 1) * ar];
                (pk.gemm)(k, p.bytes(), n_rows, at, 1, (&mut alone[..]).into(), n_rows);
                let got = &all[t * n_rows..(t + 1) * n_rows];
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&alone), "{dt} token {t}");
                let want = &row[t * n_rows..(t + 1) * n_rows];
                let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                for (g, r) in got.iter().zip(want) {
                    assert!((g - r).abs() <= 1e-4 * scale, "{dt} token {t}: {g} vs {r}");
                }
            }
        }
    }
}
