//! Attention over a Q8_0 cache is exactly attention over an f16 cache holding the Q8_0 values
//! (each `scale * q` rounded to f16): every kernel, the one-row order and the long-context
//! order (past `LONG_FROM`). (`attend_batch` reads through the same view; the golden test in
//! tests/it/kv_q8_fidelity.rs runs it in the forward pass.)

use super::*;
use crate::engine::kv_cache::kv_type::{quantize_row, QK};

/// The values a Q8_0 cache stores for the rows `x` (`head_dim` values each), as f32.
fn q8_values(x: &[f32], head_dim: usize) -> Vec<f32> {
    let (mut q, mut s) = (vec![0i8; head_dim], vec![f16::ZERO; head_dim / QK]);
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(head_dim) {
        quantize_row(row, &mut q, &mut s);
        out.extend(
            q.iter()
                .enumerate()
                .map(|(i, &v)| s[i / QK].to_f32() * f32::from(v)),
        );
    }
    out
}

/// A Q8_0 cache and an f16 cache of its values, `n_pos` positions of one sequence each.
fn twin_caches(
    hk: usize,
    d: usize,
    n_pos: usize,
    seed: u64,
) -> ((KvCache, BlockTable), (KvCache, BlockTable)) {
    let c16 = cfg_for(hk, d, DEFAULT_BLOCK_SIZE, n_pos);
    let mut q8 = KvCache::new(c16.with_kv_type(KvType::Q8_0)).unwrap();
    let mut f16c = KvCache::new(c16).unwrap();
    let (mut t8, mut t16) = (q8.new_table(), f16c.new_table());
    t8.reserve(n_pos).unwrap();
    t16.reserve(n_pos).unwrap();
    let mut rng = Rng(seed);
    for pos in 0..n_pos {
        for layer in 0..2 {
            let (k, v) = (rng.vec(hk * d, 4.0), rng.vec(hk * d, 1.0));
            q8.write(layer, &t8, pos, &k, &v).unwrap();
            f16c.write(layer, &t16, pos, &q8_values(&k, d), &q8_values(&v, d))
                .unwrap();
        }
    }
    ((q8, t8), (f16c, t16))
}

#[test]
fn a_q8_0_cache_attends_as_an_f16_cache_of_its_values() {
    // The default model's shape; a 1B-class shape past LONG_FROM (the long-context order).
    for &(hk, group, d, n_pos) in &[(3, 3, 64, 70), (2, 4, 128, LONG_FROM + 40)] {
        let ((q8, t8), (f16c, t16)) = twin_caches(hk, d, n_pos, 7 + d as u64);
        let q = Rng(99).vec(hk * group * d, 1.0);
        for isa in isas() {
            for pos in [0, 17, n_pos / 2, n_pos - 1] {
                assert_eq!(
                    bits(&run(isa, &q8, &t8, pos, &q)),
                    bits(&run(isa, &f16c, &t16, pos, &q)),
                    "{isa:?} hk={hk} d={d} pos={pos}"
                );
            }
        }
        // A scratch made for the other storage type is a named error, not a misread.
        let mut wrong = AttnScratch::new(f16c.config());
        let mut out = vec![0.0; q.len()];
        assert!(matches!(
            attend(&q8, 1, &t8, 0, &q, &mut out, &mut wrong),
            Err(KvCacheError::InvalidConfig(m)) if m.contains("q8_0")
        ));
    }
}
