//! Attention over a Q8_0 cache. Below `LONG_FROM` (llama.cpp's one-row order) it is exactly
//! attention over an f16 cache holding the Q8_0 values (each `scale * q` rounded to f16: the
//! tiles are widened to f16). From `LONG_FROM` on the long-context order reads the i8 values
//! and scales directly: close to an f64 reference over the exact values `scale * q`, its SIMD
//! kernels bit-identical to the scalar twin, and batched attention (tiles of many rows, split-K
//! decode) bit-identical to `attend` token by token. (The golden test in
//! tests/it/kv_q8_fidelity.rs runs the cache in the forward pass.)

use super::long::{check_batched, long_positions, LONG_SHAPES};
use super::*;
use crate::engine::attention::long::{LONG_FROM, SPAN};
use crate::engine::kv_cache::kv_type::{quantize_row, QK};

/// The values a Q8_0 cache stores for the rows `x` (`head_dim` values each), as f32 (exact).
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

/// A Q8_0 cache of `n_pos` random positions of one sequence in blocks of `bs`, the values of
/// its layer 1 (for [`reference`]), and an f16 cache of those values.
#[allow(clippy::type_complexity)]
fn twin_caches(
    hk: usize,
    d: usize,
    bs: usize,
    n_pos: usize,
    seed: u64,
) -> ((KvCache, BlockTable), (KvCache, BlockTable), Written) {
    let c16 = cfg_for(hk, d, bs, n_pos);
    let mut q8 = KvCache::new(c16.with_kv_type(KvType::Q8_0)).unwrap();
    let mut f16c = KvCache::new(c16).unwrap();
    let (mut t8, mut t16) = (q8.new_table(), f16c.new_table());
    t8.reserve(n_pos).unwrap();
    t16.reserve(n_pos).unwrap();
    let mut rng = Rng(seed);
    let mut wr = Written {
        k: vec![],
        v: vec![],
    };
    let wide = |x: &[f32]| x.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    for pos in 0..n_pos {
        for layer in 0..2 {
            // Large K amplitude gives peaked softmaxes (the running-max rescale).
            let (k, v) = (rng.vec(hk * d, 4.0), rng.vec(hk * d, 1.0));
            q8.write(layer, &t8, pos, &k, &v).unwrap();
            let (kq, vq) = (q8_values(&k, d), q8_values(&v, d));
            f16c.write(layer, &t16, pos, &kq, &vq).unwrap();
            if layer == 1 {
                wr.k.push(wide(&kq));
                wr.v.push(wide(&vq));
            }
        }
    }
    ((q8, t8), (f16c, t16), wr)
}

#[test]
fn below_long_from_a_q8_0_cache_attends_as_an_f16_cache_of_its_values() {
    // The default model's shape; a 1B-class shape.
    for &(hk, group, d, n_pos) in &[(3, 3, 64, 70), (2, 4, 128, 300)] {
        let ((q8, t8), (f16c, t16), _) =
            twin_caches(hk, d, DEFAULT_BLOCK_SIZE, n_pos, 7 + d as u64);
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

#[test]
fn long_order_over_q8_0_matches_f64_reference() {
    let n_pos = LONG_FROM + SPAN + 40;
    let mut rng = Rng(0x9808);
    for (hk, g, d, bs) in LONG_SHAPES {
        let ((q8, t8), _, wr) = twin_caches(hk, d, bs, n_pos, 0x51 + d as u64);
        for pos in long_positions(n_pos) {
            let q = rng.vec(hk * g * d, 1.0);
            let want = reference(q8.config(), &wr, pos + 1, &q);
            for isa in isas() {
                let got = run(isa, &q8, &t8, pos, &q);
                // The values read are exactly `scale * q`; all-f32 arithmetic, as the f16
                // cache's long order.
                for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a as f64 - b).abs() < 2e-5 * (1.0 + b.abs()),
                        "{isa:?} shape {:?} pos {pos} [{i}]: {a} vs {b}",
                        (hk, g, d, bs)
                    );
                }
            }
        }
    }
}

#[test]
fn long_q8_0_simd_kernels_are_bit_identical_to_the_scalar_twin() {
    let n_pos = LONG_FROM + 2 * SPAN + 20;
    let mut rng = Rng(0x5eed_9808);
    let mut compared = 0;
    for (hk, g, d, bs) in LONG_SHAPES {
        let ((q8, t8), _, _) = twin_caches(hk, d, bs, n_pos, 0x77 + d as u64);
        for isa in [AttnIsa::Avx512, AttnIsa::Avx2] {
            let mut s = AttnScratch::new(q8.config());
            s.force_isa(isa);
            if !runs(isa) {
                continue;
            }
            if s.long_isa() != isa {
                assert!(
                    !bs.is_multiple_of(16),
                    "{isa:?} ({d}, {bs}) runs the long kernel"
                );
                continue;
            }
            for pos in long_positions(n_pos) {
                let q = rng.vec(hk * g * d, 1.0);
                let scalar = bits(&run(AttnIsa::Scalar, &q8, &t8, pos, &q));
                let simd = bits(&run(isa, &q8, &t8, pos, &q));
                assert_eq!(simd, scalar, "{isa:?} shape {:?} pos {pos}", (hk, g, d, bs));
            }
            compared += 1;
        }
    }
    if AttnIsa::Avx512.supported() {
        assert_eq!(compared, 12, "6 shapes x 2 widths");
    }
}

#[test]
fn long_q8_0_values_extremes_stay_bit_identical() {
    // Scales from the subnormal to the large end of f16 and values of +-127: every kernel
    // widens and scales them exactly.
    let (hk, g, d, bs) = (1, 4, 64, 16);
    let n_pos = LONG_FROM + 40;
    let c = cfg_for(hk, d, bs, n_pos).with_kv_type(KvType::Q8_0);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(n_pos).unwrap();
    let mut rng = Rng(0xe7);
    for pos in 0..n_pos {
        let amp = [1e-5, 3e-3, 1.0, 200.0][pos % 4];
        let (k, v) = (rng.vec(d, amp), rng.vec(d, amp));
        for layer in 0..2 {
            cache.write(layer, &t, pos, &k, &v).unwrap();
        }
    }
    let q = rng.vec(hk * g * d, 0.05);
    let scalar = bits(&run(AttnIsa::Scalar, &cache, &t, n_pos - 1, &q));
    for isa in isas() {
        let got = run(isa, &cache, &t, n_pos - 1, &q);
        assert!(got.iter().all(|x| x.is_finite()), "{isa:?}");
        assert_eq!(bits(&got), scalar, "{isa:?}");
    }
}

#[test]
fn batched_q8_0_attention_equals_attend_token_by_token() {
    check_batched(KvType::Q8_0, None);
}
