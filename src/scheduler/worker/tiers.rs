//! The worker's part in the prefix cache's tiers: the copies a plan asks for between the KV
//! pool (and its recurrent-state checkpoints) and the RAM tier, the disk tier's writes, its
//! read requests and their answers, and the tiers' numbers. The scheduler decides; the copies
//! run on the worker's thread, which owns the KV pool; disk reads run on the tier's reader.

use super::{StepError, Worker};
use crate::engine::kv_cache::{block_q8, KvCacheError, KvType};
use crate::engine::EngineError;
use crate::scheduler::observer::{CacheTier, TierStats};
use crate::scheduler::prefix_cache::{
    block_key, DiskTier, RamBlock, ReadDone, ReadRequest, StateCopy, Wanted,
};
use crate::scheduler::state::StepPlan;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often an idle worker publishes the tier numbers while its disk writes are in flight.
pub(super) const WRITES_POLL: Duration = Duration::from_millis(20);

impl Worker {
    /// Whether the disk tier still has blocks of this worker to write.
    pub(super) fn disk_writes_pending(&self) -> bool {
        self.disk.as_ref().is_some_and(DiskTier::writes_pending)
    }

    /// Publishes the tier numbers when the disk writer finished jobs since the last time this
    /// did: a step publishes them, but the writes a step queued end after it, and without
    /// this an idle server's monitoring would not see them until the next request.
    pub(super) fn publish_disk_writes(&mut self) {
        let Some(handled) = self.disk.as_ref().map(DiskTier::writes_handled) else {
            return;
        };
        if handled != self.writes_published {
            self.writes_published = handled;
            self.observer.on_tiers(&self.tier_stats());
        }
    }

    /// Copies the blocks the plan evicted to the RAM tier (their pages are free and nothing
    /// has written them since: a step writes pages only after this), each with the recurrent
    /// state of its checkpoint if it had one (likewise unwritten: only a step's saves, after
    /// its forward pass, write a free checkpoint slot).
    /// With `cache.ram_compress = "q8_0"` over an f16 KV cache, the bytes kept are the block's
    /// Q8_0 form ([`block_q8`]); a state is kept as it is (f32).
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
            let state = match sp.state_slot {
                Some(slot) => Some(self.checkpoint_bytes(slot)?.into()),
                None => None,
            };
            let block = RamBlock {
                kv: bytes.into(),
                state,
            };
            self.sched.prefix_mut().store_spill(sp, block);
        }
        Ok(())
    }

    /// The recurrent state in checkpoint slot `slot`, as bytes.
    fn checkpoint_bytes(&self, slot: u32) -> Result<Vec<u8>, StepError> {
        let mut out = Vec::with_capacity(self.kv.checkpoint_bytes());
        self.kv
            .export_checkpoint(slot, &mut out)
            .map_err(EngineError::from)?;
        Ok(out)
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
            let r = match c {
                &StateCopy::Restore { seq, slot, covered } if restores => {
                    let s = self.sched.seq(seq).ok_or(StepError::Plan)?;
                    self.kv.restore_state(s.table(), slot, covered)
                }
                StateCopy::Load {
                    seq,
                    bytes,
                    covered,
                } if restores => {
                    let s = self.sched.seq(*seq).ok_or(StepError::Plan)?;
                    self.kv.load_state(s.table(), bytes, *covered)
                }
                &StateCopy::Save { seq, slot } if !restores => {
                    let s = self.sched.seq(seq).ok_or(StepError::Plan)?;
                    self.kv.save_state(s.table(), slot).map(|_| ())
                }
                _ => Ok(()),
            };
            r.map_err(EngineError::from)?;
        }
        Ok(())
    }

    /// Hands the blocks this step added to the prefix cache (or gave a checkpoint) to the
    /// disk tier's writer, with their states (their pages and checkpoint slots are the
    /// cache's until a later plan evicts or takes them).
    pub(super) fn run_persists(&mut self) -> Result<(), StepError> {
        let persists = self.sched.prefix_mut().take_persists();
        if self.disk.is_none() {
            return Ok(());
        }
        for p in persists {
            let with_state = p.state_slot.is_some();
            if self
                .disk
                .as_ref()
                .is_some_and(|d| d.knows(p.key, with_state))
            {
                continue;
            }
            // One copy, into a buffer the writer has finished with.
            let mut bytes = self.disk.as_mut().map(DiskTier::buffer).unwrap_or_default();
            self.kv
                .export_block(&p.pages, &mut bytes)
                .map_err(EngineError::from)?;
            let state = match p.state_slot {
                Some(slot) => Some(self.checkpoint_bytes(slot)?),
                None => None,
            };
            if let Some(d) = self.disk.as_mut() {
                d.write(p.key, p.parent, &p.tokens, bytes, state);
            }
        }
        Ok(())
    }

    /// Before a prompt is queued in the namespace whose chains start at `root`: asks the disk
    /// tier's reader for the blocks of its prefix that the pool and RAM do not hold and the
    /// tier's index does (at most half the RAM tier), as request `id`; false when nothing was
    /// asked (no disk tier or reader, nothing missing, or the index holds none of it: a disk
    /// miss, counted without a read), and the prompt can be queued now.
    pub(super) fn request_from_disk(&mut self, id: u64, root: u64, prompt: &[u32]) -> bool {
        let Some(disk) = self.disk.as_mut() else {
            return false;
        };
        let bs = self.kv.config().block_size;
        let mut parent = root;
        let mut blocks = Vec::new();
        for chunk in prompt
            .chunks_exact(bs)
            .take(prompt.len().saturating_sub(1) / bs)
        {
            let key = block_key(parent, chunk);
            if !self.sched.prefix_mut().holds(key) {
                blocks.push(Wanted {
                    key,
                    parent,
                    tokens: chunk.to_vec(),
                });
            }
            parent = key;
        }
        if blocks.is_empty() {
            return false;
        }
        disk.keep_known(&mut blocks);
        if blocks.is_empty() {
            disk.stats().misses.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let budget = self.sched.ram_tier().capacity() / 2;
        disk.request(ReadRequest {
            id,
            blocks,
            budget,
            epoch: 0,
        })
    }

    /// The disk reads finished since the last call: their blocks enter the RAM tier (where the
    /// lookup of their requests finds them), counted as disk hits or misses; returns their
    /// request ids, in order.
    pub(super) fn finished_disk_reads(&mut self) -> Vec<u64> {
        let Some(disk) = self.disk.as_mut() else {
            return Vec::new();
        };
        let done: Vec<ReadDone> = disk.completed();
        let st = std::sync::Arc::clone(disk.stats());
        let mut ids = Vec::with_capacity(done.len());
        for d in done {
            ids.push(d.id);
            if d.blocks.is_empty() {
                st.misses.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            st.hits.fetch_add(1, Ordering::Relaxed);
            let n = d.blocks.len();
            for f in d.blocks {
                let block = RamBlock {
                    kv: f.payload.into(),
                    state: f.state.map(Into::into),
                };
                self.sched
                    .prefix_mut()
                    .store_ram(f.key, f.parent, &f.tokens, block);
            }
            self.observer.on_tier_restore(CacheTier::Disk, n, d.elapsed);
        }
        ids
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
            t.disk_waiting = self.parked.len() as u64;
        }
        t
    }
}
