//! A model plus the state one caller needs to run it: the KV cache and the scratch space.
//! Convenience for the command line, benchmarks and tests (the scheduler drives
//! [`Model::forward`] directly with its own batches).

use crate::engine::batch::{LogitsWanted, SeqInput};
use crate::engine::error::EngineError;
use crate::engine::kv_cache::{BlockTable, KvCache, KvType, DEFAULT_BLOCK_SIZE};
use crate::engine::model::Model;
use crate::engine::scratch::{BatchLimits, ForwardScratch};
use crate::engine::Logits;

/// Owns a KV cache and scratch space for one model.
pub struct Runner<'m> {
    pub model: &'m Model,
    pub kv: KvCache,
    pub scratch: ForwardScratch,
}

impl<'m> Runner<'m> {
    /// A cache holding `kv_positions` positions of every layer in total (a model with sliding
    /// windows gets a page per layer group and block, so `kv_positions` are always there even
    /// before its local layers release any) and scratch for `limits`.
    pub fn new(
        model: &'m Model,
        limits: BatchLimits,
        kv_positions: usize,
    ) -> Result<Runner<'m>, EngineError> {
        Runner::with_kv_type(model, limits, kv_positions, KvType::F16)
    }

    /// As [`Runner::new`], the cache storing its values as `kv_type`.
    pub fn with_kv_type(
        model: &'m Model,
        limits: BatchLimits,
        kv_positions: usize,
        kv_type: KvType,
    ) -> Result<Runner<'m>, EngineError> {
        let groups = model
            .kv_config(DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)
            .layout()
            .n_groups()
            .max(1);
        let blocks = kv_positions.div_ceil(DEFAULT_BLOCK_SIZE);
        let kv_cfg = model
            .kv_config(blocks * groups * DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)
            .with_kv_type(kv_type);
        // A state slot per page at most: a table holding pages never lacks one.
        let kv = KvCache::with_state(kv_cfg, model.state_shape(kv_cfg.n_blocks))?;
        let scratch = model.new_scratch(limits, &kv_cfg)?;
        Ok(Runner { model, kv, scratch })
    }

    /// An empty sequence (its KV blocks return to the pool when it is dropped).
    pub fn new_seq(&self) -> BlockTable {
        self.kv.new_table()
    }

    /// One forward call over `seqs` (tables already reserved).
    pub fn forward(&mut self, seqs: &[SeqInput<'_>]) -> Result<Logits<'_>, EngineError> {
        self.model.forward(seqs, &mut self.kv, &mut self.scratch)
    }

    /// Feeds `tokens` to one sequence starting at `start_pos`, in chunks of at most `chunk`
    /// tokens; calls `on_logits(pos, row)` for each position whose logits `want` asks for
    /// (`Last` = the last of `tokens`).
    pub fn feed(
        &mut self,
        table: &mut BlockTable,
        start_pos: usize,
        tokens: &[u32],
        chunk: usize,
        want: LogitsWanted,
        mut on_logits: impl FnMut(usize, &[f32]),
    ) -> Result<(), EngineError> {
        let limits = self.scratch.limits();
        // Every position of a chunk needs a logits row only when all are wanted.
        let rows_cap = match want {
            LogitsWanted::All => limits.max_logit_rows.max(1),
            _ => usize::MAX,
        };
        let chunk = chunk.min(limits.max_tokens).min(rows_cap).max(1);
        let mut pos = start_pos;
        for part in tokens.chunks(chunk) {
            // Pages of local layers no query from here on can see go back to the pool.
            table.forget_before(pos);
            table.reserve(pos + part.len())?;
            let is_last = pos + part.len() == start_pos + tokens.len();
            let logits = match want {
                LogitsWanted::Last if is_last => LogitsWanted::Last,
                LogitsWanted::All => LogitsWanted::All,
                _ => LogitsWanted::None,
            };
            let seq = [SeqInput {
                tokens: part,
                start_pos: pos,
                table,
                logits,
            }];
            let out = self.forward(&seq)?;
            let first = match logits {
                LogitsWanted::Last => pos + part.len() - 1,
                _ => pos,
            };
            for (i, row) in out.seq_rows(0).enumerate() {
                on_logits(first + i, row);
            }
            pos += part.len();
        }
        Ok(())
    }
}
