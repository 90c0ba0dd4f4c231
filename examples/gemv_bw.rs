//! Decode GEMV bandwidth of the packed weight kernels against a plain read of the same bytes:
//! a layer's matrices (Llama-3.2-1B shapes by default) repacked as the engine does, copied
//! until they far exceed the last-level cache, multiplied by one Q8_K/Q8_0 activation row on
//! the engine's team (one row half per thread, one region per matrix, as a decode step does).
//!
//!   cargo run --release --example gemv_bw -- [DTYPE=Q4_K] [THREADS=2] [ROUNDS=20] [cache|mem] [TASKS] [ROWS=1]
//!
//! (`cache`: one 512 x 2048 matrix that stays in L2, the kernel's compute speed; TASKS: also
//! split each matrix into that many tasks per thread, alternating with one, as the engine may
//! (0: only one); ROWS: activation rows per call, 1 for decode, more for a batched step.)
//!
//! Prints the best GB/s of the GEMV and of a plain read of the same panels with the same split
//! (alternating), so the ratio is meaningful on a shared machine; with one thread the time is
//! the thread's CPU time, which time-sharing with other processes does not inflate.

use kiln::engine::team::Team;
use kiln::kernels::packed::{pack, PackedWeights};
use kiln::kernels::{kernels, kernels_for, DType, Isa};
use std::time::Instant;

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

struct Mat {
    p: PackedWeights,
    n: usize,
    k: usize,
}

fn read_sum(b: &[u8]) -> u64 {
    let w: &[u64] = unsafe_cast(b);
    let mut s = [0u64; 8];
    for c in w.chunks_exact(8) {
        for i in 0..8 {
            s[i] = s[i].wrapping_add(c[i]);
        }
    }
    s.iter().fold(0, |a, &x| a.wrapping_add(x))
}

fn unsafe_cast(b: &[u8]) -> &[u64] {
    assert!((b.as_ptr() as usize).is_multiple_of(8) && b.len().is_multiple_of(8));
    // SAFETY: aligned, length a multiple of 8, u64 has no invalid bit patterns.
    unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u64, b.len() / 8) }
}

/// Seconds: this thread's CPU time with one thread (immune to time sharing), else wall time.
fn now(threads: usize) -> f64 {
    if threads > 1 {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        return T0.get_or_init(Instant::now).elapsed().as_secs_f64();
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint parts of the buffer it points at.
unsafe impl Sync for OutPtr {}
// SAFETY: as above.
unsafe impl Send for OutPtr {}
impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dt = DType::from_name(args.first().map_or("Q4_K", |s| s)).expect("dtype");
    let threads: usize = args.get(1).map_or(2, |s| s.parse().expect("threads"));
    let rounds: usize = args.get(2).map_or(20, |s| s.parse().expect("rounds"));
    let d = 2048;
    let f = 8192;
    // q, k, v, o, gate, up, down.
    let in_cache = args.get(3).is_some_and(|s| s == "cache");
    let shapes: &[(usize, usize)] = if in_cache {
        &[(512, d)]
    } else {
        &[(d, d), (512, d), (512, d), (d, d), (f, d), (f, d), (d, f)]
    };
    let kern = kernels(dt).expect("kernels");
    let pk = kern
        .packed
        .expect("a packed GEMM for this dtype on this ISA");
    let adt = kern.vec_dot_type;
    let mut base = Vec::new();
    for &(n, k) in shapes {
        let w = quant(dt, &data(n * k, n as u32 ^ k as u32));
        base.push((w, n, k));
    }
    let layers = if in_cache { 1 } else { 12 };
    let mut mats = Vec::new();
    for _ in 0..layers {
        for (w, n, k) in &base {
            let p = pack(dt, *k, w, *n).expect("packable");
            mats.push(Mat { p, n: *n, k: *k });
        }
    }
    let total: usize = mats.iter().map(|m| m.p.bytes().len()).sum();
    let n_tok: usize = args.get(5).map_or(1, |s| s.parse().expect("rows"));
    assert!(n_tok >= 1, "ROWS must be at least 1");
    let a_d = quant(adt, &data(d * n_tok, 7));
    let a_f = quant(adt, &data(f * n_tok, 9));
    let team = Team::new(threads).expect("team");
    let mut out = vec![0f32; f * n_tok];
    let step = |gemv: bool, out: &mut [f32], split: usize| {
        let o = OutPtr(out.as_mut_ptr());
        for m in &mats {
            let a = if m.k == d { &a_d } else { &a_f };
            let rows = m.n.div_ceil(threads * split).next_multiple_of(16);
            team.run(m.n.div_ceil(rows), &|t, _| {
                let r0 = t * rows;
                let r1 = (r0 + rows).min(m.n);
                if gemv {
                    // Task outputs: `n_tok` rows of `r1 - r0` cells at `r0 * n_tok`.
                    let len = (r1 - r0) * n_tok;
                    // SAFETY: tasks write disjoint ranges of `out` (>= n * n_tok values).
                    let o = unsafe { std::slice::from_raw_parts_mut(o.get().add(r0 * n_tok), len) };
                    (pk.gemm)(m.k, m.p.from_row(r0), r1 - r0, a, n_tok, o.into(), r1 - r0);
                } else {
                    let bytes = m.p.from_row(r0);
                    let len = (r1 - r0).div_ceil(16) * m.p.layout.panel_bytes;
                    std::hint::black_box(read_sum(&bytes[..len]));
                }
            });
        }
    };
    println!(
        "{dt} x {adt}: {} matrices, {:.0} MB packed, {threads} threads, {n_tok} row(s), isa {}",
        mats.len(),
        total as f64 / 1e6,
        kiln::kernels::isa()
    );
    // Tasks per thread of each matrix: 1, then (when given) the 4th argument, alternating.
    let splits: Vec<usize> = std::iter::once(1)
        .chain(
            args.get(4)
                .map(|s| s.parse().expect("tasks per thread"))
                .filter(|&n: &usize| n > 0),
        )
        .collect();
    let mut times = vec![[Vec::new(), Vec::new()]; splits.len()];
    for _ in 0..rounds {
        for (j, &split) in splits.iter().enumerate() {
            for (i, gemv) in [false, true].into_iter().enumerate() {
                let t = now(threads);
                step(gemv, &mut out, split);
                times[j][i].push(now(threads) - t);
            }
        }
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    for l in smaps
        .lines()
        .filter(|l| l.starts_with("AnonHuge") || l.starts_with("Rss"))
    {
        println!("{l}");
    }
    for (j, &split) in splits.iter().enumerate() {
        let gb = |v: &mut Vec<f64>, best: bool| {
            v.sort_by(f64::total_cmp);
            total as f64 / if best { v[0] } else { v[v.len() / 2] } / 1e9
        };
        let [r, g] = &mut times[j];
        println!(
            "{split} task(s)/thread, best | median of {rounds}: read {:.1} | {:.1} GB/s  gemv {:.1} | {:.1} GB/s",
            gb(r, true),
            gb(r, false),
            gb(g, true),
            gb(g, false),
        );
    }
}
