//! The disk tier's reader thread: reads and checks the blocks of a prompt's prefix off the
//! engine worker's thread, so a slow disk delays only the request waiting for them, never a
//! step of the sequences already running.
//!
//! Contracts:
//! - A [`ReadRequest`] names blocks in prompt order; the reader loads them in that order and
//!   stops at the first that is missing, fails a check or would pass the request's byte budget.
//!   Its [`ReadDone`] carries what it loaded (possibly nothing): a missing or damaged file
//!   only means fewer blocks, never an error.
//! - A file that fails a check is counted (`rejected`) and removed, as [`super::disk`] says.
//! - Answers come back in request order on the channel [`super::DiskTier::completed`] drains.

use super::disk::{file_path, DiskStats, Msg};
use super::disk_file::{BlockFile, BlockFileError};
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
}

/// What the reader found for request `id`: a prefix of its blocks, checked, and how long the
/// reads took.
#[derive(Debug)]
pub struct ReadDone {
    pub id: u64,
    pub blocks: Vec<BlockFile>,
    pub elapsed: Duration,
}

/// The thread's state.
pub(super) struct Reader {
    pub(super) dir: PathBuf,
    pub(super) identity: u64,
    pub(super) payload_len: usize,
    pub(super) state_len: usize,
    pub(super) stats: Arc<DiskStats>,
    /// The writer's queue, told which files were used (their LRU order).
    pub(super) touch: Option<mpsc::SyncSender<Msg>>,
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
        for w in &req.blocks {
            if bytes + self.payload_len + self.state_len > req.budget {
                break;
            }
            let Some(f) = self.read(w) else {
                break;
            };
            bytes += f.payload.len() + f.state.as_ref().map_or(0, Vec::len);
            blocks.push(f);
        }
        ReadDone {
            id: req.id,
            blocks,
            elapsed: t0.elapsed(),
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
                if let Some(tx) = &self.touch {
                    let _ = tx.try_send(Msg::Touch(w.key));
                }
                Some(f)
            }
            Err(e) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(file = %path.display(), error = %e,
                    "prefix cache: ignoring a disk-tier file that fails its checks (removed)");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::observer::NoopObserver;
    use crate::scheduler::prefix_cache::{block_key, DiskTier, ROOT};

    /// Three blocks written, then the middle one's file removed (as the writer's LRU might,
    /// or another replica's clear): a read of all three stops before it, without an error.
    #[test]
    fn a_read_stops_at_a_missing_file_and_answers_what_it_found() {
        let dir = std::env::temp_dir().join(format!("kiln-disk-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut t = DiskTier::open(&dir, 7, (8, 4), 1 << 20, Arc::new(NoopObserver));
        let mut wanted = Vec::new();
        let mut parent = ROOT;
        for b in 0..3u32 {
            let tokens = vec![b, b + 1];
            let key = block_key(parent, &tokens);
            let state = (b == 2).then(|| vec![b as u8; 4]);
            t.write(key, parent, &tokens, vec![b as u8; 8], state);
            wanted.push(Wanted {
                key,
                parent,
                tokens,
            });
            parent = key;
        }
        let t0 = Instant::now();
        while t.stats().written.load(Ordering::Relaxed) < 3 {
            assert!(t0.elapsed() < Duration::from_secs(10), "writes");
            std::thread::sleep(Duration::from_millis(2));
        }
        let read = |t: &mut DiskTier, id| {
            assert!(t.request(ReadRequest {
                id,
                blocks: wanted.clone(),
                budget: 1 << 20,
            }));
            let t0 = Instant::now();
            loop {
                if let Some(d) = t.completed().pop() {
                    assert_eq!(d.id, id);
                    return d.blocks;
                }
                assert!(t0.elapsed() < Duration::from_secs(10), "read {id}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let all = read(&mut t, 1);
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].state.as_deref(), Some(&[2u8; 4][..]));
        assert!(t.knows(all[2].key, true) && !t.knows(all[0].key, true));
        let sub = dir.join(format!("{:016x}", 7u64));
        std::fs::remove_file(sub.join(format!("{:016x}.kvb", wanted[1].key))).unwrap();
        let some = read(&mut t, 2);
        assert_eq!(some.len(), 1, "stops at the missing file");
        assert_eq!(t.stats().rejected.load(Ordering::Relaxed), 0);
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
