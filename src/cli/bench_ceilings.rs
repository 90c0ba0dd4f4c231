//! `kiln bench --ceilings`: this machine's memory read bandwidth and int8 dot-product
//! throughput with `threads` threads, the ceilings `scripts/bench_compare.py` states speed
//! figures against (decode is bound by the first, prefill and batched decode by the second).

use kiln::kernels::ceiling::{int8_macs, read_sum};
use kiln::kernels::{isa, Isa};
use std::time::Instant;

/// Bytes each thread reads per pass: far beyond any last-level cache.
const READ_BYTES: usize = 256 << 20;
/// Dot-product rounds per thread and run (~0.1-0.3 s on the machines seen).
const ROUNDS: usize = 20_000_000;
/// Runs per figure; the best is reported (the machine is shared: the best run is the one
/// least disturbed).
const RUNS: usize = 5;

/// Measured ceilings.
pub struct Ceilings {
    pub threads: usize,
    pub read_gb_s: f64,
    /// `None` when the ISA has no int8 dot product (scalar).
    pub int8_gmac_s: Option<f64>,
    pub isa: Isa,
}

/// Runs `f(thread)` on `threads` threads at once, returns the wall time.
fn timed(threads: usize, f: impl Fn(usize) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || f(t));
        }
    });
    start.elapsed().as_secs_f64()
}

pub fn measure(threads: usize) -> Ceilings {
    let threads = threads.max(1);
    // One buffer per thread, written first so every page is resident.
    let bufs: Vec<Vec<u64>> = (0..threads)
        .map(|t| vec![t as u64 + 1; READ_BYTES / 8])
        .collect();
    let mut best_read = f64::MAX;
    for _ in 0..RUNS {
        let secs = timed(threads, |t| {
            std::hint::black_box(read_sum(&bufs[t]));
        });
        best_read = best_read.min(secs);
    }
    let isa = isa();
    let mut best_macs = 0f64;
    for _ in 0..RUNS {
        let done = std::sync::atomic::AtomicU64::new(0);
        let secs = timed(threads, |_| {
            let (m, s) = int8_macs(isa, ROUNDS);
            std::hint::black_box(s);
            done.fetch_add(m, std::sync::atomic::Ordering::Relaxed);
        });
        best_macs = best_macs.max(done.into_inner() as f64 / secs);
    }
    Ceilings {
        threads,
        read_gb_s: (threads * READ_BYTES) as f64 / best_read / 1e9,
        int8_gmac_s: (best_macs > 0.0).then_some(best_macs / 1e9),
        isa,
    }
}

pub fn run(threads: usize, json: bool) -> anyhow::Result<()> {
    let c = measure(threads);
    if json {
        let obj = serde_json::json!({
            "threads": c.threads,
            "isa": c.isa.to_string(),
            "read_gb_s": c.read_gb_s,
            "int8_gmac_s": c.int8_gmac_s,
        });
        println!("{obj}");
    } else {
        println!("threads: {}  isa: {} (best of {RUNS})", c.threads, c.isa);
        println!("memory read: {:.1} GB/s", c.read_gb_s);
        match c.int8_gmac_s {
            Some(g) => println!("int8 dot product: {g:.0} G multiply-adds/s"),
            None => println!("int8 dot product: none on this ISA"),
        }
    }
    Ok(())
}
