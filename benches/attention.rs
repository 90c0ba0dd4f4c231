//! Decode attention over the paged KV cache for the default model's shape (9 query heads,
//! 3 KV heads of 64, blocks of 16), and the same heads at 128 values (`-h128`, the head size of
//! most larger models): one query token against 128..2048 cached positions; and
//! the long-context order (`long/`) for Llama-3.2-1B's shape (32 query heads, 8 KV heads of
//! 64) at 4096 and 16384 positions, one layer, one thread, over an f16 and a Q8_0 cache.
//!
//! `hot`: one layer, so the K/V stay in L2. `30-layer`: cycles through 30 layers like a forward
//! step does, so the K/V come from L3 (or DRAM) as in real decoding. Each is run with every
//! kernel this CPU has: the AVX-512 one (`avx512`, where supported) and its bit-identical scalar
//! twin (`scalar`), the reference for the speed ratio. Both compute llama.cpp's order.
//!
//! Time is this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so other processes sharing the
//! cores do not inflate it (cache interference from them still can).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::engine::attention::{attend, AttnIsa, AttnScratch};
use kiln::engine::kv_cache::{KvCache, KvCacheConfig, KvType, LayerWindows};
use std::hint::black_box;
use std::time::{Duration, Instant};

const N_HEAD: usize = 9;
const N_HEAD_KV: usize = 3;
const HEAD_DIM: usize = 64;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32)
        .map(|x| x / (1u32 << 24) as f32 - 0.5)
        .collect()
}

/// CPU time this thread has run, if the OS reports it.
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Runs `f` `iters` times; returns the CPU time (or wall time) it took.
fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let (cpu0, wall0) = (thread_cpu_time(), Instant::now());
    for _ in 0..iters {
        f();
    }
    match (cpu0, thread_cpu_time()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => wall0.elapsed(),
    }
}

fn bench(c: &mut Criterion) {
    eprintln!("attention kernel: {}", AttnIsa::selected().name());
    let isas: Vec<AttnIsa> = [AttnIsa::Avx512, AttnIsa::Avx2, AttnIsa::Scalar]
        .into_iter()
        .filter(|isa| isa.supported())
        .collect();
    let mut group = c.benchmark_group("attend");
    for (head_dim, n_layer) in [(HEAD_DIM, 1usize), (HEAD_DIM, 30), (128, 1), (128, 30)] {
        let cfg = KvCacheConfig {
            n_layer,
            n_head_kv: N_HEAD_KV,
            head_dim,
            block_size: 16,
            n_blocks: 2048 / 16,
            windows: LayerWindows::NONE,
            kv_type: KvType::F16,
        };
        let mut cache = KvCache::new(cfg).expect("cache");
        let mut table = cache.new_table();
        table.reserve(2048).expect("blocks");
        let row = N_HEAD_KV * head_dim;
        for layer in 0..n_layer {
            for pos in 0..2048 {
                let k = values(row, (layer * 4096 + pos) as u32);
                let v = values(row, (layer * 4096 + pos) as u32 ^ 0x5555);
                cache.write(layer, &table, pos, &k, &v).expect("write");
            }
        }
        let q = values(N_HEAD * head_dim, 99);
        let mut out = vec![0.0f32; N_HEAD * head_dim];
        let place = if n_layer == 1 { "hot" } else { "30-layer" };
        let place = if head_dim == HEAD_DIM {
            place.to_string()
        } else {
            format!("{place}-h{head_dim}")
        };
        for &isa in &isas {
            let mut scratch = AttnScratch::new(&cfg);
            scratch.force_isa(isa);
            assert_eq!(
                scratch.isa(),
                isa,
                "the default model's shape runs every kernel"
            );
            for n_pos in [128usize, 512, 1024, 2048] {
                group.throughput(Throughput::Elements(n_pos as u64));
                let id = BenchmarkId::new(format!("{place}/{}", isa.name()), n_pos);
                let mut layer = 0;
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        timed(iters, || {
                            layer = (layer + 1) % n_layer;
                            attend(
                                &cache,
                                layer,
                                &table,
                                n_pos - 1,
                                black_box(&q),
                                &mut out,
                                &mut scratch,
                            )
                            .expect("attend");
                            black_box(&out);
                        })
                    })
                });
            }
        }
    }
    group.finish();

    // The long-context order: Llama-3.2-1B's attention shape, one layer, over an f16 cache
    // and a Q8_0 one (`1b-q8_0/*`: the kernels read the i8 values and scales directly).
    let mut group = c.benchmark_group("attend_long");
    group.sample_size(10);
    let (n_head, n_head_kv) = (32, 8);
    let n_max = 16384;
    for kv_type in [KvType::F16, KvType::Q8_0] {
        let cfg = KvCacheConfig {
            n_layer: 1,
            n_head_kv,
            head_dim: HEAD_DIM,
            block_size: 16,
            n_blocks: n_max / 16,
            windows: LayerWindows::NONE,
            kv_type,
        };
        let mut cache = KvCache::new(cfg).expect("cache");
        let mut table = cache.new_table();
        table.reserve(n_max).expect("blocks");
        let row = n_head_kv * HEAD_DIM;
        for pos in 0..n_max {
            let k = values(row, pos as u32);
            let v = values(row, pos as u32 ^ 0x5555);
            cache.write(0, &table, pos, &k, &v).expect("write");
        }
        let q = values(n_head * HEAD_DIM, 7);
        let mut out = vec![0.0f32; n_head * HEAD_DIM];
        let shape = match kv_type {
            KvType::F16 => "1b".to_string(),
            t => format!("1b-{t}"),
        };
        for &isa in &isas {
            let mut scratch = AttnScratch::new(&cfg);
            scratch.force_isa(isa);
            assert_eq!(
                scratch.long_isa(),
                isa,
                "the 1B shape runs every long kernel"
            );
            let sizes: &[usize] = if isa == AttnIsa::Scalar {
                &[4096]
            } else {
                &[4096, 16384]
            };
            for &n_pos in sizes {
                group.throughput(Throughput::Elements(n_pos as u64));
                let id = BenchmarkId::new(format!("{shape}/{}", isa.name()), n_pos);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        timed(iters, || {
                            attend(
                                &cache,
                                0,
                                &table,
                                n_pos - 1,
                                black_box(&q),
                                &mut out,
                                &mut scratch,
                            )
                            .expect("attend");
                            black_box(&out);
                        })
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
