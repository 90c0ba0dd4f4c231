//! KV cache and attention tests: against an f64 reference, across kernels, and the invariances
//! the batch scheduler relies on.

use super::*;
use crate::engine::attention::AttnIsa;

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

fn cfg(n_head_kv: usize, head_dim: usize, block_size: usize, n_blocks: usize) -> KvCacheConfig {
    KvCacheConfig {
        n_layer: 2,
        n_head_kv,
        head_dim,
        block_size,
        n_blocks,
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
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (p, w) in e.iter().enumerate() {
            for i in 0..d {
                out[h * d + i] += w / sum * wr.v[p][kh * d + i];
            }
        }
    }
    out
}

fn run(isa: AttnIsa, cache: &KvCache, table: &BlockTable, pos: usize, q: &[f32]) -> Vec<f32> {
    let c = cache.config();
    let mut scratch = AttnScratch::new(c, q.len() / c.head_dim);
    scratch.force_isa(isa);
    assert_eq!(scratch.isa(), isa);
    let mut out = vec![f32::NAN; q.len()];
    cache
        .attend(1, table, pos, q, &mut out, &mut scratch)
        .unwrap();
    out
}

fn isas() -> Vec<AttnIsa> {
    [AttnIsa::Scalar, AttnIsa::Avx2, AttnIsa::Avx512]
        .into_iter()
        .filter(|i| i.supported())
        .collect()
}

/// (n_head_kv, group, head_dim, block_size): the default model's shape first, then shapes the
/// SIMD kernels cover differently or not at all.
const SHAPES: [(usize, usize, usize, usize); 5] = [
    (3, 3, 64, 16),
    (2, 4, 128, 32),
    (1, 1, 64, 16),
    (2, 2, 24, 5),
    (4, 8, 64, 16),
];

#[test]
fn attend_matches_f64_reference() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs, 64);
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

#[test]
fn simd_attention_is_bit_identical_to_scalar() {
    let mut rng = Rng(0x5eed);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs, 64);
        let mut cache = KvCache::new(c).unwrap();
        let mut table = cache.new_table();
        fill(&mut cache, &mut table, 300, &mut rng);
        for pos in [0, 1, bs - 1, bs + 1, 99, 299] {
            let q = rng.vec(hk * g * d, 1.0);
            let want = bits(&run(AttnIsa::Scalar, &cache, &table, pos, &q));
            for isa in isas() {
                let got = bits(&run(isa, &cache, &table, pos, &q));
                assert_eq!(got, want, "{isa:?} shape {:?} pos {pos}", (hk, g, d, bs));
            }
        }
    }
}

#[test]
fn result_ignores_physical_block_ids() {
    let mut rng = Rng(7);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs, 64);
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

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn later_positions_do_not_change_earlier_results() {
    // Prefill-chunk invariance: attending at `pos` reads only 0..=pos.
    let mut rng = Rng(11);
    for (hk, g, d, bs) in SHAPES {
        let c = cfg(hk, d, bs, 64);
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
fn write_stores_rounded_values() {
    let c = cfg(2, 4, 4, 4);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(6).unwrap();
    let k: Vec<f32> = (0..8).map(|i| i as f32 + 0.1).collect();
    let v: Vec<f32> = (0..8).map(|i| -(i as f32)).collect();
    cache.write(1, &t, 5, &k, &v).unwrap();
    let block = t.blocks()[1] as usize;
    let (d, bs, hk) = (4, 4, 2);
    for h in 0..hk {
        let tile = (block * hk + h) * bs * d;
        for i in 0..d {
            let kk = cache.layer_k(1)[tile + i * bs + 1];
            let vv = cache.layer_v(1)[tile + d + i];
            assert_eq!(kk, f16::from_f32(k[h * d + i]));
            assert_eq!(vv, f16::from_f32(v[h * d + i]));
        }
    }
    assert!(cache.layer_k(0).iter().all(|x| *x == f16::ZERO));
}

#[test]
fn bad_inputs_are_named_errors() {
    let c = cfg(3, 64, 16, 4);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(16).unwrap();
    let row = vec![0.0; 192];
    let mut s = AttnScratch::new(&c, 9);
    let q = vec![0.0; 576];
    let mut out = vec![0.0; 576];
    assert!(matches!(
        cache.write(2, &t, 0, &row, &row),
        Err(KvCacheError::Layer { .. })
    ));
    assert!(matches!(
        cache.write(0, &t, 16, &row, &row),
        Err(KvCacheError::Position {
            pos: 16,
            capacity: 16
        })
    ));
    assert!(matches!(
        cache.write(0, &t, 0, &row[..10], &row),
        Err(KvCacheError::Shape { .. })
    ));
    let other = KvCache::new(c).unwrap();
    let mut foreign = other.new_table();
    foreign.reserve(1).unwrap();
    assert_eq!(
        cache.attend(0, &foreign, 0, &q, &mut out, &mut s),
        Err(KvCacheError::ForeignTable)
    );
    assert!(matches!(
        cache.attend(0, &t, 0, &q[..100], &mut out, &mut s),
        Err(KvCacheError::Shape { .. })
    ));
    assert!(matches!(
        cache.attend(0, &t, 0, &q, &mut out[..64], &mut s),
        Err(KvCacheError::Shape { .. })
    ));
    let mut small = AttnScratch::new(&c, 3);
    assert!(matches!(
        cache.attend(0, &t, 0, &q, &mut out, &mut small),
        Err(KvCacheError::Shape { .. })
    ));
    cache.attend(0, &t, 15, &q, &mut out, &mut s).unwrap();
}

#[test]
fn shared_blocks_are_read_only() {
    let mut cache = KvCache::new(cfg(1, 8, 4, 5)).unwrap();
    let mut a = cache.new_table();
    a.reserve(6).unwrap();
    let row = vec![1.0; 8];
    cache.write(0, &a, 5, &row, &row).unwrap();
    let mut b = a.fork();
    assert!(matches!(
        cache.write(0, &b, 6, &row, &row),
        Err(KvCacheError::SharedBlock { refs: 2, .. })
    ));
    // A block only the fork holds is writable.
    b.reserve(9).unwrap();
    cache.write(0, &b, 8, &row, &row).unwrap();
    drop(a);
    cache.write(0, &b, 6, &row, &row).unwrap();
}

#[test]
fn out_of_blocks_leaks_nothing() {
    let cache = KvCache::new(cfg(1, 8, 4, 5)).unwrap();
    let mut a = cache.new_table();
    a.reserve(12).unwrap();
    let mut b = a.fork();
    assert_eq!(cache.free_blocks(), 2);
    assert!(matches!(
        b.reserve(40),
        Err(KvCacheError::OutOfBlocks { needed: 7, free: 2 })
    ));
    assert_eq!(cache.free_blocks(), 2);
    assert_eq!(b.capacity(), 12);
    drop(a);
    assert_eq!(cache.free_blocks(), 2);
    drop(b);
    assert_eq!(cache.free_blocks(), cache.total_blocks());
}

#[test]
fn config_sizes() {
    // The default model: 30 layers, 3 KV heads of 64: 22.5 KiB per position.
    let c = KvCacheConfig::from_bytes(30, 3, 64, 16, 1 << 30);
    assert_eq!(c.bytes_per_block(), 16 * 23040);
    assert_eq!(c.n_blocks, (1 << 30) / (16 * 23040));
    assert!(c.bytes() <= 1 << 30);
    assert!(matches!(
        KvCache::new(KvCacheConfig::from_bytes(30, 3, 64, 16, 1000)),
        Err(KvCacheError::InvalidConfig(_))
    ));
    assert!(KvCache::new(cfg(0, 64, 16, 4)).is_err());
    assert!(KvCache::new(cfg(1, 64, 0, 4)).is_err());
    assert!(KvCache::new(cfg(1, 4096, 16, 4)).is_err());
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<KvCache>();
    check::<BlockTable>();
    check::<BlockAllocator>();
    check::<AttnScratch>();
}
