//! Attention of every token of a ragged batch on the worker team, each token's result exactly
//! what [`attend_with`] gives for it alone (with the layer's [`AttnParams`]).
//!
//! The work is cut by cost: a token in llama.cpp's one-row order (below
//! [`super::LONG_FROM`], or any token of a windowed or soft-capped layer) is one task (llama.cpp's one-row
//! order, all its heads), or one task per KV head when a step has fewer such tokens than
//! threads (a decode step: the other threads would wait); a run of a sequence's consecutive tokens in the long order is
//! tiled, `MAX_ROWS / group` tokens times the query heads of one KV head per task, so each K/V
//! tile is read once for all of them; a sequence's single long token (decode) is split over KV
//! instead, one task per (KV head, span) writing span partials, then one merge task per token
//! folds them in span order. All three compute the same per-row arithmetic (see `long.rs`), so
//! the cut never changes a result.

use super::long::{self, MAX_ROWS, SPAN};
use super::sink::finish_row;
use super::{attend_kv_heads, attend_with, check, AttnParams, AttnScratch, HeadView};
use crate::engine::kv_cache::{BlockTable, KvCache, KvCacheConfig, KvCacheError};
use crate::engine::team::{SendPtr, Team};
use std::sync::Mutex;

/// The tokens of one batch, as attention reads them.
#[derive(Clone, Copy)]
pub struct AttnBatch<'a> {
    /// Sequence index of each token; a sequence's tokens are consecutive, positions ascending.
    pub tok_seq: &'a [u32],
    /// Position of each token.
    pub tok_pos: &'a [u32],
    /// Block table of sequence `i`.
    pub table: &'a (dyn Fn(usize) -> &'a BlockTable + Sync),
    /// `[n_tok][n_head * head_dim]` queries, RoPE applied.
    pub q: &'a [f32],
    /// How the layer attends (scale, softcapping, window, sinks).
    pub params: &'a AttnParams<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Task {
    /// One token below `LONG_FROM`.
    Short { tok: u32 },
    /// The query heads of KV head `kvh` of one token below `LONG_FROM` (a decode step's
    /// short tokens, fewer than the threads, are split this way so every thread attends).
    Heads { tok: u32, kvh: u32 },
    /// Tokens `tok..tok + n` of one sequence, query heads of KV head `kvh`, all spans.
    Tile { tok: u32, n: u32, kvh: u32 },
    /// One token, KV head `kvh`, span `span`; partials from `slot` on.
    Split {
        tok: u32,
        kvh: u32,
        span: u32,
        slot: u32,
    },
}

/// A split token's merge: its spans `first..first + n`, partials from `slot` on.
#[derive(Debug, Clone, Copy)]
struct Merge {
    tok: u32,
    n: u32,
    slot: u32,
}

/// The task lists and split-K partials of [`attend_batch`], sized once so a step allocates
/// nothing.
#[derive(Debug)]
pub struct AttnPlan {
    tasks: Vec<Task>,
    merges: Vec<Merge>,
    /// `[slot][n_head][head_dim + 2]`: per span and query head `m`, `l`, then the accumulator.
    partials: Vec<f32>,
    n_head: usize,
    head_dim: usize,
}

impl AttnPlan {
    /// A plan for batches of up to `max_tokens` tokens of up to `max_seqs` sequences with
    /// `n_head` query heads over a cache shaped `kv`.
    pub fn new(kv: &KvCacheConfig, n_head: usize, max_tokens: usize, max_seqs: usize) -> Self {
        // Split tokens are single tokens of distinct sequences: their spans cover at most the
        // cache's positions plus one partial span each (a shared prefix counts twice, so a
        // batch may still run out: its tokens are tiled instead, with the same result).
        let slots = (kv.n_blocks * kv.block_size).div_ceil(SPAN) + max_seqs;
        AttnPlan {
            tasks: Vec::with_capacity(max_tokens * kv.n_head_kv + slots * kv.n_head_kv),
            merges: Vec::with_capacity(max_seqs),
            partials: vec![0.0; slots * n_head * (kv.head_dim + 2)],
            n_head,
            head_dim: kv.head_dim,
        }
    }

    fn slots(&self) -> usize {
        self.partials.len() / (self.n_head * (self.head_dim + 2))
    }
}

/// Attention of every token of `batch` over its sequence's positions `0..=pos` in `layer`,
/// into `out` (`[n_tok][n_head * head_dim]`), on `team` with one scratch per worker. Each
/// token's output is bit-identical to [`attend_with`]'s for it alone. Errors as its, or a
/// plan made for another shape.
pub fn attend_batch(
    team: &Team,
    cache: &KvCache,
    layer: usize,
    batch: &AttnBatch<'_>,
    out: &mut [f32],
    scratches: &[Mutex<AttnScratch>],
    plan: &mut AttnPlan,
) -> Result<(), KvCacheError> {
    let cfg = *cache.config();
    let (d, hk) = (cfg.head_dim, cfg.n_head_kv);
    let n_tok = batch.tok_seq.len();
    let nq = plan.n_head * d;
    if plan.head_dim != d || batch.q.len() < n_tok * nq || out.len() < n_tok * nq {
        return Err(KvCacheError::Shape {
            what: "attention batch (q, out, plan)",
            expected: n_tok * nq,
            got: batch.q.len().min(out.len()),
        });
    }
    {
        let sc = scratches[0].lock().unwrap_or_else(|e| e.into_inner());
        for t in 0..n_tok {
            let table = (batch.table)(batch.tok_seq[t] as usize);
            check(
                cache,
                layer,
                table,
                batch.tok_pos[t] as usize,
                nq,
                nq,
                &sc,
                batch.params,
            )?;
        }
    }
    plan_tasks(batch, plan, hk, team.threads());
    let group = plan.n_head / hk;
    let scale = batch.params.scale;
    let sinks = batch.params.sinks;
    let first_err: Mutex<Option<KvCacheError>> = Mutex::new(None);
    let out_ptr = SendPtr(out.as_mut_ptr());
    let part_ptr = SendPtr(plan.partials.as_mut_ptr());
    let part_w = d + 2;
    let n_head = plan.n_head;
    let tasks = &plan.tasks;
    team.run(tasks.len(), &|i, worker| {
        let mut sc = scratches[worker % scratches.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match tasks[i] {
            Task::Short { tok } => {
                let t = tok as usize;
                let table = (batch.table)(batch.tok_seq[t] as usize);
                // SAFETY: row t of `out` (n_tok rows of nq) belongs to this task alone.
                let row = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(t * nq), nq) };
                let q = &batch.q[t * nq..][..nq];
                if let Err(e) = attend_with(
                    cache,
                    layer,
                    table,
                    batch.tok_pos[t] as usize,
                    q,
                    row,
                    &mut sc,
                    batch.params,
                ) {
                    first_err
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                }
            }
            Task::Heads { tok, kvh } => {
                let (t, h) = (tok as usize, kvh as usize);
                let table = (batch.table)(batch.tok_seq[t] as usize);
                let w = group * d;
                // SAFETY: the query heads of KV head h in row t of `out` (n_tok rows of nq)
                // belong to this task alone (one task per token and KV head).
                let o =
                    unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(t * nq + h * w), w) };
                attend_kv_heads(
                    cache,
                    layer,
                    table,
                    batch.tok_pos[t] as usize,
                    (&batch.q[t * nq..][..nq], h..h + 1),
                    o,
                    &mut sc,
                    batch.params,
                    group,
                );
            }
            Task::Tile { tok, n, kvh } => {
                let (t0, h) = (tok as usize, kvh as usize);
                let seq = batch.tok_seq[t0] as usize;
                let last = batch.tok_pos[t0 + n as usize - 1] as usize;
                let sc = &mut *sc;
                let table = (batch.table)(seq);
                let mut view = HeadView::new(cache, layer, table, h, 0, last + 1, &mut sc.tiles);
                let kernel = sc.long;
                let ls = &mut sc.long_scratch;
                ls.clear();
                for t in t0..t0 + n as usize {
                    let pos = batch.tok_pos[t] as usize;
                    for j in 0..group {
                        let head = h * group + j;
                        let sink = sinks.map(|s| s[head]);
                        ls.push(&batch.q[t * nq + head * d..][..d], 0, pos + 1, sink);
                    }
                }
                long::attend_rows(kernel, &mut view, ls, scale);
                for r in 0..ls.rows() {
                    let (t, j) = (t0 + r / group, r % group);
                    // SAFETY: this (token, query head) row of `out` belongs to this task
                    // alone (tiles of one KV head never share a token).
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(
                            out_ptr.get().add(t * nq + (h * group + j) * d),
                            d,
                        )
                    };
                    o.copy_from_slice(ls.output(r));
                }
            }
            Task::Split {
                tok,
                kvh,
                span,
                slot,
            } => {
                let (t, h) = (tok as usize, kvh as usize);
                let pos = batch.tok_pos[t] as usize;
                let table = (batch.table)(batch.tok_seq[t] as usize);
                let sc = &mut *sc;
                let mut view = HeadView::new(cache, layer, table, h, 0, pos + 1, &mut sc.tiles);
                let kernel = sc.long;
                let ls = &mut sc.long_scratch;
                ls.clear();
                for j in 0..group {
                    // The sink joins at the merge, after every span.
                    ls.push(
                        &batch.q[t * nq + (h * group + j) * d..][..d],
                        0,
                        pos + 1,
                        None,
                    );
                }
                long::span_partial(kernel, &mut view, ls, span as usize, scale);
                for j in 0..group {
                    let (m, l, acc) = ls.partial(j);
                    let at = (slot as usize * n_head + h * group + j) * part_w;
                    // SAFETY: this (span slot, query head) entry belongs to this task alone
                    // and lies inside `partials` (`plan_tasks` kept slots below its size).
                    let p =
                        unsafe { std::slice::from_raw_parts_mut(part_ptr.get().add(at), part_w) };
                    p[0] = m;
                    p[1] = l;
                    p[2..].copy_from_slice(acc);
                }
            }
        }
    });
    if let Some(e) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let merges = &plan.merges;
    let partials = &plan.partials;
    team.run(merges.len(), &|i, _| {
        let Merge { tok, n, slot } = merges[i];
        let t = tok as usize;
        // SAFETY: row t of `out` belongs to this merge alone (one per split token).
        let row = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(t * nq), nq) };
        for (head, o) in row.chunks_mut(d).enumerate() {
            let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
            o.fill(0.0);
            for s in 0..n as usize {
                let p = &partials[((slot as usize + s) * n_head + head) * part_w..][..part_w];
                long::fold(&mut m, &mut l, o, p[0], p[1], &p[2..]);
            }
            finish_row(m, l, sinks.map(|s| s[head]), o);
        }
    });
    Ok(())
}

/// Fills `plan.tasks` and `plan.merges` for `batch` (see the module docs): long work first,
/// then short tokens latest first (later positions cost more), so the tail balances. With
/// fewer short tokens than `threads` (decode), each is split by KV head.
fn plan_tasks(batch: &AttnBatch<'_>, plan: &mut AttnPlan, hk: usize, threads: usize) {
    let n_tok = batch.tok_seq.len();
    let group = plan.n_head / hk;
    let tile = (MAX_ROWS / group).max(1);
    let slots = plan.slots();
    plan.tasks.clear();
    plan.merges.clear();
    let mut used = 0;
    let mut t = 0;
    while t < n_tok {
        // A run: consecutive long tokens of one sequence.
        let seq = batch.tok_seq[t];
        if !batch.params.long_at(batch.tok_pos[t] as usize) {
            t += 1;
            continue;
        }
        let mut end = t + 1;
        while end < n_tok
            && batch.tok_seq[end] == seq
            && batch.tok_pos[end] == batch.tok_pos[end - 1] + 1
        {
            end += 1;
        }
        let pos = batch.tok_pos[t] as usize;
        let spans = long::spans_of(0, pos + 1);
        if end - t == 1 && used + spans.len() <= slots {
            for kvh in 0..hk {
                for (i, span) in spans.clone().enumerate() {
                    plan.tasks.push(Task::Split {
                        tok: t as u32,
                        kvh: kvh as u32,
                        span: span as u32,
                        slot: (used + i) as u32,
                    });
                }
            }
            plan.merges.push(Merge {
                tok: t as u32,
                n: spans.len() as u32,
                slot: used as u32,
            });
            used += spans.len();
        } else {
            for t0 in (t..end).step_by(tile) {
                for kvh in 0..hk {
                    plan.tasks.push(Task::Tile {
                        tok: t0 as u32,
                        n: (end - t0).min(tile) as u32,
                        kvh: kvh as u32,
                    });
                }
            }
        }
        t = end;
    }
    let short = |t: &usize| !batch.params.long_at(batch.tok_pos[*t] as usize);
    let split = threads > 1 && (0..n_tok).filter(short).count() < threads;
    for t in (0..n_tok).rev().filter(short) {
        if split {
            for kvh in 0..hk {
                plan.tasks.push(Task::Heads {
                    tok: t as u32,
                    kvh: kvh as u32,
                });
            }
        } else {
            plan.tasks.push(Task::Short { tok: t as u32 });
        }
    }
}
