//! Attention tests: against an f64 reference, the AVX-512 and AVX2 kernels against their scalar
//! twin bit for bit, which kernel runs (and that it follows `KILN_ISA`), and the invariances the
//! batch scheduler relies on.

use super::*;
use crate::engine::kv_cache::DEFAULT_BLOCK_SIZE;
use crate::engine::kv_cache::{KvType, LayerWindows};

/// Small deterministic generator (xorshift64*), values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        x as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * amp).collect()
    }
}

/// A two-layer cache with room for 320 positions of one sequence plus some filler blocks.
fn cfg(n_head_kv: usize, head_dim: usize, block_size: usize) -> KvCacheConfig {
    cfg_for(n_head_kv, head_dim, block_size, 320)
}

/// A two-layer cache with room for `n_pos` positions of one sequence plus some filler blocks.
fn cfg_for(n_head_kv: usize, head_dim: usize, block_size: usize, n_pos: usize) -> KvCacheConfig {
    KvCacheConfig {
        n_layer: 2,
        n_head_kv,
        head_dim,
        block_size,
        n_blocks: 64.max(n_pos.div_ceil(block_size) + 16),
        windows: LayerWindows::NONE,
        kv_type: KvType::F16,
    }
}

/// K/V rows written so far, per layer 1: `[pos][n_head_kv * head_dim]`, as f16-rounded f64.
struct Written {
    k: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

/// Writes `n` random positions to layer 1 of `table` (layer 0 gets different noise).
fn fill(cache: &mut KvCache, table: &mut BlockTable, n: usize, rng: &mut Rng) -> Written {
    let c = *cache.config();
    let w = c.n_head_kv * c.head_dim;
    table.reserve(n).unwrap();
    let mut out = Written {
        k: vec![],
        v: vec![],
    };
    let round = |x: &[f32]| -> Vec<f64> { x.iter().map(|&x| f16::from_f32(x).to_f64()).collect() };
    for pos in 0..n {
        // Large K amplitude gives peaked softmaxes, exercising the running-max rescale.
        let (k, v) = (rng.vec(w, 4.0), rng.vec(w, 1.0));
        cache.write(1, table, pos, &k, &v).unwrap();
        let (k0, v0) = (rng.vec(w, 1.0), rng.vec(w, 1.0));
        cache.write(0, table, pos, &k0, &v0).unwrap();
        out.k.push(round(&k));
        out.v.push(round(&v));
    }
    out
}

/// Naive softmax attention in f64 over positions `0..n_pos`.
fn reference(c: &KvCacheConfig, wr: &Written, n_pos: usize, q: &[f32]) -> Vec<f64> {
    reference_with_sinks(c, wr, n_pos, q, None)
}

/// [`reference`] with, when given, one sink logit per query head joining each head's softmax
/// denominator as `e^sink` (gpt-oss).
fn reference_with_sinks(
    c: &KvCacheConfig,
    wr: &Written,
    n_pos: usize,
    q: &[f32],
    sinks: Option<&[f32]>,
) -> Vec<f64> {
    let d = c.head_dim;
    let n_head = q.len() / d;
    let group = n_head / c.n_head_kv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; q.len()];
    for h in 0..n_head {
        let kh = h / group;
        let qh = &q[h * d..][..d];
        let scores: Vec<f64> = (0..n_pos)
            .map(|p| {
                let kr = &wr.k[p][kh * d..][..d];
                qh.iter().zip(kr).map(|(&a, &b)| a as f64 * b).sum::<f64>() * scale
            })
            .collect();
        let sink = sinks.map(|s| f64::from(s[h]));
        let m = scores
            .iter()
            .copied()
            .fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
        for (p, w) in e.iter().enumerate() {
            for i in 0..d {
                out[h * d + i] += w / sum * wr.v[p][kh * d + i];
            }
        }
    }
    out
}

/// Attention of layer 1 at `pos` with the kernel `isa` resolves to for this cache (asserted to
/// be `isa` itself when the CPU and the shape allow it).
fn run(isa: AttnIsa, cache: &KvCache, table: &BlockTable, pos: usize, q: &[f32]) -> Vec<f32> {
    let c = cache.config();
    let mut scratch = AttnScratch::new(c);
    scratch.force_isa(isa);
    if isa.supported() && isa.covers(c.head_dim, c.block_size) {
        assert_eq!(scratch.isa(), isa);
    } else {
        assert_eq!(scratch.isa(), AttnIsa::Scalar);
    }
    let mut out = vec![f32::NAN; q.len()];
    attend(cache, 1, table, pos, q, &mut out, &mut scratch).unwrap();
    out
}

/// The kernels this CPU runs; on x86-64 one it cannot run is reported as a skip.
fn isas() -> Vec<AttnIsa> {
    [AttnIsa::Scalar, AttnIsa::Avx2, AttnIsa::Avx512]
        .into_iter()
        .filter(|&i| runs(i))
        .collect()
}

/// Whether this CPU runs kernel `isa`; on x86-64 a kernel it cannot run is reported as a skip
/// (elsewhere only the scalar kernel exists).
fn runs(isa: AttnIsa) -> bool {
    let ok = isa.supported();
    if !ok && cfg!(target_arch = "x86_64") {
        crate::test_skip::skip(&format!("this CPU cannot run the {isa:?} attention kernel"));
    }
    ok
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|x| x.to_bits()).collect()
}

/// (n_head_kv, group, head_dim, block_size): the default model's shape first, then shapes that
/// exercise every head count and accumulator width of the SIMD kernels (groups of 1..=4 heads
/// per AVX-512 pass and 1..=3 per AVX2 pass, 1..=4 at head_dim 64, in groups of up to 8;
/// head_dim 64, 96 (its last 32
/// values summed in f64), 128, 192, 256, and 512 with gemma4-E2B's 8 query heads on one KV
/// head, whose accumulators spill to f16 scratch),
/// then a block size only AVX2 and scalar cover (8), then shapes only the scalar twin covers
/// (head_dim 24, blocks of 5 or of 1).
const SHAPES: [(usize, usize, usize, usize); 13] = [
    (3, 3, 64, 16),
    (2, 4, 128, 32),
    (1, 1, 64, 16),
    (4, 8, 64, 16),
    (1, 5, 64, 16),
    (2, 6, 192, 16),
    (1, 5, 256, 32),
    (1, 8, 512, 16),
    (2, 5, 96, 16),
    (2, 5, 128, 8),
    (2, 2, 24, 5),
    (2, 2, 64, 1),
    (1, 3, 64, 1),
];

#[test]
fn attend_matches_f64_reference() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        let wr = fill(&mut cache, &mut table, 300, &mut rng);
        for pos in [0, 1, bs - 1, bs, bs + 1, 2 * bs + 3, 99, 299] {
            let q = rng.vec(hk * g * d, 1.0);
            let want = reference(&c, &wr, pos + 1, &q);
            for isa in isas() {
                let got = run(isa, &cache, &table, pos, &q);
                // llama.cpp's order keeps the weighted V sum in f16 (and rounds q to f16):
                // ~1e-3 of the output's scale, by design (see attention/ggml_order.rs).
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

/// Compares `isa` with the scalar twin bit for bit on every shape of `shapes` it covers, at
/// positions around block edges (partial blocks included) up to `n_pos - 1`; returns how many
/// shapes were compared.
fn check_bit_identical(
    isa: AttnIsa,
    shapes: &[(usize, usize, usize, usize)],
    n_pos: usize,
) -> usize {
    let mut rng = Rng(0x5eed ^ n_pos as u64);
    let mut compared = 0;
    for &(hk, g, d, bs) in shapes {
        if !isa.covers(d, bs) {
            continue;
        }
        let c = cfg_for(hk, d, bs, n_pos);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        fill(&mut cache, &mut table, n_pos, &mut rng);
        let last = n_pos - 1;
        let positions = [
            0,
            1,
            bs - 1,
            bs,
            bs + 1,
            2 * bs + 3,
            99,
            last / 2,
            last - bs,
            last,
        ];
        for pos in positions.into_iter().filter(|&p| p < n_pos) {
            let q = rng.vec(hk * g * d, 1.0);
            let scalar = bits(&run(AttnIsa::Scalar, &cache, &table, pos, &q));
            let simd = bits(&run(isa, &cache, &table, pos, &q));
            assert_eq!(simd, scalar, "{isa:?} shape {:?} pos {pos}", (hk, g, d, bs));
        }
        compared += 1;
    }
    compared
}

#[test]
fn avx512_kernel_is_bit_identical_to_its_scalar_twin() {
    if !runs(AttnIsa::Avx512) {
        return;
    }
    // Every shape except the last four (blocks of 8, head_dim 24, blocks of 1) is the
    // AVX-512 kernel's.
    assert_eq!(
        check_bit_identical(AttnIsa::Avx512, &SHAPES, 300),
        SHAPES.len() - 4
    );
}

#[test]
fn avx2_kernel_is_bit_identical_to_its_scalar_twin() {
    if !runs(AttnIsa::Avx2) {
        return;
    }
    // Every shape except the last three (head_dim 24, blocks of 1) is the AVX2 kernel's.
    assert_eq!(
        check_bit_identical(AttnIsa::Avx2, &SHAPES, 300),
        SHAPES.len() - 3
    );
}

#[test]
fn simd_kernels_are_bit_identical_over_long_contexts() {
    // Past 900 positions the running max has settled and most exps are tiny: the regime of
    // the long golden prompt. The default model's shape, a 128-wide head and 8-position blocks.
    let shapes = [
        (3, 3, 64, 16),
        (2, 4, 128, 32),
        (1, 3, 64, 8),
        (2, 4, 64, 8),
        (1, 4, 96, 16),
        (1, 5, 512, 16),
    ];
    for isa in [AttnIsa::Avx512, AttnIsa::Avx2] {
        if runs(isa) {
            let want = shapes.iter().filter(|s| isa.covers(s.2, s.3)).count();
            assert_eq!(check_bit_identical(isa, &shapes, 960), want, "{isa:?}");
        }
    }
}

#[test]
fn kernel_follows_the_kernel_isa() {
    use crate::kernels::isa::Isa;
    assert_eq!(AttnIsa::of_kernel_isa(Isa::Avx512), AttnIsa::Avx512);
    assert_eq!(AttnIsa::of_kernel_isa(Isa::Avx2), AttnIsa::Avx2);
    assert_eq!(AttnIsa::of_kernel_isa(Isa::AvxVnni), AttnIsa::Avx2);
    assert_eq!(AttnIsa::of_kernel_isa(Isa::Scalar), AttnIsa::Scalar);
    assert_eq!(AttnIsa::of_kernel_isa(Isa::Neon), AttnIsa::Scalar);
    // (kernel ISA, head_dim, block_size) -> kernel: a SIMD ISA falls back to the next narrower
    // kernel covering the shape, never to a wider one.
    let table = [
        (Isa::Avx512, 64, 16, AttnIsa::Avx512),
        (Isa::Avx512, 256, 32, AttnIsa::Avx512),
        (Isa::Avx512, 512, 16, AttnIsa::Avx512),
        (Isa::Avx512, 512, 8, AttnIsa::Avx2),
        (Isa::Avx512, 64, 8, AttnIsa::Avx2),
        (Isa::Avx512, 128, 24, AttnIsa::Avx2),
        (Isa::Avx512, 24, 16, AttnIsa::Scalar),
        (Isa::Avx512, 64, 1, AttnIsa::Scalar),
        (Isa::Avx512, 320, 16, AttnIsa::Scalar),
        (Isa::Avx2, 64, 16, AttnIsa::Avx2),
        (Isa::Avx2, 192, 8, AttnIsa::Avx2),
        (Isa::Avx2, 512, 16, AttnIsa::Avx2),
        (Isa::Avx2, 384, 16, AttnIsa::Scalar),
        (Isa::Avx2, 64, 5, AttnIsa::Scalar),
        (Isa::Avx2, 32, 16, AttnIsa::Scalar),
        (Isa::Scalar, 64, 16, AttnIsa::Scalar),
        (Isa::Neon, 64, 16, AttnIsa::Scalar),
    ];
    for (isa, d, bs, want) in table {
        assert_eq!(
            AttnIsa::for_kernel_isa(isa, d, bs),
            want,
            "{isa} ({d}, {bs})"
        );
    }
}

#[test]
fn selected_kernel_runs_by_default() {
    // The kernel instruction set here is `KILN_ISA` (make isa-matrix sets it) or the best the
    // CPU has; the kernel is read off the CPU features, not through `AttnIsa::supported`, so a
    // selection that stops picking a SIMD kernel fails this test.
    use crate::kernels::isa::Isa;
    #[cfg(target_arch = "x86_64")]
    let (avx2, avx512) = {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        (avx2, avx2 && is_x86_feature_detected!("avx512f"))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (avx2, avx512) = (false, false);
    let want = match crate::kernels::isa() {
        Isa::Avx512 if avx512 => AttnIsa::Avx512,
        Isa::Avx2 | Isa::AvxVnni if avx2 => AttnIsa::Avx2,
        _ => AttnIsa::Scalar,
    };
    if avx512 && Isa::from_env() == Ok(None) {
        assert_eq!(
            want,
            AttnIsa::Avx512,
            "unforced, an AVX-512 CPU runs AVX-512"
        );
    }
    assert_eq!(AttnIsa::selected(), want);
    assert_eq!(attention_isa(), want.name());
    // The default model (3 KV heads of 64, 9 query heads) with the engine's block size, and a
    // 128-wide head (llama-family models of 1B and up): the default scratch runs the selected
    // kernel, bit-identical to a scratch forced to the scalar twin.
    let mut rng = Rng(3);
    for (hk, g, d) in [(3, 3, 64), (8, 4, 128)] {
        let c = cfg(hk, d, DEFAULT_BLOCK_SIZE);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        fill(&mut cache, &mut table, 200, &mut rng);
        let mut fast = AttnScratch::new(&c);
        assert_eq!(fast.isa(), want, "head_dim {d}");
        let mut scalar = AttnScratch::new(&c);
        scalar.force_isa(AttnIsa::Scalar);
        assert_eq!(scalar.isa(), AttnIsa::Scalar);
        for pos in [0, 17, 199] {
            let q = rng.vec(hk * g * d, 1.0);
            let (mut a, mut b) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            attend(&cache, 1, &table, pos, &q, &mut a, &mut fast).unwrap();
            attend(&cache, 1, &table, pos, &q, &mut b, &mut scalar).unwrap();
            assert_eq!(bits(&a), bits(&b), "head_dim {d} pos {pos}");
        }
    }
}

#[test]
fn uncovered_shapes_run_the_scalar_twin() {
    for (d, bs) in [(24, 5), (64, 1), (64, 8), (320, 16), (32, 16)] {
        assert!(!AttnIsa::Avx512.covers(d, bs), "({d}, {bs})");
        let mut s = AttnScratch::new(&cfg(1, d, bs));
        s.force_isa(AttnIsa::Avx512);
        assert_eq!(s.isa(), AttnIsa::Scalar);
    }
    for (d, bs) in [(24, 5), (64, 1), (64, 12), (320, 16), (32, 16)] {
        assert!(!AttnIsa::Avx2.covers(d, bs), "({d}, {bs})");
        let mut s = AttnScratch::new(&cfg(1, d, bs));
        assert_eq!(s.isa(), AttnIsa::Scalar);
        s.force_isa(AttnIsa::Avx2);
        assert_eq!(s.isa(), AttnIsa::Scalar);
    }
    for (d, bs) in [
        (64, 16),
        (96, 16),
        (128, 32),
        (192, 16),
        (256, 48),
        (512, 16),
    ] {
        assert!(AttnIsa::Avx512.covers(d, bs), "({d}, {bs})");
    }
    for (d, bs) in [(64, 8), (96, 8), (128, 16), (192, 24), (256, 48), (512, 8)] {
        assert!(AttnIsa::Avx2.covers(d, bs), "({d}, {bs})");
    }
}

#[test]
fn result_ignores_physical_block_ids() {
    let mut rng = Rng(7);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs);
        let mut cache = KvCache::new(c).unwrap();
        let n = 6 * bs + 2;
        // Table A takes consecutive blocks; table B interleaves with filler tables, some of which
        // are dropped, so its physical ids are scattered and in a different order.
        let mut a = cache.new_table();
        a.reserve(n).unwrap();
        let mut keep = vec![];
        let mut b = cache.new_table();
        for i in 0..n.div_ceil(bs) {
            let mut filler = cache.new_table();
            filler.reserve(bs * (1 + i % 2)).unwrap();
            if i % 3 == 0 {
                keep.push(filler);
            }
            b.reserve((i + 1) * bs).unwrap();
        }
        assert_ne!(a.blocks(), b.blocks());
        let seed = rng.0;
        let wa = fill(&mut cache, &mut a, n, &mut Rng(seed));
        let wb = fill(&mut cache, &mut b, n, &mut Rng(seed));
        assert_eq!(wa.k, wb.k);
        for pos in [0, bs, n - 1] {
            let q = rng.vec(hk * g * d, 1.0);
            for isa in isas() {
                let ra = run(isa, &cache, &a, pos, &q);
                let rb = run(isa, &cache, &b, pos, &q);
                assert_eq!(bits(&ra), bits(&rb), "{isa:?} pos {pos}");
            }
        }
    }
}

#[test]
fn later_positions_do_not_change_earlier_results() {
    // Prefill-chunk invariance: attending at `pos` reads only 0..=pos.
    let mut rng = Rng(11);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs);
        let mut cache = KvCache::new(c).unwrap();
        let mut t = cache.new_table();
        let seed = rng.0;
        let mut data = Rng(seed);
        fill(&mut cache, &mut t, bs + 3, &mut data);
        let pos = bs + 1;
        let q = rng.vec(hk * g * d, 1.0);
        let before: Vec<_> = isas()
            .into_iter()
            .map(|i| run(i, &cache, &t, pos, &q))
            .collect();
        // Overwrite everything after `pos` and grow the sequence by two blocks.
        let mut t2 = cache.new_table();
        drop(std::mem::replace(&mut t, cache.new_table()));
        let mut data = Rng(seed);
        let w = fill(&mut cache, &mut t2, 3 * bs + 1, &mut data);
        assert_eq!(w.k.len(), 3 * bs + 1);
        let after: Vec<_> = isas()
            .into_iter()
            .map(|i| run(i, &cache, &t2, pos, &q))
            .collect();
        for (x, y) in before.iter().zip(&after) {
            assert_eq!(bits(x), bits(y));
        }
    }
}

#[test]
fn bad_inputs_are_named_errors() {
    let c = KvCacheConfig {
        n_layer: 2,
        n_head_kv: 3,
        head_dim: 64,
        block_size: 16,
        n_blocks: 4,
        windows: LayerWindows::NONE,
        kv_type: KvType::F16,
    };
    let cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(16).unwrap();
    let mut s = AttnScratch::new(&c);
    let q = vec![0.0; 576];
    let mut out = vec![0.0; 576];
    let other = KvCache::new(c).unwrap();
    let mut foreign = other.new_table();
    foreign.reserve(1).unwrap();
    assert_eq!(
        attend(&cache, 0, &foreign, 0, &q, &mut out, &mut s),
        Err(KvCacheError::ForeignTable)
    );
    assert!(matches!(
        attend(&cache, 2, &t, 0, &q, &mut out, &mut s),
        Err(KvCacheError::Layer { layer: 2, .. })
    ));
    assert!(matches!(
        attend(&cache, 0, &t, 16, &q, &mut out, &mut s),
        Err(KvCacheError::Position { pos: 16, .. })
    ));
    assert!(matches!(
        attend(&cache, 0, &t, 0, &q[..100], &mut out, &mut s),
        Err(KvCacheError::Shape { .. })
    ));
    assert!(matches!(
        attend(&cache, 0, &t, 0, &q, &mut out[..64], &mut s),
        Err(KvCacheError::Shape { .. })
    ));
    for (d, bs) in [(32, 16), (64, 8)] {
        let mut other = AttnScratch::new(&KvCacheConfig {
            head_dim: d,
            block_size: bs,
            ..c
        });
        assert!(matches!(
            attend(&cache, 0, &t, 0, &q, &mut out, &mut other),
            Err(KvCacheError::Shape { .. })
        ));
    }
    attend(&cache, 0, &t, 15, &q, &mut out, &mut s).unwrap();
}

#[test]
fn scratch_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<AttnScratch>();
}

mod long;
mod q8;
mod sinks;
