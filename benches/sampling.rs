//! One sampling call on a 49,152-entry row (the default model's vocabulary), per setting:
//! greedy, plain temperature, top-k, top-p, top-p + top-k + penalties over a 128-token
//! history, and `top_logprobs = 20`; today's `engine::token_choice` for reference.
//! `cargo bench --bench sampling`.
//!
//! The "peaked" row is what a model usually gives: noise around 0 (sd ~2.3) and a handful of
//! tokens far above it, so the nucleus is small. The "flat" row (sd ~0.6, no stand-outs) makes
//! top-p widen its ranked prefix to thousands of tokens: the worst case.
//!
//! Time is this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so other processes sharing the
//! cores do not inflate it.

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::engine::token_choice::Rng;
use kiln::scheduler::sampling::{SampleScratch, Sampler, SamplingParams};
use std::hint::black_box;
use std::time::{Duration, Instant};

const N_VOCAB: usize = 49_152;

/// Seeded logits: a sum of four uniforms (close to normal) times `spread`, plus `peaks`
/// tokens well above the rest.
fn row(seed: u64, spread: f32, peaks: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut row: Vec<f32> = (0..N_VOCAB)
        .map(|_| (0..4).map(|_| rng.next_f64() as f32 - 0.5).sum::<f32>() * spread)
        .collect();
    for j in 0..peaks {
        let i = rng.next_u32() as usize % N_VOCAB;
        row[i] = 16.0 - 1.5 * j as f32;
    }
    row
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
    let peaked = row(1, 4.0, 8);
    let flat = row(2, 1.0, 0);
    // 64 prompt tokens and 64 generated ones feed the penalties.
    let prompt: Vec<u32> = (0..64).map(|i| (i * 769) % N_VOCAB as u32).collect();
    let generated: Vec<u32> = (0..64).map(|i| (i * 1_237 + 5) % N_VOCAB as u32).collect();
    let d = SamplingParams::default;
    let cases: Vec<(&str, SamplingParams, &[f32])> = vec![
        (
            "greedy",
            SamplingParams {
                temperature: 0.0,
                ..d()
            },
            &peaked,
        ),
        ("temperature 1", d(), &peaked),
        (
            "temperature 0.7",
            SamplingParams {
                temperature: 0.7,
                ..d()
            },
            &peaked,
        ),
        ("top_k 40", SamplingParams { top_k: 40, ..d() }, &peaked),
        ("top_p 0.9", SamplingParams { top_p: 0.9, ..d() }, &peaked),
        ("min_p 0.05", SamplingParams { min_p: 0.05, ..d() }, &peaked),
        (
            "top_p 0.9 + top_k 40 + penalties, T 0.7",
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                top_p: 0.9,
                presence_penalty: 0.5,
                frequency_penalty: 0.3,
                repetition_penalty: 1.1,
                logit_bias: vec![(100, -100.0), (200, 2.0)],
                ..d()
            },
            &peaked,
        ),
        (
            "top_logprobs 20",
            SamplingParams {
                top_logprobs: 20,
                ..d()
            },
            &peaked,
        ),
        (
            "top_p 0.9, flat row",
            SamplingParams { top_p: 0.9, ..d() },
            &flat,
        ),
    ];
    let mut group = c.benchmark_group("sample 49152");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for (name, params, logits) in cases {
        let mut sampler = Sampler::new(&params, 7, &prompt);
        for &id in &generated {
            sampler.observe(id);
        }
        let mut scratch = SampleScratch::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    black_box(sampler.sample(black_box(logits), &mut scratch));
                })
            })
        });
    }
    // For reference: a bare argmax over the row.
    group.bench_function("reference: engine argmax", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                black_box(kiln::engine::token_choice::argmax(black_box(&peaked)));
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
