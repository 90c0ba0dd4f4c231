//! The disk tier's counters, shared by its writer and reader threads and read by monitoring.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Counters and sizes of a disk tier since start, shared with its writer and monitoring.
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Files and bytes the tier knows of.
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    /// Blocks written, and writes that failed (the tier then degrades).
    pub written: AtomicU64,
    pub write_errors: AtomicU64,
    /// Blocks not written because the queue was full or the tier degraded.
    pub skipped: AtomicU64,
    /// Write jobs the writer is done with (written, failed, or dropped while degraded),
    /// incremented (Release) after the counters above: an owner that sees it reach the
    /// number it queued sees their final values.
    pub handled: AtomicU64,
    /// Blocks read back, and files refused by a check (see the module docs).
    pub loaded: AtomicU64,
    pub rejected: AtomicU64,
    /// Lookups that found at least one block, and lookups that found none.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Whether writes are off after an error (RAM only until the retry).
    pub degraded: AtomicBool,
}
