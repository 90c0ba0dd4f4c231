//! The long-context order (`attention/long.rs`): its SIMD kernels against the scalar twin bit
//! for bit, against an f64 reference, and the batched scheduler (tiles, split-K decode, short
//! tokens) against [`attend`] token by token.

use super::*;
use crate::engine::attention::long::{LONG_FROM, SPAN};
use crate::engine::kv_cache::{KvType, LayerWindows};
use crate::engine::team::Team;
use std::sync::Mutex;

/// (n_head_kv, group, head_dim, block_size): the default model's shape, Llama-3.2-1B's group
/// of 4, the head sizes 96, 128 and 256, a group wider than one pass of rows (7), and a block
/// size only the scalar twin covers.
pub(super) const LONG_SHAPES: [(usize, usize, usize, usize); 7] = [
    (3, 3, 64, 16),
    (2, 4, 64, 32),
    (1, 5, 96, 16),
    (1, 4, 128, 16),
    (1, 2, 256, 16),
    (1, 7, 64, 16),
    (2, 2, 64, 8),
];

/// Positions around the long order's start and its span and tile edges.
pub(super) fn long_positions(n_pos: usize) -> Vec<usize> {
    let f = LONG_FROM;
    [
        f,
        f + 1,
        f + 15,
        f + 16,
        f + SPAN - 1,
        f + SPAN,
        f + SPAN + 7,
        n_pos - 1,
    ]
    .into_iter()
    .filter(|&p| p < n_pos)
    .collect()
}

#[test]
fn long_order_matches_f64_reference() {
    let n_pos = LONG_FROM + SPAN + 40;
    let mut rng = Rng(0x10_46);
    for (hk, g, d, bs) in LONG_SHAPES {
        let c = cfg_for(hk, d, bs, n_pos);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        let wr = fill(&mut cache, &mut table, n_pos, &mut rng);
        for pos in long_positions(n_pos) {
            let q = rng.vec(hk * g * d, 1.0);
            let want = reference(&c, &wr, pos + 1, &q);
            for isa in isas() {
                let got = run(isa, &cache, &table, pos, &q);
                // All-f32 order: close to f64, far closer than the f16-accumulator order.
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
fn long_simd_kernels_are_bit_identical_to_the_scalar_twin() {
    let n_pos = LONG_FROM + 2 * SPAN + 20;
    let mut rng = Rng(0x5eed_1046);
    let mut compared = 0;
    for (hk, g, d, bs) in LONG_SHAPES {
        let c = cfg_for(hk, d, bs, n_pos);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        fill(&mut cache, &mut table, n_pos, &mut rng);
        for isa in [AttnIsa::Avx512, AttnIsa::Avx2] {
            let mut s = AttnScratch::new(&c);
            s.force_isa(isa);
            if !isa.supported() {
                continue;
            }
            let covered = d.is_multiple_of(16) && bs.is_multiple_of(16);
            assert_eq!(s.long_isa() == isa, covered, "{isa:?} ({d}, {bs})");
            if !covered {
                continue;
            }
            for pos in long_positions(n_pos) {
                let q = rng.vec(hk * g * d, 1.0);
                let scalar = bits(&run(AttnIsa::Scalar, &cache, &table, pos, &q));
                let simd = bits(&run(isa, &cache, &table, pos, &q));
                assert_eq!(simd, scalar, "{isa:?} shape {:?} pos {pos}", (hk, g, d, bs));
            }
            compared += 1;
        }
    }
    if AttnIsa::Avx512.supported() {
        assert_eq!(compared, 12, "6 shapes x 2 widths");
    }
}

/// Runs `attend_batch` over `tokens` (sequence, position) with queries `q`, on a team of two,
/// with `params` (`AttnParams::standard` when `None`).
pub(super) fn run_batch(
    isa: AttnIsa,
    cache: &KvCache,
    (tables, tokens): (&[BlockTable], &[(u32, u32)]),
    q: &[f32],
    plan_tokens: usize,
    params: Option<&AttnParams>,
) -> Vec<f32> {
    let c = cache.config();
    let team = Team::new(2).unwrap();
    let scratches: Vec<_> = (0..2)
        .map(|_| {
            let mut s = AttnScratch::new(c);
            s.force_isa(isa);
            Mutex::new(s)
        })
        .collect();
    let nq = q.len() / tokens.len();
    let mut kv = *c;
    kv.n_blocks = plan_tokens.div_ceil(c.block_size);
    let mut plan = AttnPlan::new(&kv, nq / c.head_dim, tokens.len(), tables.len());
    let tok_seq: Vec<u32> = tokens.iter().map(|t| t.0).collect();
    let tok_pos: Vec<u32> = tokens.iter().map(|t| t.1).collect();
    let table_of = |i: usize| &tables[i];
    let params = params.copied().unwrap_or(AttnParams::standard(c.head_dim));
    let batch = AttnBatch {
        tok_seq: &tok_seq,
        tok_pos: &tok_pos,
        table: &table_of,
        q,
        params: &params,
    };
    let mut out = vec![f32::NAN; q.len()];
    attend_batch(&team, cache, 1, &batch, &mut out, &scratches, &mut plan).unwrap();
    out
}

#[test]
fn batched_attention_equals_attend_token_by_token() {
    check_batched(KvType::F16, None);
}

/// Sequence 0 prefills across LONG_FROM (short tokens, then a tile run), sequence 1 decodes
/// one long token (split over KV), sequence 2 decodes one short token, sequence 3 prefills a
/// long run longer than one tile: with every kernel, `attend_batch` gives each token exactly
/// what `attend` gives it alone (and the kernels give the scalar twin's bits), over a cache of
/// `kv_type`, with one sink logit per query head when `sinks` are given.
pub(super) fn check_batched(kv_type: KvType, sinks: Option<&[f32]>) {
    let (hk, g, d, bs) = (2, 4, 64, 16);
    let n = LONG_FROM + SPAN + 50;
    let c = KvCacheConfig {
        n_layer: 2,
        n_head_kv: hk,
        head_dim: d,
        block_size: bs,
        n_blocks: 4 * n.div_ceil(bs) + 8,
        windows: LayerWindows::NONE,
        kv_type,
    };
    let mut cache = KvCache::new(c).unwrap();
    let mut rng = Rng(0xba7c);
    let tables: Vec<BlockTable> = (0..4)
        .map(|_| {
            let mut t = cache.new_table();
            fill(&mut cache, &mut t, n, &mut rng);
            t
        })
        .collect();
    let mut tokens = vec![];
    tokens.extend((LONG_FROM as u32 - 5..LONG_FROM as u32 + 9).map(|p| (0, p)));
    tokens.push((1, (LONG_FROM + SPAN + 3) as u32));
    tokens.push((2, 700));
    tokens.extend((n as u32 - 40..n as u32).map(|p| (3, p)));
    let nq = hk * g * d;
    let q = rng.vec(tokens.len() * nq, 1.0);
    let params = AttnParams {
        sinks,
        ..AttnParams::standard(d)
    };
    if let Some(s) = sinks {
        assert_eq!(s.len(), hk * g, "one sink per query head");
    }
    let mut first: Option<Vec<u32>> = None;
    for isa in isas() {
        let mut s = AttnScratch::new(&c);
        s.force_isa(isa);
        let want: Vec<f32> = tokens
            .iter()
            .enumerate()
            .flat_map(|(i, &(seq, pos))| {
                let mut o = vec![0.0; nq];
                let qt = &q[i * nq..][..nq];
                attend_with(
                    &cache,
                    1,
                    &tables[seq as usize],
                    pos as usize,
                    qt,
                    &mut o,
                    &mut s,
                    &params,
                )
                .unwrap();
                o
            })
            .collect();
        // With room for split-K partials, and with none (the decode token is tiled instead).
        for plan_tokens in [c.n_blocks * bs, 16] {
            let got = run_batch(
                isa,
                &cache,
                (&tables, &tokens),
                &q,
                plan_tokens,
                Some(&params),
            );
            assert_eq!(
                bits(&got),
                bits(&want),
                "{isa:?} {kv_type}, plan for {plan_tokens} positions"
            );
        }
        // A decode step's lone short token, split by KV head over the team of two.
        let i = tokens.iter().position(|t| *t == (2, 700)).unwrap();
        let got = run_batch(
            isa,
            &cache,
            (&tables, &tokens[i..=i]),
            &q[i * nq..][..nq],
            16,
            Some(&params),
        );
        assert_eq!(
            bits(&got),
            bits(&want[i * nq..][..nq]),
            "{isa:?} {kv_type}, one short token"
        );
        // Every kernel gives the scalar twin's bits (tiles of 16 tokens: up to 64 rows share
        // a K tile, the SIMD kernels' widened-once path).
        let first = first.get_or_insert_with(|| bits(&want));
        assert_eq!(
            &bits(&want),
            first,
            "{isa:?} {kv_type} against the scalar twin"
        );
    }
}

#[test]
fn exp_fast_is_accurate_and_every_width_gives_its_bits() {
    use crate::engine::attention::exp_fast::exp_fast;
    let mut xs: Vec<f32> = (0..200_000).map(|i| -(i as f32) * 0.000_45).collect();
    xs.extend([0.0, -0.0, -87.3, -87.299_99, -87.300_01, -1e-30, f32::MIN]);
    for &x in &xs {
        let want = f64::from(x).exp();
        let got = f64::from(exp_fast(x));
        assert!(
            (got - want).abs() <= 3e-7 * want || (x < -87.3 && got == 0.0),
            "exp_fast({x}) = {got}, e^x = {want}"
        );
    }
    assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_fast(f32::NAN), 0.0);
    xs.extend([f32::NEG_INFINITY, f32::NAN, 3.0]);
    while !xs.len().is_multiple_of(16) {
        xs.push(-1.0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::engine::attention::simd::{Avx2, Avx512, Simd};
        fn lanes<S: Simd>(xs: &[f32]) -> Vec<u32> {
            let mut out = vec![0f32; xs.len()];
            for (c, o) in xs.chunks(S::LANES).zip(out.chunks_mut(S::LANES)) {
                // SAFETY: the caller checked the CPU; each chunk holds LANES values.
                unsafe { S::store(o.as_mut_ptr(), S::exp_fast(S::load(c.as_ptr()))) };
            }
            bits(&out)
        }
        let want: Vec<u32> = xs.iter().map(|&x| exp_fast(x).to_bits()).collect();
        if AttnIsa::Avx512.supported() {
            assert_eq!(lanes::<Avx512>(&xs), want, "AVX-512");
        }
        if AttnIsa::Avx2.supported() {
            assert_eq!(lanes::<Avx2>(&xs), want, "AVX2");
        }
    }
}
