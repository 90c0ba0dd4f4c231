//! The llama-family forward pass over a ragged batch.
//!
//! Per layer, for every new token of every sequence at once:
//! `x += Wo · attn(rope(Wq · n), rope(Wk · n), Wv · n)` with `n = rms_norm(x) * attn_norm`,
//! then `x += Wdown · (silu(Wgate · m) * (Wup · m))` with `m = rms_norm(x) * ffn_norm`;
//! finally `logits = Wout · (rms_norm(x) * output_norm)` for the rows asked for.
//!
//! Every step is per token (norms, RoPE, activation quantization, attention) or a matmul whose
//! outputs are bit-identical per token whatever the batch (see `matmul`), so a sequence's
//! logits never depend on the batch it runs in nor on how its prompt was chunked.

use crate::engine::attention::{attend_batch, AttnBatch};
use crate::engine::batch::{Logits, LogitsWanted, SeqInput};
use crate::engine::error::EngineError;
use crate::engine::kv_cache::{KvCache, KvCacheConfig, KvCacheError};
use crate::engine::matmul::{matmul, MatJob};
use crate::engine::model::config::LlamaConfig;
use crate::engine::model::load::load_weights;
use crate::engine::ops::{rms_norm, swiglu};
use crate::engine::pool::{Pool, SendPtr};
use crate::engine::scratch::{BatchLimits, ForwardScratch};
use crate::engine::weights::LlamaWeights;
use crate::gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

/// Row-wise work on fewer tokens than this stays on the calling thread.
const PAR_ROWS_MIN: usize = 16;

/// Receives named intermediate activations: `(name, layer, rows)` where `rows` is
/// `[n_tokens][width]` for the whole batch (`layer` is None for non-layer tensors).
#[cfg(feature = "trace")]
pub type TraceHook = Box<dyn Fn(&str, Option<usize>, &[f32]) + Send + Sync>;

/// A loaded llama-family model and the thread pool it computes on.
pub struct LlamaModel {
    cfg: LlamaConfig,
    /// Shared by every replica (see [`LlamaModel::replica`]).
    w: Arc<LlamaWeights>,
    pool: Pool,
    #[cfg(feature = "trace")]
    trace: Option<TraceHook>,
}

/// Applies `f(t, row)` to each of the `n` first `width`-long rows of `buf`, over the pool
/// when there are many (in groups of rows, a few groups per thread).
fn for_rows(
    pool: &Pool,
    buf: &mut [f32],
    width: usize,
    n: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    let buf = &mut buf[..n * width];
    if n >= PAR_ROWS_MIN && pool.threads() > 1 {
        let per = n.div_ceil(pool.threads() * 4);
        let groups = n.div_ceil(per);
        let base = SendPtr(buf.as_mut_ptr());
        pool.run(groups, &|g, _| {
            for t in g * per..((g + 1) * per).min(n) {
                // SAFETY: row t lies inside `buf` (t < n) and every row belongs to exactly one
                // group, run once, so no two calls alias.
                let row =
                    unsafe { std::slice::from_raw_parts_mut(base.get().add(t * width), width) };
                f(t, row);
            }
        });
    } else {
        for (t, row) in buf.chunks_mut(width).enumerate() {
            f(t, row);
        }
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

impl LlamaModel {
    /// Opens a GGUF model and starts a pool of `threads` workers (0 = the usable physical cores, [`crate::engine::cpus`]).
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<LlamaModel, EngineError> {
        LlamaModel::from_gguf(&GgufFile::open(path)?, threads)
    }

    /// The model in an opened GGUF file (its weights stay borrowed from the file's map).
    pub fn from_gguf(file: &GgufFile, threads: usize) -> Result<LlamaModel, EngineError> {
        let mut cfg = LlamaConfig::from_gguf(file)?;
        let w = load_weights(file, &mut cfg)?;
        Ok(LlamaModel {
            cfg,
            w: Arc::new(w),
            pool: Pool::new(threads)?,
            #[cfg(feature = "trace")]
            trace: None,
        })
    }

    /// Another engine over the same weights (memory-mapped and repacked once) with its own
    /// worker team of `threads` (0 = the usable physical cores, [`crate::engine::cpus`]): each replica runs its own batches, KV
    /// cache and scratch.
    pub fn replica(&self, threads: usize) -> Result<LlamaModel, EngineError> {
        Ok(LlamaModel {
            cfg: self.cfg.clone(),
            w: Arc::clone(&self.w),
            pool: Pool::new(threads)?,
            #[cfg(feature = "trace")]
            trace: None,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    pub fn weights(&self) -> &LlamaWeights {
        &self.w
    }

    /// The engine's one worker team (the thread calling `forward` is its worker 0).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A KV cache shape for this model holding `n_positions` positions in blocks of
    /// `block_size`.
    pub fn kv_config(&self, n_positions: usize, block_size: usize) -> KvCacheConfig {
        KvCacheConfig {
            n_layer: self.cfg.n_layer,
            n_head_kv: self.cfg.n_head_kv,
            head_dim: self.cfg.head_dim,
            block_size,
            n_blocks: n_positions.div_ceil(block_size.max(1)),
        }
    }

    /// Working memory for batches up to `limits` over a cache shaped `kv`.
    pub fn new_scratch(
        &self,
        limits: BatchLimits,
        kv: &KvCacheConfig,
    ) -> Result<ForwardScratch, EngineError> {
        ForwardScratch::new(&self.cfg, limits, kv, self.pool.threads())
    }

    /// Installs a hook receiving every named intermediate activation.
    #[cfg(feature = "trace")]
    pub fn set_trace_hook(&mut self, hook: Option<TraceHook>) {
        self.trace = hook;
    }

    #[inline]
    #[allow(unused_variables)]
    fn trace(&self, name: &str, layer: Option<usize>, rows: &[f32]) {
        #[cfg(feature = "trace")]
        if let Some(h) = &self.trace {
            h(name, layer, rows);
        }
    }

    /// Runs one ragged batch: stores every new token's K/V in `kv` and returns the logits the
    /// sequences asked for (batch order, see [`Logits`]). Each sequence's table must already
    /// have room for its new positions. Allocates nothing.
    pub fn forward<'s>(
        &self,
        seqs: &[SeqInput<'_>],
        kv: &mut KvCache,
        s: &'s mut ForwardScratch,
    ) -> Result<Logits<'s>, EngineError> {
        let (n_tok, n_rows) = self.plan(seqs, s)?;
        self.run(seqs, n_tok, n_rows, kv, s)?;
        let n_seq = seqs.len();
        Ok(Logits {
            data: &s.logits[..n_rows * self.cfg.n_vocab],
            row_start: &s.row_start[..n_seq + 1],
            n_vocab: self.cfg.n_vocab,
        })
    }

    /// Validates the batch and lays it out in `s`: returns (tokens, logits rows).
    fn plan(
        &self,
        seqs: &[SeqInput<'_>],
        s: &mut ForwardScratch,
    ) -> Result<(usize, usize), EngineError> {
        let lim = s.limits;
        if seqs.is_empty() || seqs.iter().any(|q| q.tokens.is_empty()) {
            return Err(EngineError::EmptyInput);
        }
        let too_large = |what, got, max| Err(EngineError::BatchTooLarge { what, got, max });
        if seqs.len() > lim.max_seqs {
            return too_large("sequences", seqs.len(), lim.max_seqs);
        }
        let n_tok: usize = seqs.iter().map(|q| q.tokens.len()).sum();
        if n_tok > lim.max_tokens {
            return too_large("tokens", n_tok, lim.max_tokens);
        }
        let n_rows: usize = seqs.iter().map(|q| q.logit_rows()).sum();
        if n_rows > lim.max_logit_rows {
            return too_large("logits rows", n_rows, lim.max_logit_rows);
        }
        let mut t = 0;
        let mut r = 0;
        for (i, q) in seqs.iter().enumerate() {
            let end = q.start_pos + q.tokens.len();
            if end > self.cfg.n_ctx_train {
                return Err(EngineError::ContextOverflow {
                    pos: end - 1,
                    n_ctx: self.cfg.n_ctx_train,
                });
            }
            if q.table.capacity() < end {
                return Err(EngineError::KvNotReserved {
                    capacity: q.table.capacity(),
                    needed: end,
                });
            }
            s.row_start[i] = r;
            for (j, &id) in q.tokens.iter().enumerate() {
                if id as usize >= self.cfg.n_vocab {
                    return Err(EngineError::BadToken {
                        id,
                        n_vocab: self.cfg.n_vocab,
                    });
                }
                s.tok_seq[t] = i as u32;
                s.tok_pos[t] = (q.start_pos + j) as u32;
                let wanted = match q.logits {
                    LogitsWanted::None => false,
                    LogitsWanted::Last => j + 1 == q.tokens.len(),
                    LogitsWanted::All => true,
                };
                if wanted {
                    s.logit_tok[r] = t as u32;
                    r += 1;
                }
                t += 1;
            }
        }
        s.row_start[seqs.len()] = r;
        Ok((n_tok, n_rows))
    }

    /// The forward pass proper, on the pool.
    fn run(
        &self,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        n_rows: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) -> Result<(), KvCacheError> {
        let c = &self.cfg;
        let (d, hd) = (c.n_embd, c.head_dim);
        let nq = c.n_head * hd;
        let nkv = c.n_head_kv * hd;
        let nf = c.n_ff;
        let n_rot = c.rope.n_dims;
        let tok_seq = &s.tok_seq[..n_tok];
        let tok_pos = &s.tok_pos[..n_tok];

        // Token embeddings: the dequantized rows of token_embd.
        let mut tok_ids = tok_seq.iter().zip(tok_pos).map(|(&sq, &p)| {
            let q = &seqs[sq as usize];
            q.tokens[p as usize - q.start_pos]
        });
        for row in s.x[..n_tok * d].chunks_mut(d) {
            let id = tok_ids.next().unwrap_or(0);
            self.w.token_embd.row_to_f32(id as usize, row);
        }
        self.trace("inp_embd", None, &s.x[..n_tok * d]);
        // RoPE angles, once per token for all layers.
        let rope = &c.rope;
        for_rows(&self.pool, &mut s.rope, n_rot, n_tok, |t, row| {
            rope.fill(tok_pos[t] as usize, row)
        });

        for (l, lw) in self.w.layers.iter().enumerate() {
            let lt = Some(l);
            // Attention block.
            let x = &s.x;
            for_rows(&self.pool, &mut s.xn, d, n_tok, |t, row| {
                rms_norm(&x[t * d..(t + 1) * d], &lw.attn_norm, c.rms_eps, row)
            });
            self.trace("attn_norm", lt, &s.xn[..n_tok * d]);
            matmul(
                &self.pool,
                &s.xn,
                n_tok,
                &mut [
                    MatJob {
                        w: &lw.wq,
                        out: &mut s.q,
                    },
                    MatJob {
                        w: &lw.wk,
                        out: &mut s.k,
                    },
                    MatJob {
                        w: &lw.wv,
                        out: &mut s.v,
                    },
                ],
                &mut s.mm,
            );
            self.trace("q_mm", lt, &s.q[..n_tok * nq]);
            self.trace("k_mm", lt, &s.k[..n_tok * nkv]);
            let rope_c = &s.rope;
            for_rows(&self.pool, &mut s.q, nq, n_tok, |t, row| {
                if let Some(b) = &lw.bq {
                    add_in_place(row, b);
                }
                rope.apply(&rope_c[t * n_rot..(t + 1) * n_rot], row, hd);
            });
            for_rows(&self.pool, &mut s.k, nkv, n_tok, |t, row| {
                if let Some(b) = &lw.bk {
                    add_in_place(row, b);
                }
                rope.apply(&rope_c[t * n_rot..(t + 1) * n_rot], row, hd);
            });
            if let Some(b) = &lw.bv {
                for_rows(&self.pool, &mut s.v, nkv, n_tok, |_, row| {
                    add_in_place(row, b)
                });
            }
            self.trace("q", lt, &s.q[..n_tok * nq]);
            self.trace("k", lt, &s.k[..n_tok * nkv]);
            self.trace("v", lt, &s.v[..n_tok * nkv]);
            for t in 0..n_tok {
                let q = &seqs[tok_seq[t] as usize];
                let (kr, vr) = (&s.k[t * nkv..(t + 1) * nkv], &s.v[t * nkv..(t + 1) * nkv]);
                kv.write(l, q.table, tok_pos[t] as usize, kr, vr)?;
            }
            let table_of = |i: usize| seqs[i].table;
            let batch = AttnBatch {
                tok_seq,
                tok_pos,
                table: &table_of,
                q: &s.q,
            };
            attend_batch(
                &self.pool,
                kv,
                l,
                &batch,
                &mut s.attn[..n_tok * nq],
                &s.attn_scratch,
                &mut s.attn_plan,
            )?;
            self.trace("attn_out", lt, &s.attn[..n_tok * nq]);
            matmul(
                &self.pool,
                &s.attn,
                n_tok,
                &mut [MatJob {
                    w: &lw.wo,
                    out: &mut s.proj,
                }],
                &mut s.mm,
            );
            self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
            add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
            self.trace("ffn_inp", lt, &s.x[..n_tok * d]);

            // Feed-forward block.
            let x = &s.x;
            for_rows(&self.pool, &mut s.xn, d, n_tok, |t, row| {
                rms_norm(&x[t * d..(t + 1) * d], &lw.ffn_norm, c.rms_eps, row)
            });
            self.trace("ffn_norm", lt, &s.xn[..n_tok * d]);
            matmul(
                &self.pool,
                &s.xn,
                n_tok,
                &mut [
                    MatJob {
                        w: &lw.w_gate,
                        out: &mut s.gate,
                    },
                    MatJob {
                        w: &lw.w_up,
                        out: &mut s.up,
                    },
                ],
                &mut s.mm,
            );
            self.trace("ffn_gate", lt, &s.gate[..n_tok * nf]);
            self.trace("ffn_up", lt, &s.up[..n_tok * nf]);
            let (gate, up) = (&s.gate, &s.up);
            for_rows(&self.pool, &mut s.xn, nf, n_tok, |t, row| {
                swiglu(&gate[t * nf..(t + 1) * nf], &up[t * nf..(t + 1) * nf], row)
            });
            self.trace("ffn_act", lt, &s.xn[..n_tok * nf]);
            matmul(
                &self.pool,
                &s.xn,
                n_tok,
                &mut [MatJob {
                    w: &lw.w_down,
                    out: &mut s.proj,
                }],
                &mut s.mm,
            );
            self.trace("ffn_out", lt, &s.proj[..n_tok * d]);
            add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
            self.trace("l_out", lt, &s.x[..n_tok * d]);
        }

        // Final norm and LM head, only for the rows asked for.
        if n_rows > 0 {
            let (x, logit_tok) = (&s.x, &s.logit_tok);
            for_rows(&self.pool, &mut s.out_norm, d, n_rows, |r, row| {
                let t = logit_tok[r] as usize;
                rms_norm(&x[t * d..(t + 1) * d], &self.w.output_norm, c.rms_eps, row)
            });
            self.trace("result_norm", None, &s.out_norm[..n_rows * d]);
            matmul(
                &self.pool,
                &s.out_norm,
                n_rows,
                &mut [MatJob {
                    w: &self.w.output,
                    out: &mut s.logits,
                }],
                &mut s.mm,
            );
            self.trace("result_output", None, &s.logits[..n_rows * c.n_vocab]);
        }
        Ok(())
    }
}
