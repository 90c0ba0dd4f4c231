//! Kernel throughput per dtype and ISA: vec_dot (k = 576) and gemm at the SmolLM2 FFN shape
//! (n_rows = 1536, k = 576) for n_tok = 1, 4, 16, 64; K-quants (256-value blocks) use k = 768. Throughput is in multiply-adds
//! ("elements" = n_rows * k * n_tok); weights/s = elements / n_tok.
//! Where an ISA has a panel GEMM (weights repacked at load), `gemm_packed/<isa>` measures it at
//! n_tok = 1, 16, 64, 512 on the same data (Q4_0/Q4_1/Q8_0 and the K-quants Q4_K/Q5_K/Q6_K).
//! `gemv_bytes/<isa>` is the n_tok = 1 gemm again with its throughput in weight bytes (GB/s of
//! the matrix streamed, as decode reads it; the 1536 x 576 matrix stays in L2, so this is the
//! kernel's speed, not memory's). IQ4_NL, IQ4_XS and MXFP4, which kiln does not write, get
//! random codes under typical scales.
//! `KILN_BENCH_ISA=avx512` restricts to one ISA; `KILN_BENCH_TYPES=Q4_1,Q8_0` to some types.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::kernels::{kernels_for, DType, Isa};
use std::time::Duration;

const K: usize = 576;
/// Row length for the K-quants, whose blocks hold 256 values.
const K_KQUANT: usize = 768;
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
    match k.from_f32 {
        Some(f) => f(x, &mut y),
        None => random_blocks(dt, &mut y),
    }
    y
}

/// Blocks of a type kiln cannot quantize to (IQ4_NL, IQ4_XS, MXFP4): pseudo-random codes, the
/// scale field set to a typical value (f16 0.01, or the E8M0 exponent 2^-7).
fn random_blocks(dt: DType, y: &mut [u8]) {
    for (i, b) in y.iter_mut().enumerate() {
        *b = ((i as u32).wrapping_mul(2654435761) >> 13) as u8;
    }
    for blk in y.chunks_exact_mut(dt.block_bytes()) {
        if dt == DType::MXFP4 {
            blk[0] = 121;
        } else {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
    }
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
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::IQ4_NL,
            DType::IQ4_XS,
            DType::MXFP4,
        ],
    }
}

fn bench(c: &mut Criterion) {
    for dt in types() {
        let kl = if dt.block_elems() == 256 { K_KQUANT } else { K };
        let sk = kernels_for(dt, Isa::Scalar).expect("kernels");
        let w = quant(dt, &data(N_ROWS * kl, 1));
        let a = quant(sk.vec_dot_type, &data(512 * kl, 7));
        let wr = w.len() / N_ROWS;
        let ar = a.len() / 512;
        let mut g = c.benchmark_group(format!("{dt}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1200))
            .sample_size(10);
        for isa in isas() {
            let k = kernels_for(dt, isa).expect("kernels");
            g.throughput(Throughput::Elements(kl as u64));
            g.bench_function(BenchmarkId::new(format!("vec_dot/{isa}"), kl), |b| {
                b.iter(|| (k.vec_dot)(kl, black_box(&w[..wr]), black_box(&a[..ar])))
            });
            for n_tok in [1usize, 4, 16, 64] {
                let mut out = vec![0f32; n_tok * N_ROWS];
                g.throughput(Throughput::Elements((N_ROWS * kl * n_tok) as u64));
                g.bench_function(BenchmarkId::new(format!("gemm/{isa}"), n_tok), |b| {
                    b.iter(|| {
                        (k.gemm)(
                            kl,
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
            let mut out = vec![0f32; N_ROWS];
            g.throughput(Throughput::Bytes(w.len() as u64));
            g.bench_function(BenchmarkId::new(format!("gemv_bytes/{isa}"), 1), |b| {
                b.iter(|| {
                    (k.gemm)(
                        kl,
                        black_box(&w),
                        N_ROWS,
                        black_box(&a[..ar]),
                        1,
                        &mut out,
                        N_ROWS,
                    )
                })
            });
            let Some(pk) = k.packed else { continue };
            let p = kiln::kernels::packed::pack(dt, kl, &w, N_ROWS).expect("packable");
            for n_tok in [1usize, 16, 64, 512] {
                let mut out = vec![0f32; n_tok * N_ROWS];
                g.throughput(Throughput::Elements((N_ROWS * kl * n_tok) as u64));
                g.bench_function(BenchmarkId::new(format!("gemm_packed/{isa}"), n_tok), |b| {
                    b.iter(|| {
                        (pk.gemm)(
                            kl,
                            black_box(p.bytes()),
                            N_ROWS,
                            black_box(&a[..n_tok * ar]),
                            n_tok,
                            out.as_mut_slice().into(),
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
