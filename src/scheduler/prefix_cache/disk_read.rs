//! The disk tier's reader thread: reads and checks the blocks of a prompt's prefix off the
//! engine worker's thread, so a slow disk delays only the request waiting for them, never a
//! step of the sequences already running.
//!
//! Contracts:
//! - A [`ReadRequest`] names blocks in prompt order; the reader loads them in that order and
//!   stops at the first that is missing, fails a check or would pass the request's byte budget.
//!   Its [`ReadDone`] carries what it loaded (possibly nothing): a missing or damaged file
//!   only means fewer blocks, never an error.
//! - A file that fails a check is counted (`rejected`) and removed, as the disk tier's docs say.
//! - Answers come back in request order on the channel `DiskTier::completed` drains.

use super::disk_file::{file_path, BlockFile, BlockFileError};
use super::disk_stats::DiskStats;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A block a request wants: its key, what it follows and its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub key: u64,
    pub parent: u64,
    pub tokens: Vec<u32>,
}

/// Blocks to read for request `id`, at most `budget` bytes of them.
#[derive(Debug)]
pub struct ReadRequest {
    pub id: u64,
    pub blocks: Vec<Wanted>,
    pub budget: usize,
    /// The tier's clear count when asked (set by `DiskTier::request`).
    pub epoch: u64,
}

/// What the reader found for request `id`: a prefix of its blocks, checked, and how long the
/// reads took.
#[derive(Debug)]
pub struct ReadDone {
    pub id: u64,
    pub blocks: Vec<BlockFile>,
    pub elapsed: Duration,
    /// The block the read stopped at because its file was missing or refused (not when the
    /// budget stopped it).
    pub missing: Option<u64>,
    /// The request's epoch.
    pub epoch: u64,
}

/// Tells the writer that the file of a block (its key) was read, without waiting.
pub(super) type Touch = Box<dyn Fn(u64) + Send>;

/// The thread's state.
pub(super) struct Reader {
    pub(super) dir: PathBuf,
    pub(super) identity: u64,
    pub(super) payload_len: usize,
    pub(super) state_len: usize,
    pub(super) stats: Arc<DiskStats>,
    /// Tells the writer which files were used (their LRU order).
    pub(super) touch: Option<Touch>,
}

impl Reader {
    pub(super) fn run(self, rx: mpsc::Receiver<ReadRequest>, tx: mpsc::Sender<ReadDone>) {
        while let Ok(req) = rx.recv() {
            let done = self.read_all(req);
            if tx.send(done).is_err() {
                break;
            }
        }
    }

    fn read_all(&self, req: ReadRequest) -> ReadDone {
        let t0 = Instant::now();
        let mut blocks = Vec::new();
        let mut bytes = 0;
        let mut missing = None;
        for w in &req.blocks {
            if bytes + self.payload_len + self.state_len > req.budget {
                break;
            }
            let Some(f) = self.read(w) else {
                missing = Some(w.key);
                break;
            };
            bytes += f.payload.len() + f.state.as_ref().map_or(0, Vec::len);
            blocks.push(f);
        }
        ReadDone {
            id: req.id,
            blocks,
            elapsed: t0.elapsed(),
            missing,
            epoch: req.epoch,
        }
    }

    /// Reads the block `w`: the file, or None when there is none or it fails a check (then
    /// counted and removed).
    pub(super) fn read(&self, w: &Wanted) -> Option<BlockFile> {
        let path = file_path(&self.dir, w.key);
        let bytes = std::fs::read(&path).ok()?;
        let checked = BlockFile::decode(
            &bytes,
            self.identity,
            w.key,
            self.payload_len,
            self.state_len,
        )
        .and_then(|f| {
            if f.parent == w.parent && f.tokens == w.tokens {
                Ok(f)
            } else {
                Err(BlockFileError::Key { key: w.key })
            }
        });
        match checked {
            Ok(f) => {
                self.stats.loaded.fetch_add(1, Ordering::Relaxed);
                if let Some(touch) = &self.touch {
                    touch(w.key);
                }
                Some(f)
            }
            Err(e) => {
                // Removed before it is counted: whoever sees the count sees the file gone.
                let _ = std::fs::remove_file(&path);
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(file = %path.display(), error = %e,
                    "prefix cache: ignoring a disk-tier file that fails its checks (removed)");
                None
            }
        }
    }
}
