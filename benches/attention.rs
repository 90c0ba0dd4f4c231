//! Decode attention over the paged KV cache for the default model's shape (9 query heads,
//! 3 KV heads of 64, blocks of 16): one query token against 128..2048 cached positions.
//!
//! `hot`: one layer, so the K/V stay in L2. `30-layer`: cycles through 30 layers like a forward
//! step does, so the K/V come from L3 (or DRAM) as in real decoding.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::engine::kv_cache::{attention_isa, AttnScratch, KvCache, KvCacheConfig};
use std::hint::black_box;

const N_HEAD: usize = 9;
const N_HEAD_KV: usize = 3;
const HEAD_DIM: usize = 64;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32)
        .map(|x| x / (1u32 << 24) as f32 - 0.5)
        .collect()
}

fn bench(c: &mut Criterion) {
    eprintln!("attention kernel: {}", attention_isa());
    let mut group = c.benchmark_group("attend");
    for n_layer in [1usize, 30] {
        let cfg = KvCacheConfig {
            n_layer,
            n_head_kv: N_HEAD_KV,
            head_dim: HEAD_DIM,
            block_size: 16,
            n_blocks: 2048 / 16,
        };
        let mut cache = KvCache::new(cfg).expect("cache");
        let mut table = cache.new_table();
        table.reserve(2048).expect("blocks");
        let row = N_HEAD_KV * HEAD_DIM;
        for layer in 0..n_layer {
            for pos in 0..2048 {
                let k = values(row, (layer * 4096 + pos) as u32);
                let v = values(row, (layer * 4096 + pos) as u32 ^ 0x5555);
                cache.write(layer, &table, pos, &k, &v).expect("write");
            }
        }
        let q = values(N_HEAD * HEAD_DIM, 99);
        let mut out = vec![0.0f32; N_HEAD * HEAD_DIM];
        let mut scratch = AttnScratch::new(&cfg, N_HEAD);
        let label = if n_layer == 1 { "hot" } else { "30-layer" };
        for n_pos in [128usize, 512, 1024, 2048] {
            group.throughput(Throughput::Elements(n_pos as u64));
            let mut layer = 0;
            group.bench_with_input(BenchmarkId::new(label, n_pos), &n_pos, |b, &n| {
                b.iter(|| {
                    layer = (layer + 1) % n_layer;
                    cache
                        .attend(layer, &table, n - 1, black_box(&q), &mut out, &mut scratch)
                        .expect("attend");
                    black_box(&out);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
