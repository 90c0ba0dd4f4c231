//! `out = a · Wᵀ` for a batch of activation rows, over the engine's team.
//!
//! The f32 activations are quantized ONCE per matmul input into the weights' `vec_dot_type`
//! (Q8_1 for Q4_1 weights, Q8_0 for Q8_0 ...), as llama.cpp does. The weight rows are then
//! split into chunks, one team task each; a task calls the kernel's `gemm` (register-tiled;
//! for one token it is a GEMV) on its chunk for all tokens. Several matmuls sharing one input
//! (Q, K, V; gate, up) run in ONE parallel region. A task's outputs go straight into the
//! output ([`OutCells`]: the tasks' cells of one token row sit side by side); only weights
//! without a packed copy, whose kernels take a slice, go through a scratch copy.
//!
//! Batch invariance: the kernels guarantee `gemm`'s `out[t][r]` is bit-identical to
//! `vec_dot(w_r, a_t)` for any tile shape, and quantization is per row, so a token's outputs do
//! not depend on the other tokens of the batch nor on the chunking.

use crate::engine::team::{SendPtr, Team};
use crate::engine::weights::{Weight, ROW_ALIGN};
use crate::kernels::cells::OutCells;
use crate::kernels::table::FromF32Fn;
use crate::kernels::DType;

/// Tasks per team thread and matmul (more tasks balance better, fewer cost less to schedule).
const TASKS_PER_THREAD: usize = 4;
/// For decode-sized inputs (few tokens, microseconds per matmul) one task per thread: each
/// extra task is a join and a possible wake-up, which cost more than the imbalance.
const FEW_TOKENS: usize = 4;
/// Prefill-sized inputs (at least two groups per thread) are split by token groups of this
/// size instead of by rows: each task multiplies all rows for its tokens, so the kernels'
/// per-token activation terms are computed once per matmul and each task writes contiguous
/// output rows directly (no scatter).
const TOKEN_GROUP: usize = 64;
/// Below this many tokens, activation quantization runs on the calling thread.
const PAR_QUANT_MIN_TOKENS: usize = 16;

/// One matmul of a group: `out[t * w.n_out + r] = dot(w row r, input row t)`.
pub struct MatJob<'a> {
    pub w: &'a Weight,
    /// `n_tok * w.n_out` values.
    pub out: &'a mut [f32],
}

/// Buffers for [`matmul`], allocated up front for `max_tok` tokens.
pub struct MatmulScratch {
    /// Quantized activations: at most two vec_dot types per group.
    act: [(Option<DType>, Vec<u8>); 2],
    /// Per-task outputs before they are scattered (n_tok > 1 over a weight without a packed
    /// copy; packed GEMMs write the output directly).
    tmp: Vec<f32>,
}

impl MatmulScratch {
    /// Room for `max_tok` tokens of up to `max_act_row_bytes` quantized bytes each, and
    /// `max_tmp` f32 task outputs (tokens x summed output rows of the largest group).
    pub fn new(max_tok: usize, max_act_row_bytes: usize, max_tmp: usize) -> MatmulScratch {
        MatmulScratch {
            act: [
                (None, vec![0u8; max_tok * max_act_row_bytes]),
                (None, vec![0u8; max_tok * max_act_row_bytes]),
            ],
            tmp: vec![0f32; max_tmp],
        }
    }
}

/// Output rows per task of a row-split matmul of `n_tok` tokens over `n_out` rows.
fn rows_per_task_of(n_out: usize, threads: usize, n_tok: usize) -> usize {
    let tasks = if n_tok <= FEW_TOKENS {
        1
    } else {
        TASKS_PER_THREAD
    };
    n_out
        .div_ceil(threads * tasks)
        .next_multiple_of(ROW_ALIGN)
        .max(1)
}

/// Most bytes of its next matrix a thread prefetches while it waits (see [`warm_next`]):
/// twice a core's L2 here, what spills stays in the shared L3. Measured on Llama-3.2-1B
/// Q4_K_M (2 threads, step by step in one process): 256 KiB saved 0.5% of a decode step,
/// 1 MiB 1.0%, 2 MiB 1.3%, 4 MiB 1.6%.
const WARM_BYTES: usize = 2 << 20;

/// Names the matrix the team multiplies after the next matmul group of `n_tok` tokens: from
/// now on each thread, while it waits (at a join, or a worker while the caller runs the serial
/// work between regions: norms, RoPE, attention's tail, activation quantization), prefetches
/// the first bytes of the rows it will multiply in `next` (thread `i` the rows of task `i`,
/// the task it claims first in a two-thread team). Only decode-sized groups stream the
/// weights with the bus idle in between; for larger ones the slots are emptied. Changes no
/// result (prefetches only).
pub fn warm_next(team: &Team, n_tok: usize, next: &Weight) {
    let warm = team.warm();
    let threads = team.threads();
    if n_tok > FEW_TOKENS || threads < 2 {
        warm.clear();
        return;
    }
    let rows = rows_per_task_of(next.n_out, threads, n_tok);
    for t in 0..threads {
        let r0 = t * rows;
        if r0 >= next.n_out {
            warm.set(t, &[]);
            continue;
        }
        let bytes = next.stream(r0, (r0 + rows).min(next.n_out));
        warm.set(t, &bytes[..WARM_BYTES.min(bytes.len())]);
    }
}

/// Makes row `t` of a matmul group's f32 input in place: `make(t, row)` (see [`matmul_made`]).
pub type MakeRow<'a> = dyn Fn(usize, &mut [f32]) + Sync + 'a;

/// A matmul group's f32 input: `n_tok` rows of `k` values, ready or made row by row inside
/// the region that quantizes them.
enum Input<'a, 'm> {
    Ready(&'a [f32]),
    Made(&'a mut [f32], &'a MakeRow<'m>),
}

/// Quantizes `n_tok` rows of `k` f32 values from `input` into `dst` with `q`; a `Made` input
/// has each row made first, by the same task, so the row's norm or activation and its
/// quantization are one parallel region instead of two (the values are the same: each row is
/// made by the same code on the same inputs, whichever thread runs it).
#[allow(clippy::too_many_arguments)]
fn quantize_rows(
    team: &Team,
    q: FromF32Fn,
    input: &mut Input<'_, '_>,
    k: usize,
    n_tok: usize,
    row_bytes: usize,
    dst: &mut [u8],
) {
    let dst = &mut dst[..n_tok * row_bytes];
    match input {
        Input::Ready(input) => {
            let input = &input[..n_tok * k];
            if n_tok >= PAR_QUANT_MIN_TOKENS {
                team.for_chunks(dst, row_bytes, n_tok, |t, d| {
                    q(&input[t * k..(t + 1) * k], d)
                });
            } else {
                for (d, s) in dst.chunks_mut(row_bytes).zip(input.chunks(k)) {
                    q(s, d);
                }
            }
        }
        Input::Made(buf, make) => {
            let buf = &mut buf[..n_tok * k];
            if n_tok >= PAR_QUANT_MIN_TOKENS {
                let rows = SendPtr(buf.as_mut_ptr());
                let make = *make;
                team.for_chunks(dst, row_bytes, n_tok, |t, d| {
                    // SAFETY: row t is buf[t * k..(t + 1) * k], inside `buf` (t < n_tok), and
                    // for_chunks runs each t exactly once, so no two tasks alias.
                    let row = unsafe { std::slice::from_raw_parts_mut(rows.get().add(t * k), k) };
                    make(t, row);
                    q(row, d)
                });
            } else {
                for (t, (d, row)) in dst.chunks_mut(row_bytes).zip(buf.chunks_mut(k)).enumerate() {
                    make(t, row);
                    q(row, d);
                }
            }
        }
    }
}

/// Runs every job of the group on `input` (`n_tok` rows of `k` values, `k` = each job's
/// `w.k`) over `team`; allocates nothing.
pub fn matmul(
    team: &Team,
    input: &[f32],
    n_tok: usize,
    jobs: &mut [MatJob<'_>],
    s: &mut MatmulScratch,
) {
    group(team, Input::Ready(input), n_tok, jobs, s);
}

/// [`matmul`] on rows made by `make(t, row)` into `buf` (`n_tok` rows of the jobs' `k`): each
/// row is made (an RMSNorm, an activation, ...) by the task that quantizes it, one parallel
/// region for both. `buf` holds the made rows afterwards. Same results as making the rows
/// first and calling [`matmul`] on `buf`.
pub fn matmul_made(
    team: &Team,
    buf: &mut [f32],
    make: &MakeRow<'_>,
    n_tok: usize,
    jobs: &mut [MatJob<'_>],
    s: &mut MatmulScratch,
) {
    group(team, Input::Made(buf, make), n_tok, jobs, s);
}

fn group(
    team: &Team,
    mut input: Input<'_, '_>,
    n_tok: usize,
    jobs: &mut [MatJob<'_>],
    s: &mut MatmulScratch,
) {
    assert!(!jobs.is_empty() && jobs.len() <= 4, "1 to 4 jobs per group");
    let k = jobs[0].w.k;
    let input_len = match &input {
        Input::Ready(x) => x.len(),
        Input::Made(x, _) => x.len(),
    };
    assert!(input_len >= n_tok * k, "matmul input too short");
    // Quantize the input once per distinct activation format.
    let mut slot_of = [0usize; 4];
    let mut n_slots = 0;
    for (j, job) in jobs.iter().enumerate() {
        assert_eq!(job.w.k, k, "jobs of a group share their input");
        assert!(
            job.out.len() >= n_tok * job.w.n_out,
            "matmul output too short"
        );
        let vdt = job.w.vec_dot_type;
        let slot = match s.act[..n_slots].iter().position(|(d, _)| *d == Some(vdt)) {
            Some(i) => i,
            None => {
                assert!(n_slots < 2, "at most two activation formats per group");
                s.act[n_slots].0 = Some(vdt);
                quantize_rows(
                    team,
                    job.w.quantize_act,
                    &mut input,
                    k,
                    n_tok,
                    job.w.act_row_bytes,
                    &mut s.act[n_slots].1,
                );
                // Made rows are made once: a second activation format reads them.
                if let Input::Made(buf, _) = input {
                    input = Input::Ready(buf);
                }
                n_slots += 1;
                n_slots - 1
            }
        };
        slot_of[j] = slot;
    }
    for a in s.act[n_slots..].iter_mut() {
        a.0 = None;
    }
    let threads = team.threads();
    if n_tok >= 2 * TOKEN_GROUP * threads {
        by_token_groups(team, n_tok, jobs, &slot_of, [&s.act[0].1, &s.act[1].1]);
        return;
    }
    // Plan: rows per task for each job, and where each job's task outputs go in `tmp`.
    let mut rows_per_task = [0usize; 4];
    let mut first_task = [0usize; 5];
    let mut tmp_base = [0usize; 4];
    let mut tmp_len = 0;
    for (j, job) in jobs.iter().enumerate() {
        let n_out = job.w.n_out;
        rows_per_task[j] = rows_per_task_of(n_out, threads, n_tok);
        first_task[j + 1] = first_task[j] + n_out.div_ceil(rows_per_task[j]);
        tmp_base[j] = tmp_len;
        tmp_len += n_tok * n_out;
    }
    let n_tasks = first_task[jobs.len()];
    let ws_ptrs: [SendPtr<f32>; 4] = std::array::from_fn(|j| {
        SendPtr(
            jobs.get_mut(j)
                .map_or(std::ptr::null_mut(), |x| x.out.as_mut_ptr()),
        )
    });
    if n_tok > 1 {
        assert!(s.tmp.len() >= tmp_len, "matmul scratch too small");
    }
    let outs = ws_ptrs;
    let tmp = SendPtr(s.tmp.as_mut_ptr());
    let acts: [&[u8]; 2] = [&s.act[0].1, &s.act[1].1];
    let n_jobs = jobs.len();
    let ws: [Option<&Weight>; 4] = std::array::from_fn(|j| jobs.get(j).map(|x| x.w));
    let run_task = |task: usize, _worker: usize| {
        let j = (0..n_jobs).rfind(|&j| first_task[j] <= task).unwrap_or(0);
        let Some(w) = ws[j] else { return };
        let r0 = (task - first_task[j]) * rows_per_task[j];
        let r1 = (r0 + rows_per_task[j]).min(w.n_out);
        let rows = r1 - r0;
        let a = &acts[slot_of[j]][..n_tok * w.act_row_bytes];
        if n_tok == 1 {
            // SAFETY: `outs[j]` points at `jobs[j].out` (>= n_out values, checked above);
            // tasks of job j cover disjoint row ranges r0..r1, so this slice aliases no other.
            let out = unsafe { std::slice::from_raw_parts_mut(outs[j].get().add(r0), rows) };
            w.gemm_rows(r0, r1, a, 1, out, rows);
        } else if w.is_packed() {
            // Straight into `out`: each token's cells r0..r1, n_out apart.
            let n_out = w.n_out;
            // SAFETY: the extent from cell (0, r0) to cell (n_tok - 1, r1 - 1) lies inside
            // `jobs[j].out` (>= n_tok * n_out values, checked above), which lives through
            // `team.run`; of it this task alone writes cells t * n_out + r0..r1 (tasks of job j
            // cover disjoint row ranges) and nobody reads them until the run ends. The other
            // tasks' cells interleave with these: the GEMM writes only its own.
            let out =
                unsafe { OutCells::from_raw(outs[j].get().add(r0), (n_tok - 1) * n_out + rows) };
            w.gemm_rows_cells(r0, r1, a, n_tok, out, n_out);
        } else {
            // SAFETY: job j's tmp region is tmp_base[j]..+n_tok*n_out (within `tmp_len`,
            // checked); this task's part n_tok*r0..n_tok*r1 of it is disjoint from all others.
            let part = unsafe {
                std::slice::from_raw_parts_mut(
                    tmp.get().add(tmp_base[j] + n_tok * r0),
                    n_tok * rows,
                )
            };
            w.gemm_rows(r0, r1, a, n_tok, part, rows);
            let n_out = w.n_out;
            for (t, src) in part.chunks_exact(rows).enumerate() {
                // SAFETY: out[t*n_out + r0 .. + rows] lies inside jobs[j].out (n_tok*n_out
                // values) and only this task writes columns r0..r1 of job j.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(outs[j].get().add(t * n_out + r0), rows)
                };
                dst.copy_from_slice(src);
            }
        }
    };
    team.run(n_tasks, &run_task);
}

/// Prefill-sized matmuls: one task per (job, group of [`TOKEN_GROUP`] tokens), all rows.
fn by_token_groups(
    team: &Team,
    n_tok: usize,
    jobs: &mut [MatJob<'_>],
    slot_of: &[usize; 4],
    acts: [&[u8]; 2],
) {
    let groups = n_tok.div_ceil(TOKEN_GROUP);
    let n_jobs = jobs.len();
    let outs: [SendPtr<f32>; 4] = std::array::from_fn(|j| {
        SendPtr(
            jobs.get_mut(j)
                .map_or(std::ptr::null_mut(), |x| x.out.as_mut_ptr()),
        )
    });
    let ws: [Option<&Weight>; 4] = std::array::from_fn(|j| jobs.get(j).map(|x| x.w));
    team.run(n_jobs * groups, &|task, _| {
        let (j, g) = (task / groups, task % groups);
        let Some(w) = ws[j] else { return };
        let t0 = g * TOKEN_GROUP;
        let nt = TOKEN_GROUP.min(n_tok - t0);
        let a = &acts[slot_of[j]][t0 * w.act_row_bytes..(t0 + nt) * w.act_row_bytes];
        // SAFETY: `outs[j]` points at `jobs[j].out` (>= n_tok * n_out values, checked by
        // `matmul`); this task alone writes its tokens' rows t0..t0 + nt of it.
        let out = unsafe {
            std::slice::from_raw_parts_mut(outs[j].get().add(t0 * w.n_out), nt * w.n_out)
        };
        w.gemm_rows(0, w.n_out, a, nt, out, w.n_out);
    });
}
