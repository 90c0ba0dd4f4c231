//! The disk tier: blocks persisted in `dir/<model identity>/<key>.kvb` ([`super::disk_file`]),
//! written by a background thread so a step never waits for the disk, read back (and checked)
//! by another ([`super::disk_read`]) when a prompt arrives, so a restarted server, or another
//! replica on the same volume, reuses them. A recurrent model's block carrying a checkpoint is
//! written with its state.
//!
//! Contracts:
//! - Writes go through a bounded queue: when the writer is behind, a block is not written
//!   (counted), never waited for. A file appears under its name only when complete (written
//!   to a temporary name, then renamed).
//! - A file that fails any check (checksum, length, model identity, key) is never loaded: it is
//!   counted, and removed so it is not read again.
//! - An unwritable or full directory never fails a request: the tier logs a warning, counts
//!   the error, marks itself degraded (RAM only) and tries again after [`RETRY_AFTER`].
//! - The tier keeps at most `disk_bytes` of the files it knows (those it found at start and
//!   those it wrote), removing the least recently used (by modification time, which a read
//!   refreshes) first.
//! - [`DiskTier`] is owned by one worker; dropping it joins the reader thread (after the read
//!   in progress), then finishes the queued writes and joins the writer thread.

use super::disk_file::{file_path, BlockFile, EXT};
use super::disk_read::{ReadDone, ReadRequest, Reader};
use super::disk_stats::DiskStats;
use crate::scheduler::observer::Observer;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

/// Blocks waiting for the writer at most.
const QUEUE: usize = 256;
/// How long a degraded tier waits before writing again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// A block for the writer.
pub(super) struct Job {
    file: BlockFile,
    queued: Instant,
}

/// See the module docs.
pub struct DiskTier {
    /// Keys known to be on disk (found, written or read), and whether with a recurrent state:
    /// not exported again (unless a state is new).
    known: HashMap<u64, bool>,
    tx: Option<mpsc::SyncSender<Msg>>,
    writer: Option<std::thread::JoinHandle<()>>,
    reads: Option<mpsc::Sender<ReadRequest>>,
    done: mpsc::Receiver<ReadDone>,
    reader: Option<std::thread::JoinHandle<()>>,
    stats: Arc<DiskStats>,
}

pub(super) enum Msg {
    Write(Job),
    /// A file was read: it is recently used.
    Touch(u64),
    /// Remove every file.
    Clear,
}

impl DiskTier {
    /// The tier in `root/<identity hex>` for blocks of `payload_len` bytes (and recurrent
    /// states of `state_len`, 0 for a model without), keeping at most `max_bytes`; indexes
    /// what is there already. Never fails: a directory that cannot be made starts the tier
    /// degraded (with a warning); without a reader thread nothing is read.
    pub fn open(
        root: &Path,
        identity: u64,
        (payload_len, state_len): (usize, usize),
        max_bytes: u64,
        observer: Arc<dyn Observer>,
    ) -> DiskTier {
        let dir = root.join(format!("{identity:016x}"));
        let stats = Arc::new(DiskStats::default());
        let mut index = Index::new(max_bytes);
        match std::fs::create_dir_all(&dir) {
            Ok(()) => index.scan(&dir),
            Err(e) => degrade(&stats, &dir, &e),
        }
        // Files found at start: whether they carry a state is learnt when they are read.
        let known = index.files.keys().map(|&k| (k, false)).collect();
        stats
            .files
            .store(index.files.len() as u64, Ordering::Relaxed);
        stats.bytes.store(index.used, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let w = Writer {
            dir: dir.clone(),
            identity,
            index,
            stats: Arc::clone(&stats),
            observer,
            failed_at: None,
        };
        let writer = std::thread::Builder::new()
            .name("kiln-disk-tier".to_string())
            .spawn(move || w.run(rx))
            .ok();
        if writer.is_none() {
            tracing::warn!("cannot start the disk tier's writer thread: RAM only");
            stats.degraded.store(true, Ordering::Relaxed);
        }
        tracing::info!(dir = %dir.display(), files = stats.files.load(Ordering::Relaxed),
            bytes = stats.bytes.load(Ordering::Relaxed), "disk tier of the prefix cache");
        let tx = writer.as_ref().map(|_| tx);
        let r = Reader {
            dir,
            identity,
            payload_len,
            state_len,
            stats: Arc::clone(&stats),
            touch: tx.clone().map(|tx| -> super::disk_read::Touch {
                Box::new(move |key| {
                    let _ = tx.try_send(Msg::Touch(key));
                })
            }),
        };
        let (reads, reads_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("kiln-disk-read".to_string())
            .spawn(move || r.run(reads_rx, done_tx))
            .ok();
        if reader.is_none() {
            tracing::warn!("cannot start the disk tier's reader thread: nothing is read back");
        }
        DiskTier {
            known,
            tx,
            writer,
            reads: reader.as_ref().map(|_| reads),
            done,
            reader,
            stats,
        }
    }

    /// The tier's counters.
    pub fn stats(&self) -> &Arc<DiskStats> {
        &self.stats
    }

    /// Whether `key` is on disk as far as this tier knows, with a state if `with_state` (a
    /// block another replica wrote is found by a read, not here).
    pub fn knows(&self, key: u64, with_state: bool) -> bool {
        self.known.get(&key).is_some_and(|&s| s || !with_state)
    }

    /// Queues the block `key` (following `parent`, holding `tokens`, `payload` its bytes,
    /// `state` the recurrent state after it) for writing, unless it is known to be on disk
    /// (with a state when it has one); never waits (a full queue skips it).
    pub fn write(
        &mut self,
        key: u64,
        parent: u64,
        tokens: &[u32],
        payload: Vec<u8>,
        state: Option<Vec<u8>>,
    ) {
        let with_state = state.is_some();
        if self.knows(key, with_state) {
            return;
        }
        let Some(tx) = &self.tx else {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let job = Job {
            file: BlockFile {
                key,
                parent,
                tokens: tokens.to_vec(),
                payload,
                state,
            },
            queued: Instant::now(),
        };
        match tx.try_send(Msg::Write(job)) {
            Ok(()) => {
                self.known.insert(key, with_state);
            }
            Err(_) => {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Asks the reader thread for `req`'s blocks (answered through [`Self::completed`]); false
    /// when there is no reader (nothing will be answered).
    pub fn request(&mut self, req: ReadRequest) -> bool {
        self.reads.as_ref().is_some_and(|tx| tx.send(req).is_ok())
    }

    /// The reads finished since the last call, in request order. The blocks they loaded are
    /// known to be on disk from now on.
    pub fn completed(&mut self) -> Vec<ReadDone> {
        let done: Vec<ReadDone> = self.done.try_iter().collect();
        for d in &done {
            for f in &d.blocks {
                let s = self.known.entry(f.key).or_insert(false);
                *s |= f.state.is_some();
            }
        }
        done
    }

    /// Removes every file of this model's tier (queued writes still land, then are removed
    /// too if they were queued before).
    pub fn clear(&mut self) {
        self.known.clear();
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Clear);
        }
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        // The reader holds a sender of the writer's queue: it ends first.
        self.reads = None;
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Gives the calling thread the lowest CPU priority (Linux: a thread's nice value is its own),
/// so the writer takes CPU time the engine's steps leave, never theirs. Best effort.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority only reads its arguments and
        // changes this thread's nice value (an error just leaves it unchanged).
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        }
    }
}

fn degrade(stats: &DiskStats, dir: &Path, e: &std::io::Error) {
    stats.write_errors.fetch_add(1, Ordering::Relaxed);
    if !stats.degraded.swap(true, Ordering::Relaxed) {
        tracing::warn!(dir = %dir.display(), error = %e,
            "prefix cache: the disk tier cannot write; serving from RAM only (retrying later)");
    }
}

/// The files the writer knows: sizes and last use, and the bound.
struct Index {
    max: u64,
    used: u64,
    /// key -> (bytes, tick)
    files: HashMap<u64, (u64, u64)>,
    /// tick -> key, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

impl Index {
    fn new(max: u64) -> Index {
        Index {
            max,
            used: 0,
            files: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Indexes the block files in `dir`, oldest modification first.
    fn scan(&mut self, dir: &Path) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut found: Vec<(SystemTime, u64, u64)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let stem = name.to_str()?.strip_suffix(&format!(".{EXT}"))?;
                let key = u64::from_str_radix(stem, 16).ok()?;
                let m = e.metadata().ok()?;
                Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), key, m.len()))
            })
            .collect();
        found.sort();
        for (_, key, len) in found {
            self.add(key, len);
        }
    }

    fn add(&mut self, key: u64, len: u64) {
        self.remove(key);
        self.tick += 1;
        self.files.insert(key, (len, self.tick));
        self.lru.insert(self.tick, key);
        self.used += len;
    }

    fn touch(&mut self, key: u64) {
        if let Some(&(len, _)) = self.files.get(&key) {
            self.add(key, len);
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.files.remove(&key) {
            Some((len, tick)) => {
                self.lru.remove(&tick);
                self.used -= len;
                true
            }
            None => false,
        }
    }

    /// The least recently used key while over the bound.
    fn over(&self) -> Option<u64> {
        (self.used > self.max)
            .then(|| self.lru.values().next().copied())
            .flatten()
    }
}

/// The background thread's state.
struct Writer {
    dir: PathBuf,
    identity: u64,
    index: Index,
    stats: Arc<DiskStats>,
    observer: Arc<dyn Observer>,
    failed_at: Option<Instant>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        lower_priority();
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Write(job) => self.write(job),
                Msg::Touch(key) => {
                    self.index.touch(key);
                    // The modification time orders the files for the next start's index.
                    if let Ok(f) = std::fs::File::options()
                        .append(true)
                        .open(file_path(&self.dir, key))
                    {
                        let _ = f.set_modified(SystemTime::now());
                    }
                }
                Msg::Clear => {
                    let keys: Vec<u64> = self.index.files.keys().copied().collect();
                    for k in keys {
                        self.index.remove(k);
                        let _ = std::fs::remove_file(file_path(&self.dir, k));
                    }
                }
            }
            self.publish();
        }
    }

    fn publish(&self) {
        let s = &self.stats;
        s.files
            .store(self.index.files.len() as u64, Ordering::Relaxed);
        s.bytes.store(self.index.used, Ordering::Relaxed);
    }

    fn write(&mut self, job: Job) {
        if let Some(t) = self.failed_at {
            if t.elapsed() < RETRY_AFTER {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let t0 = Instant::now();
        let key = job.file.key;
        let bytes = job.file.encode(self.identity);
        match self.write_file(key, &bytes) {
            Ok(()) => {
                self.failed_at = None;
                self.stats.degraded.store(false, Ordering::Relaxed);
                self.stats.written.fetch_add(1, Ordering::Relaxed);
                self.index.add(key, bytes.len() as u64);
                while let Some(old) = self.index.over() {
                    self.index.remove(old);
                    let _ = std::fs::remove_file(file_path(&self.dir, old));
                }
                self.observer
                    .on_disk_write(t0.elapsed(), job.queued.elapsed());
            }
            Err(e) => {
                self.failed_at = Some(Instant::now());
                degrade(&self.stats, &self.dir, &e);
            }
        }
    }

    /// Writes `bytes` as `key`'s file: a temporary name, then a rename.
    fn write_file(&self, key: u64, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self
            .dir
            .join(format!(".{key:016x}.{}.tmp", std::process::id()));
        let res = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            std::fs::rename(&tmp, file_path(&self.dir, key))
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res
    }
}
