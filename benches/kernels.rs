//! Kernel throughput per dtype and ISA: vec_dot (k = 576) and gemm at the SmolLM2 FFN shape
//! (n_rows = 1536, k = 576) for n_tok = 1, 4, 16, 64. Throughput is in multiply-adds
//! ("elements" = n_rows * k * n_tok); weights/s = elements / n_tok.
//! `KILN_BENCH_ISA=avx512` restricts to one ISA; `KILN_BENCH_TYPES=Q4_1,Q8_0` to some types.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::kernels::{kernels_for, DType, Isa};
use std::time::Duration;

const K: usize = 576;
const N_ROWS: usize = 1536;

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn quant(dt: DType, x: &[f32]) -> Vec<u8> {
    let k = kernels_for(dt, Isa::Scalar).expect("kernels");
    let mut y = vec![0u8; dt.bytes_for(x.len() as u64).expect("blocks") as usize];
    (k.from_f32.expect("quantizer"))(x, &mut y);
    y
}

fn isas() -> Vec<Isa> {
    match std::env::var("KILN_BENCH_ISA") {
        Ok(s) => vec![Isa::parse(&s).expect("KILN_BENCH_ISA")],
        Err(_) => Isa::all_supported().collect(),
    }
}

fn types() -> Vec<DType> {
    match std::env::var("KILN_BENCH_TYPES") {
        Ok(s) => s
            .split(',')
            .map(|t| DType::from_name(t).expect("dtype"))
            .collect(),
        Err(_) => vec![
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
            DType::F16,
        ],
    }
}

fn bench(c: &mut Criterion) {
    for dt in types() {
        let sk = kernels_for(dt, Isa::Scalar).expect("kernels");
        let w = quant(dt, &data(N_ROWS * K, 1));
        let a = quant(sk.vec_dot_type, &data(64 * K, 7));
        let wr = w.len() / N_ROWS;
        let ar = a.len() / 64;
        let mut g = c.benchmark_group(format!("{dt}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1200))
            .sample_size(10);
        for isa in isas() {
            let k = kernels_for(dt, isa).expect("kernels");
            g.throughput(Throughput::Elements(K as u64));
            g.bench_function(BenchmarkId::new(format!("vec_dot/{isa}"), K), |b| {
                b.iter(|| (k.vec_dot)(K, black_box(&w[..wr]), black_box(&a[..ar])))
            });
            for n_tok in [1usize, 4, 16, 64] {
                let mut out = vec![0f32; n_tok * N_ROWS];
                g.throughput(Throughput::Elements((N_ROWS * K * n_tok) as u64));
                g.bench_function(BenchmarkId::new(format!("gemm/{isa}"), n_tok), |b| {
                    b.iter(|| {
                        (k.gemm)(
                            K,
                            black_box(&w),
                            N_ROWS,
                            black_box(&a[..n_tok * ar]),
                            n_tok,
                            &mut out,
                            N_ROWS,
                        )
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
