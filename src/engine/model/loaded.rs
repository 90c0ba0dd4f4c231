//! A loaded model: its description, weights and worker team, and the entry point of a forward
//! call over a ragged batch (validation and layout; the pass itself is `forward.rs`).

use crate::engine::batch::{Logits, LogitsWanted, SeqInput};
use crate::engine::error::EngineError;
use crate::engine::kv_cache::{KvCache, KvCacheConfig, KvType, LayerWindows, StateShape};
use crate::engine::model::desc::ModelDesc;
use crate::engine::model::load::load_weights;
use crate::engine::scratch::{BatchLimits, ForwardScratch};
use crate::engine::team::{SendPtr, Team};
use crate::engine::weights::ModelWeights;
use crate::gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

/// Row-wise work on fewer tokens than this stays on the calling thread.
const PAR_ROWS_MIN: usize = 16;

/// Receives named intermediate activations: `(name, layer, rows)` where `rows` is
/// `[n_tokens][width]` for the whole batch (`layer` is None for non-layer tensors).
#[cfg(feature = "trace")]
pub type TraceHook = Box<dyn Fn(&str, Option<usize>, &[f32]) + Send + Sync>;

/// A loaded model (any supported architecture) and the worker team it computes on.
pub struct Model {
    desc: ModelDesc,
    /// Shared by every replica (see [`Model::replica`]).
    w: Arc<ModelWeights>,
    /// Shared with a draft model run by the same engine thread ([`Model::on_team_of`]).
    pub(super) team: Arc<Team>,
    #[cfg(feature = "trace")]
    trace: Option<TraceHook>,
}

/// Applies `f(t, row)` to each of the `n` first `width`-long rows of `buf`, over the team
/// when there are many (in groups of rows, a few groups per thread).
pub(super) fn for_rows(
    team: &Team,
    buf: &mut [f32],
    width: usize,
    n: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    let buf = &mut buf[..n * width];
    if n >= PAR_ROWS_MIN && team.threads() > 1 {
        let per = n.div_ceil(team.threads() * 4);
        let groups = n.div_ceil(per);
        let base = SendPtr(buf.as_mut_ptr());
        team.run(groups, &|g, _| {
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

/// [`for_rows`] over two buffers at once: `f(t, a_row, b_row)` for each of the `n` first rows
/// (`wa` and `wb` wide) of `a` and `b`, in one parallel region (e.g. RoPE of q and of k).
pub(super) fn for_row_pairs(
    team: &Team,
    (a, wa): (&mut [f32], usize),
    (b, wb): (&mut [f32], usize),
    n: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let (a, b) = (&mut a[..n * wa], &mut b[..n * wb]);
    if n >= PAR_ROWS_MIN && team.threads() > 1 {
        let per = n.div_ceil(team.threads() * 4);
        let groups = n.div_ceil(per);
        let (pa, pb) = (SendPtr(a.as_mut_ptr()), SendPtr(b.as_mut_ptr()));
        team.run(groups, &|g, _| {
            for t in g * per..((g + 1) * per).min(n) {
                // SAFETY: row t of each buffer lies inside it (t < n) and every row belongs to
                // exactly one group, run once, so no two calls alias.
                let (ra, rb) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(pa.get().add(t * wa), wa),
                        std::slice::from_raw_parts_mut(pb.get().add(t * wb), wb),
                    )
                };
                f(t, ra, rb);
            }
        });
    } else {
        for (t, (ra, rb)) in a.chunks_mut(wa).zip(b.chunks_mut(wb)).enumerate() {
            f(t, ra, rb);
        }
    }
}

pub(super) use crate::engine::ops::add_in_place;

impl Model {
    /// Opens a GGUF model and starts a team of `threads` workers (0 = the usable physical cores, [`crate::engine::cpus`]).
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<Model, EngineError> {
        Model::from_gguf(&GgufFile::open(path)?, threads)
    }

    /// The model in an opened GGUF file (its weights stay borrowed from the file's map).
    pub fn from_gguf(file: &GgufFile, threads: usize) -> Result<Model, EngineError> {
        let mut desc = ModelDesc::from_gguf(file)?;
        let mut w = load_weights(file, &mut desc)?;
        let team = Team::new(threads)?;
        w.repack(&team);
        Ok(Model {
            desc,
            w: Arc::new(w),
            team: Arc::new(team),
            #[cfg(feature = "trace")]
            trace: None,
        })
    }

    /// Another engine over the same weights (memory-mapped and repacked once) with its own
    /// worker team of `threads` (0 = the usable physical cores, [`crate::engine::cpus`]): each replica runs its own batches, KV
    /// cache and scratch.
    pub fn replica(&self, threads: usize) -> Result<Model, EngineError> {
        Ok(Model {
            desc: self.desc.clone(),
            w: Arc::clone(&self.w),
            team: Arc::new(Team::new(threads)?),
            #[cfg(feature = "trace")]
            trace: None,
        })
    }

    /// This model's weights computing on `other`'s worker team (a draft model run by the
    /// target's engine thread between its steps: no thread of its own). Both must be called
    /// from the same thread, one forward pass at a time (the team serializes regions anyway).
    pub fn on_team_of(&self, other: &Model) -> Model {
        Model {
            desc: self.desc.clone(),
            w: Arc::clone(&self.w),
            team: Arc::clone(&other.team),
            #[cfg(feature = "trace")]
            trace: None,
        }
    }

    pub fn desc(&self) -> &ModelDesc {
        &self.desc
    }

    pub fn weights(&self) -> &ModelWeights {
        &self.w
    }

    /// The engine's one worker team (the thread calling `forward` is its worker 0).
    pub fn team(&self) -> &Team {
        &self.team
    }

    /// A KV cache shape for this model with `n_positions / block_size` pages of `block_size`
    /// positions (with sliding windows a page holds a group of layers, see
    /// `kv_cache::layout`: a long sequence takes fewer pages per position).
    pub fn kv_config(&self, n_positions: usize, block_size: usize) -> KvCacheConfig {
        let local: Vec<bool> = self.desc.kv_layers().map(|(_, _, w)| w.is_some()).collect();
        KvCacheConfig {
            n_layer: local.len(),
            n_head_kv: self.desc.n_head_kv,
            head_dim: self.desc.head_dim,
            block_size,
            n_blocks: n_positions.div_ceil(block_size.max(1)),
            windows: LayerWindows::new(self.desc.max_window().unwrap_or(0), &local)
                .unwrap_or(LayerWindows::NONE),
            kv_type: KvType::F16,
        }
    }

    /// The recurrent state of `n_slots` sequences ([`StateShape::NONE`] for a model of
    /// attention layers only): give it to [`KvCache::with_state`].
    pub fn state_shape(&self, n_slots: usize) -> StateShape {
        if self.desc.has_recurrent() {
            StateShape {
                floats_per_seq: self.desc.state_floats,
                n_slots: n_slots.max(1),
            }
        } else {
            StateShape::NONE
        }
    }

    /// Working memory for batches up to `limits` over a cache shaped `kv`.
    pub fn new_scratch(
        &self,
        limits: BatchLimits,
        kv: &KvCacheConfig,
    ) -> Result<ForwardScratch, EngineError> {
        ForwardScratch::new(&self.desc, limits, kv, self.team.threads())
    }

    /// Installs a hook receiving every named intermediate activation.
    #[cfg(feature = "trace")]
    pub fn set_trace_hook(&mut self, hook: Option<TraceHook>) {
        self.trace = hook;
    }

    #[inline]
    #[allow(unused_variables)]
    pub(super) fn trace(&self, name: &str, layer: Option<usize>, rows: &[f32]) {
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
        if self.desc.has_recurrent() {
            // plan() checked every table holds a slot whose state covers its start.
            for q in seqs.iter().filter(|q| q.start_pos == 0) {
                if let Some(slot) = q.table.state_slot() {
                    kv.state_mut(slot).fill(0.0);
                }
            }
        }
        self.run(seqs, n_tok, n_rows, kv, s)?;
        for q in seqs {
            q.table.set_state_covered(q.start_pos + q.tokens.len());
        }
        let n_seq = seqs.len();
        Ok(Logits {
            data: &s.logits[..n_rows * self.desc.n_vocab],
            row_start: &s.row_start[..n_seq + 1],
            n_vocab: self.desc.n_vocab,
            hidden: &s.out_norm[..n_rows * self.desc.n_embd],
            n_embd: self.desc.n_embd,
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
            if end > self.desc.n_ctx_train {
                return Err(EngineError::ContextOverflow {
                    pos: end - 1,
                    n_ctx: self.desc.n_ctx_train,
                });
            }
            if q.table.capacity() < end {
                return Err(EngineError::KvNotReserved {
                    capacity: q.table.capacity(),
                    needed: end,
                });
            }
            if self.desc.has_recurrent() {
                let covered = q
                    .table
                    .state_covered()
                    .ok_or(EngineError::StateNotReserved)?;
                if q.start_pos != 0 && covered != q.start_pos {
                    return Err(EngineError::StateMismatch {
                        covered,
                        start: q.start_pos,
                    });
                }
            }
            s.row_start[i] = r;
            for (j, &id) in q.tokens.iter().enumerate() {
                if id as usize >= self.desc.n_vocab {
                    return Err(EngineError::BadToken {
                        id,
                        n_vocab: self.desc.n_vocab,
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
}
