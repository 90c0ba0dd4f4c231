//! Attention sinks (`attention/sink.rs`, gpt-oss): with a sink logit per query head, every
//! order (one-row below `LONG_FROM`, long from it) matches an f64 reference whose softmax
//! denominator includes `e^sink`, the SIMD kernels give the scalar twin's bits, and the batched
//! scheduler (tiles, split-K decode and its merge, heads split over the team) gives each token
//! exactly what it gets alone.

use super::long::check_batched;
use super::*;
use crate::engine::attention::long::{LONG_FROM, SPAN};

/// Sinks for `n` heads: above every score (the accumulator rescale), around them, and far
/// below (no effect), cycling.
fn sinks(n: usize) -> Vec<f32> {
    (0..n)
        .map(|h| match h % 4 {
            0 => 6.0,
            1 => 0.3,
            2 => -1.2,
            _ => -40.0,
        })
        .collect()
}

/// Attention of layer 1 at `pos` with kernel `isa` (the scalar twin where it does not cover the
/// shape) and one sink per query head.
fn run_sinks(
    isa: AttnIsa,
    cache: &KvCache,
    table: &BlockTable,
    pos: usize,
    q: &[f32],
    sk: &[f32],
) -> Vec<f32> {
    let c = cache.config();
    let mut scratch = AttnScratch::new(c);
    scratch.force_isa(isa);
    let params = AttnParams {
        sinks: Some(sk),
        ..AttnParams::standard(c.head_dim)
    };
    let mut out = vec![f32::NAN; q.len()];
    attend_with(cache, 1, table, pos, q, &mut out, &mut scratch, &params).unwrap();
    out
}

/// Shapes of both orders' SIMD kernels: the default group, gpt-oss's head size 64 in groups of
/// 8, a 128-wide head, and a group wider than one pass.
const SINK_SHAPES: [(usize, usize, usize, usize); 4] = [
    (3, 3, 64, 16),
    (1, 8, 64, 16),
    (2, 4, 128, 32),
    (1, 5, 64, 16),
];

/// Positions of the one-row order and of the long order.
fn positions(n_pos: usize) -> Vec<usize> {
    [0, 1, 17, 99, 700, LONG_FROM, LONG_FROM + 17, n_pos - 1]
        .into_iter()
        .filter(|&p| p < n_pos)
        .collect()
}

#[test]
fn sinks_match_the_f64_reference_in_both_orders() {
    let n_pos = LONG_FROM + SPAN + 20;
    let mut rng = Rng(0x51_4b);
    for (hk, g, d, bs) in SINK_SHAPES {
        let c = cfg_for(hk, d, bs, n_pos);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        let wr = fill(&mut cache, &mut table, n_pos, &mut rng);
        let sk = sinks(hk * g);
        for pos in positions(n_pos) {
            let q = rng.vec(hk * g * d, 1.0);
            let want = reference_with_sinks(&c, &wr, pos + 1, &q, Some(&sk));
            for isa in isas() {
                let got = run_sinks(isa, &cache, &table, pos, &q, &sk);
                for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a as f64 - b).abs() < 2e-3 * (1.0 + b.abs()),
                        "{isa:?} shape {:?} pos {pos} [{i}]: {a} vs {b}",
                        (hk, g, d, bs)
                    );
                }
            }
        }
    }
}

#[test]
fn sinks_change_the_output_and_simd_kernels_keep_the_scalar_bits() {
    let n_pos = LONG_FROM + SPAN + 20;
    let mut rng = Rng(0x51_4c);
    for (hk, g, d, bs) in SINK_SHAPES {
        let c = cfg_for(hk, d, bs, n_pos);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        fill(&mut cache, &mut table, n_pos, &mut rng);
        let sk = sinks(hk * g);
        for pos in positions(n_pos) {
            let q = rng.vec(hk * g * d, 1.0);
            let scalar = run_sinks(AttnIsa::Scalar, &cache, &table, pos, &q, &sk);
            // A sink of 6 (head 0) is above every score: the output shrinks.
            let plain = run(AttnIsa::Scalar, &cache, &table, pos, &q);
            assert_ne!(
                bits(&scalar[..d]),
                bits(&plain[..d]),
                "pos {pos}: no effect"
            );
            for isa in isas() {
                let simd = run_sinks(isa, &cache, &table, pos, &q, &sk);
                assert_eq!(
                    bits(&simd),
                    bits(&scalar),
                    "{isa:?} shape {:?} pos {pos}",
                    (hk, g, d, bs)
                );
            }
        }
    }
}

#[test]
fn batched_attention_with_sinks_equals_attend_token_by_token() {
    // check_batched's shape: 2 KV heads of 4 query heads.
    check_batched(KvType::F16, Some(&sinks(8)));
}

#[test]
fn a_sink_per_head_is_checked() {
    let c = cfg(1, 64, 16);
    let mut cache = KvCache::new(c).unwrap();
    let mut table = cache.new_table();
    fill(&mut cache, &mut table, 4, &mut Rng(3));
    let q = vec![0.1; 2 * 64];
    let mut out = vec![0.0; q.len()];
    let params = AttnParams {
        sinks: Some(&[0.0]),
        ..AttnParams::standard(64)
    };
    let mut scratch = AttnScratch::new(&c);
    let err = attend_with(&cache, 1, &table, 3, &q, &mut out, &mut scratch, &params);
    assert!(
        matches!(
            err,
            Err(KvCacheError::Shape {
                expected: 2,
                got: 1,
                ..
            })
        ),
        "{err:?}"
    );
}
