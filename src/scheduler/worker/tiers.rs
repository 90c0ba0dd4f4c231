//! The worker's part in the prefix cache's tiers: the copies a plan asks for between the KV
//! pool and the RAM tier, the disk tier's writes and reads, and the tiers' numbers. The
//! scheduler decides; these run on the worker's thread, which owns the KV pool.

use super::{StepError, Worker};
use crate::engine::kv_cache::{block_q8, KvCacheError, KvType};
use crate::engine::EngineError;
use crate::scheduler::observer::{CacheTier, TierStats};
use crate::scheduler::prefix_cache::{block_key, StateCopy};
use crate::scheduler::state::StepPlan;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

impl Worker {
    /// Copies the blocks the plan evicted to the RAM tier (their pages are free and nothing
    /// has written them since: a step writes pages only after this).
    /// With `cache.ram_compress = "q8_0"` over an f16 KV cache, the bytes kept are the block's
    /// Q8_0 form ([`block_q8`]).
    pub(super) fn run_spills(&mut self, plan: &StepPlan) -> Result<(), StepError> {
        let q8 = self.ram_q8_0();
        for sp in &plan.spills {
            let mut bytes = Vec::with_capacity(self.kv.block_bytes());
            self.kv
                .export_block(&sp.pages, &mut bytes)
                .map_err(EngineError::from)?;
            if q8 {
                if let Some(c) = block_q8::compress_q8_0(&bytes) {
                    bytes = c;
                }
            }
            self.sched.prefix_mut().store_spill(sp, bytes.into());
        }
        Ok(())
    }

    /// Whether the RAM tier keeps spilled blocks as Q8_0: configured, and the KV cache holds
    /// f16 (a Q8_0 cache's blocks are kept as they are).
    fn ram_q8_0(&self) -> bool {
        self.cfg.tiers.ram_q8_0 && self.kv.config().kv_type == KvType::F16
    }

    /// Writes the restores of `plan` into their pages: a block's bytes as exported, or (when
    /// shorter: the RAM tier compressed it) its Q8_0 form, dequantized first.
    pub(super) fn run_restores(&mut self, plan: &StepPlan) -> Result<(), StepError> {
        let raw_len = self.kv.block_bytes();
        for r in &plan.restores {
            if r.bytes.len() == raw_len {
                self.kv.import_block(&r.pages, &r.bytes)
            } else {
                let raw = block_q8::decompress_q8_0(&r.bytes, raw_len).ok_or(KvCacheError::Shape {
                    what: "compressed block bytes",
                    expected: block_q8::q8_0_len(raw_len).unwrap_or(raw_len),
                    got: r.bytes.len(),
                });
                raw.and_then(|raw| self.kv.import_block(&r.pages, &raw))
            }
            .map_err(EngineError::from)?;
        }
        Ok(())
    }

    /// Runs the plan's recurrent-state copies of one kind: `restores` (checkpoint into a
    /// sequence's slot) before the forward pass, saves (the sequence's slot into a checkpoint)
    /// after it (see `scheduler::state::checkpoints`).
    pub(super) fn run_state_copies(
        &mut self,
        plan: &StepPlan,
        restores: bool,
    ) -> Result<(), StepError> {
        for c in &plan.state_copies {
            let r = match *c {
                StateCopy::Restore { seq, slot, covered } if restores => {
                    let s = self.sched.seq(seq).ok_or(StepError::Plan)?;
                    self.kv.restore_state(s.table(), slot, covered)
                }
                StateCopy::Save { seq, slot } if !restores => {
                    let s = self.sched.seq(seq).ok_or(StepError::Plan)?;
                    self.kv.save_state(s.table(), slot).map(|_| ())
                }
                _ => Ok(()),
            };
            r.map_err(EngineError::from)?;
        }
        Ok(())
    }

    /// Hands the blocks this step added to the prefix cache to the disk tier's writer (their
    /// pages are the cache's until a later plan evicts them).
    pub(super) fn run_persists(&mut self) -> Result<(), StepError> {
        let persists = self.sched.prefix_mut().take_persists();
        let Some(disk) = self.disk.as_mut() else {
            return Ok(());
        };
        for p in persists {
            if disk.knows(p.key) {
                continue;
            }
            let mut bytes = Vec::with_capacity(self.kv.block_bytes());
            self.kv
                .export_block(&p.pages, &mut bytes)
                .map_err(EngineError::from)?;
            disk.write(p.key, p.parent, &p.tokens, bytes);
        }
        Ok(())
    }

    /// Before a prompt is queued in the namespace whose chains start at `root`: reads into the
    /// RAM tier the blocks of its longest prefix
    /// found on disk that the pool and RAM do not hold (at most half the RAM tier), so its
    /// lookup restores them. Runs on this thread (disk reads of a prompt's blocks, checked).
    pub(super) fn load_from_disk(&mut self, root: u64, prompt: &[u32]) {
        let Some(disk) = self.disk.as_mut() else {
            return;
        };
        let bs = self.kv.config().block_size;
        let budget = self.sched.ram_tier().capacity() / 2;
        let t0 = Instant::now();
        let (mut parent, mut loaded, mut bytes, mut consulted) = (root, 0, 0, false);
        for chunk in prompt
            .chunks_exact(bs)
            .take(prompt.len().saturating_sub(1) / bs)
        {
            let key = block_key(parent, chunk);
            if !self.sched.prefix_mut().holds(key) {
                consulted = true;
                if bytes + self.kv.block_bytes() > budget {
                    break;
                }
                let Some(b) = disk.read(key, parent, chunk) else {
                    break;
                };
                bytes += b.len();
                self.sched
                    .prefix_mut()
                    .store_ram(key, parent, chunk, b.into());
                loaded += 1;
            }
            parent = key;
        }
        if !consulted {
            return;
        }
        let st = disk.stats();
        if loaded > 0 {
            st.hits.fetch_add(1, Ordering::Relaxed);
            self.observer
                .on_tier_restore(CacheTier::Disk, loaded, t0.elapsed());
        } else {
            st.misses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The prefix cache's tiers now (see [`TierStats`]).
    pub(super) fn tier_stats(&self) -> TierStats {
        let p = self.sched.prefix_stats();
        let ram = self.sched.ram_tier();
        let mut t = TierStats {
            worker: self.index,
            pool_hits: p.pool_hits,
            pool_misses: p.queries - p.pool_hits,
            ram_hits: p.ram_hits,
            ram_misses: p.ram_misses,
            ram_blocks: ram.len() as u64,
            ram_bytes: ram.bytes() as u64,
            spilled: p.spilled,
            ..TierStats::default()
        };
        if let Some(d) = &self.disk {
            let d = d.stats();
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            t.disk_hits = get(&d.hits);
            t.disk_misses = get(&d.misses);
            t.disk_blocks = get(&d.files);
            t.disk_bytes = get(&d.bytes);
            t.disk_written = get(&d.written);
            t.disk_skipped = get(&d.skipped);
            t.disk_rejected = get(&d.rejected);
            t.disk_write_errors = get(&d.write_errors);
            t.disk_degraded = d.degraded.load(Ordering::Relaxed);
        }
        t
    }
}
