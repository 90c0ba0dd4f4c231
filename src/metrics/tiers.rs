//! The prefix cache's tiers as metrics: lookups by tier and result, blocks and bytes held,
//! blocks moved, restore and disk write latency. Workers report totals since their start
//! ([`TierStats`]); this turns them into counter increments (a rebuilt worker starts again from
//! zero) and sums the gauges over workers.

use super::names::*;
use crate::scheduler::{CacheTier, TierStats};
use prometheus::{
    HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Restore and write latency buckets, 100 µs to 10 s (a block's copy is microseconds, a long
/// prompt's restore tens of milliseconds, a disk read more).
const TIER_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];

/// See the module docs.
pub(super) struct TierMetrics {
    lookups: IntCounterVec,
    spilled: prometheus::IntCounter,
    disk_blocks: IntCounterVec,
    restore: HistogramVec,
    disk_write: prometheus::Histogram,
    blocks: IntGaugeVec,
    bytes: IntGaugeVec,
    degraded: IntGauge,
    /// Each worker's last report.
    last: Mutex<HashMap<usize, TierStats>>,
}

impl TierMetrics {
    pub(super) fn new(r: &Registry) -> Result<TierMetrics, prometheus::Error> {
        let m = TierMetrics {
            lookups: IntCounterVec::new(Opts::new(PREFIX_TIER_LOOKUPS, "Prefix-cache lookups by tier (pool: the KV cache, ram, disk) and result: hit when the tier served at least one block of a lookup that reached it, miss when it served none."), &["tier", "result"])?,
            spilled: prometheus::IntCounter::new(PREFIX_TIER_SPILLED, "KV blocks the KV cache evicted into the RAM tier.")?,
            disk_blocks: IntCounterVec::new(Opts::new(PREFIX_DISK_BLOCKS, "Disk-tier blocks by outcome: written; skipped (writer behind or directory unwritable); rejected (a file failing its checksum, length, model identity or key: ignored and removed); write_error."), &["outcome"])?,
            restore: HistogramVec::new(HistogramOpts::new(PREFIX_TIER_RESTORE, "Time to bring a lookup's blocks back from a tier: ram (copied into the KV cache in a step), disk (read and checked into RAM when the request arrives).").buckets(TIER_BUCKETS.to_vec()), &["tier"])?,
            disk_write: prometheus::Histogram::with_opts(HistogramOpts::new(PREFIX_DISK_WRITE, "Time to write one block to the disk tier (in the background writer).").buckets(TIER_BUCKETS.to_vec()))?,
            blocks: IntGaugeVec::new(Opts::new(PREFIX_TIER_BLOCKS, "Blocks held by the prefix cache's tiers below the KV cache (ram, disk)."), &["tier"])?,
            bytes: IntGaugeVec::new(Opts::new(PREFIX_TIER_BYTES, "Bytes held by the prefix cache's tiers below the KV cache (ram, disk)."), &["tier"])?,
            degraded: IntGauge::new(PREFIX_DISK_DEGRADED, "1 while a configured disk tier cannot write (full or unwritable directory): RAM only until a retry succeeds.")?,
            last: Mutex::new(HashMap::new()),
        };
        r.register(Box::new(m.lookups.clone()))?;
        r.register(Box::new(m.spilled.clone()))?;
        r.register(Box::new(m.disk_blocks.clone()))?;
        r.register(Box::new(m.restore.clone()))?;
        r.register(Box::new(m.disk_write.clone()))?;
        r.register(Box::new(m.blocks.clone()))?;
        r.register(Box::new(m.bytes.clone()))?;
        r.register(Box::new(m.degraded.clone()))?;
        // Series that exist from the start.
        for tier in ["pool", "ram", "disk"] {
            for result in ["hit", "miss"] {
                m.lookups.with_label_values(&[tier, result]);
            }
        }
        for tier in ["ram", "disk"] {
            m.restore.with_label_values(&[tier]);
            m.blocks.with_label_values(&[tier]);
            m.bytes.with_label_values(&[tier]);
        }
        for o in ["written", "skipped", "rejected", "write_error"] {
            m.disk_blocks.with_label_values(&[o]);
        }
        Ok(m)
    }

    pub(super) fn on_tiers(&self, t: &TierStats) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let prev = last.insert(t.worker, *t).unwrap_or_default();
        let d = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
        let counters = [
            (&self.lookups, ["pool", "hit"], t.pool_hits, prev.pool_hits),
            (
                &self.lookups,
                ["pool", "miss"],
                t.pool_misses,
                prev.pool_misses,
            ),
            (&self.lookups, ["ram", "hit"], t.ram_hits, prev.ram_hits),
            (
                &self.lookups,
                ["ram", "miss"],
                t.ram_misses,
                prev.ram_misses,
            ),
            (&self.lookups, ["disk", "hit"], t.disk_hits, prev.disk_hits),
            (
                &self.lookups,
                ["disk", "miss"],
                t.disk_misses,
                prev.disk_misses,
            ),
        ];
        for (c, labels, now, before) in counters {
            c.with_label_values(&labels).inc_by(d(now, before));
        }
        let disk = [
            ("written", t.disk_written, prev.disk_written),
            ("skipped", t.disk_skipped, prev.disk_skipped),
            ("rejected", t.disk_rejected, prev.disk_rejected),
            ("write_error", t.disk_write_errors, prev.disk_write_errors),
        ];
        for (o, now, before) in disk {
            self.disk_blocks
                .with_label_values(&[o])
                .inc_by(d(now, before));
        }
        self.spilled.inc_by(d(t.spilled, prev.spilled));
        let sum = |f: fn(&TierStats) -> u64| last.values().map(f).sum::<u64>() as i64;
        self.blocks
            .with_label_values(&["ram"])
            .set(sum(|s| s.ram_blocks));
        self.bytes
            .with_label_values(&["ram"])
            .set(sum(|s| s.ram_bytes));
        // Workers share the disk tier's directory: the largest view of it, not the sum.
        let max = |f: fn(&TierStats) -> u64| last.values().map(f).max().unwrap_or(0) as i64;
        self.blocks
            .with_label_values(&["disk"])
            .set(max(|s| s.disk_blocks));
        self.bytes
            .with_label_values(&["disk"])
            .set(max(|s| s.disk_bytes));
        self.degraded
            .set(i64::from(last.values().any(|s| s.disk_degraded)));
    }

    /// Every worker's last report added up (the disk tier, shared, counted once: the
    /// largest view of it), for `/stats`.
    pub(super) fn now(&self) -> TierStats {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let mut t = TierStats::default();
        for s in last.values() {
            t.pool_hits += s.pool_hits;
            t.pool_misses += s.pool_misses;
            t.ram_hits += s.ram_hits;
            t.ram_misses += s.ram_misses;
            t.disk_hits += s.disk_hits;
            t.disk_misses += s.disk_misses;
            t.ram_blocks += s.ram_blocks;
            t.ram_bytes += s.ram_bytes;
            t.disk_blocks = t.disk_blocks.max(s.disk_blocks);
            t.disk_bytes = t.disk_bytes.max(s.disk_bytes);
            t.spilled += s.spilled;
            t.disk_written += s.disk_written;
            t.disk_skipped += s.disk_skipped;
            t.disk_rejected += s.disk_rejected;
            t.disk_write_errors += s.disk_write_errors;
            t.disk_degraded |= s.disk_degraded;
            t.disk_waiting += s.disk_waiting;
        }
        t
    }

    pub(super) fn on_restore(&self, tier: CacheTier, took: Duration) {
        self.restore
            .with_label_values(&[tier.as_str()])
            .observe(took.as_secs_f64());
    }

    pub(super) fn on_disk_write(&self, took: Duration) {
        self.disk_write.observe(took.as_secs_f64());
    }
}
