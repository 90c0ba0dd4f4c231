//! The disk tier: blocks persisted in `dir/<model identity>/<key>.kvb` ([`super::disk_file`]),
//! written by a background thread so a step never waits for the disk, read back (and checked)
//! by another ([`super::disk_read`]) when a prompt arrives, so a restarted server, or another
//! replica on the same volume, reuses them. A recurrent model's block carrying a checkpoint is
//! written with its state.
//!
//! Contracts:
//! - Writes go through a bounded queue: when the writer is behind, a block is not written
//!   (counted), never waited for. A file appears under its name only when complete (written
//!   to a temporary name, then renamed). The engine thread's part of a write is one copy of
//!   the block into a buffer the writer hands back ([`DiskTier::buffer`]); the writer streams
//!   it to the file with its checksum (no second copy).
//! - The tier keeps an index of the keys on disk (the files found at start, those queued for
//!   writing, those read; minus those the writer removed or a read found missing; plus those
//!   a rescan finds when the writer has been idle for [`RESCAN`], such as another replica's):
//!   a prompt whose blocks it does not hold is admitted at once, without asking the reader.
//!   A block another replica wrote since the last scan is thus recomputed, not read.
//! - A file that fails any check (checksum, length, model identity, key) is never loaded: it is
//!   counted, and removed so it is not read again.
//! - An unwritable or full directory never fails a request: the tier logs a warning, counts
//!   the error, marks itself degraded (RAM only) and tries again after [`RETRY_AFTER`].
//! - The tier keeps at most `disk_bytes` of the files it knows (those it found at start and
//!   those it wrote), removing the least recently used (by modification time, which a read
//!   refreshes) first.
//! - A clear ([`DiskTier::clear`]) also voids the reads in flight: their blocks are dropped
//!   when they arrive, never put back in RAM or the index.
//! - [`DiskTier`] is owned by one worker; dropping it joins the reader thread (after the read
//!   in progress), then finishes the queued writes and joins the writer thread.

use super::disk_file::{file_path, BlockFile, EXT};
use super::disk_read::{ReadDone, ReadRequest, Reader};
use super::disk_stats::DiskStats;
use crate::scheduler::observer::Observer;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

/// Blocks waiting for the writer at most.
const QUEUE: usize = 256;
/// How long a degraded tier waits before writing again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long the writer is idle before it looks for files it does not know (another replica's,
/// or ones removed behind its back).
pub const RESCAN: Duration = Duration::from_secs(30);
/// Write buffers the writer hands back for reuse at most.
const SPARE: usize = 8;

/// A block for the writer.
pub(super) struct Job {
    file: BlockFile,
    queued: Instant,
}

/// See the module docs.
pub struct DiskTier {
    /// The index: keys known to be on disk (see the module docs), and whether with a
    /// recurrent state: not exported again (unless a state is new).
    known: HashMap<u64, bool>,
    tx: Option<mpsc::SyncSender<Msg>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// What the writer removed or found, for the index.
    news: mpsc::Receiver<News>,
    /// Write buffers the writer is done with.
    spare: mpsc::Receiver<Vec<u8>>,
    reads: Option<mpsc::Sender<ReadRequest>>,
    done: mpsc::Receiver<ReadDone>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Bumped by each clear: a read asked before it is void.
    epoch: u64,
    /// Write jobs queued for the writer (see [`DiskStats::handled`]).
    queued: u64,
    stats: Arc<DiskStats>,
}

/// What the writer tells the index about files.
pub(super) enum News {
    /// A rescan found this key's file.
    Found(u64),
    /// The writer removed this key's file (over the bound), or a rescan found it gone.
    Gone(u64),
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
        lens: (usize, usize),
        max_bytes: u64,
        observer: Arc<dyn Observer>,
    ) -> DiskTier {
        DiskTier::open_with(root, identity, lens, max_bytes, observer, RESCAN)
    }

    /// [`Self::open`] with the writer rescanning after `rescan` idle instead of [`RESCAN`].
    pub(super) fn open_with(
        root: &Path,
        identity: u64,
        (payload_len, state_len): (usize, usize),
        max_bytes: u64,
        observer: Arc<dyn Observer>,
        rescan: Duration,
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
        let (news_tx, news) = mpsc::channel();
        let (spare_tx, spare) = mpsc::sync_channel(SPARE);
        let w = Writer {
            dir: dir.clone(),
            identity,
            scanned: dir_mtime(&dir),
            rescan_after: rescan,
            index,
            stats: Arc::clone(&stats),
            observer,
            failed_at: None,
            news: news_tx,
            spare: spare_tx,
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
            news,
            spare,
            reads: reader.as_ref().map(|_| reads),
            done,
            reader,
            epoch: 0,
            queued: 0,
            stats,
        }
    }

    /// The tier's counters.
    pub fn stats(&self) -> &Arc<DiskStats> {
        &self.stats
    }

    /// Write jobs the writer is done with so far (see [`DiskStats::handled`]).
    pub fn writes_handled(&self) -> u64 {
        self.stats.handled.load(Ordering::Acquire)
    }

    /// Whether blocks queued for writing are not written yet: their counters will still
    /// move, so an idle owner keeps publishing them (monitoring sees the last write).
    pub fn writes_pending(&self) -> bool {
        self.writes_handled() < self.queued
    }

    /// Whether `key` is on disk as far as the index knows, with a state if `with_state`.
    pub fn knows(&self, key: u64, with_state: bool) -> bool {
        self.known.get(&key).is_some_and(|&s| s || !with_state)
    }

    /// Cuts `wanted` (a prompt's blocks in order) before the first block the index does not
    /// hold: a read stops there anyway, so only what may be on disk is asked for (nothing,
    /// for a prompt the tier has never seen).
    pub fn keep_known(&self, wanted: &mut Vec<super::Wanted>) {
        let n = wanted
            .iter()
            .position(|w| !self.known.contains_key(&w.key))
            .unwrap_or(wanted.len());
        wanted.truncate(n);
    }

    /// An empty buffer for a block's bytes ([`Self::write`]'s `payload`): one the writer has
    /// finished with when there is one, so copying a block out allocates nothing.
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.try_recv().unwrap_or_default();
        b.clear();
        b
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
                self.queued += 1;
            }
            Err(_) => {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Asks the reader thread for `req`'s blocks (answered through [`Self::completed`]); false
    /// when there is no reader (nothing will be answered).
    pub fn request(&mut self, mut req: ReadRequest) -> bool {
        req.epoch = self.epoch;
        self.reads.as_ref().is_some_and(|tx| tx.send(req).is_ok())
    }

    /// The reads finished since the last call, in request order, after the writer's news
    /// entered the index. The blocks they loaded are known to be on disk from now on, and the
    /// first block a read did not find is not; a read asked before a clear answers no blocks.
    pub fn completed(&mut self) -> Vec<ReadDone> {
        for n in self.news.try_iter() {
            match n {
                News::Found(key) => {
                    self.known.entry(key).or_insert(false);
                }
                News::Gone(key) => {
                    self.known.remove(&key);
                }
            }
        }
        let mut done: Vec<ReadDone> = self.done.try_iter().collect();
        for d in &mut done {
            if d.epoch != self.epoch {
                d.blocks.clear();
                continue;
            }
            for f in &d.blocks {
                let s = self.known.entry(f.key).or_insert(false);
                *s |= f.state.is_some();
            }
            if let Some(key) = d.missing {
                self.known.remove(&key);
            }
        }
        done
    }

    /// Removes every file of this model's tier (queued writes still land, then are removed
    /// too if they were queued before) and voids the reads in flight.
    pub fn clear(&mut self) {
        self.known.clear();
        self.epoch += 1;
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

/// The directory's modification time (changes when a file appears or goes).
fn dir_mtime(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// The background thread's state.
struct Writer {
    dir: PathBuf,
    identity: u64,
    index: Index,
    /// The directory's modification time when it was last scanned, and how long the writer
    /// waits idle before it looks again.
    scanned: Option<SystemTime>,
    rescan_after: Duration,
    stats: Arc<DiskStats>,
    observer: Arc<dyn Observer>,
    failed_at: Option<Instant>,
    news: mpsc::Sender<News>,
    spare: mpsc::SyncSender<Vec<u8>>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        lower_priority();
        loop {
            let msg = match rx.recv_timeout(self.rescan_after) {
                Ok(msg) => msg,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.rescan();
                    self.publish();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
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

    /// Brings the index in line with the directory when it changed since the last scan: files
    /// it did not know are added (and over the bound, the oldest removed), files gone are
    /// dropped; the owner's index hears of both.
    fn rescan(&mut self) {
        let now = dir_mtime(&self.dir);
        if now.is_none() || now == self.scanned {
            return;
        }
        let mut found = Index::new(u64::MAX);
        found.scan(&self.dir);
        let gone: Vec<u64> = self
            .index
            .files
            .keys()
            .filter(|k| !found.files.contains_key(k))
            .copied()
            .collect();
        for k in gone {
            self.index.remove(k);
            let _ = self.news.send(News::Gone(k));
        }
        let mut new: Vec<(u64, u64, u64)> = found
            .files
            .iter()
            .filter(|(k, _)| !self.index.files.contains_key(k))
            .map(|(&k, &(len, tick))| (tick, k, len))
            .collect();
        new.sort_unstable();
        for (_, k, len) in new {
            self.index.add(k, len);
            let _ = self.news.send(News::Found(k));
        }
        self.trim();
        self.scanned = now;
    }

    /// Removes the least recently used files while over the bound.
    fn trim(&mut self) {
        while let Some(old) = self.index.over() {
            self.index.remove(old);
            let _ = std::fs::remove_file(file_path(&self.dir, old));
            let _ = self.news.send(News::Gone(old));
        }
    }

    fn publish(&self) {
        let s = &self.stats;
        s.files
            .store(self.index.files.len() as u64, Ordering::Relaxed);
        s.bytes.store(self.index.used, Ordering::Relaxed);
    }

    fn write(&mut self, job: Job) {
        self.write_job(job);
        self.stats.handled.fetch_add(1, Ordering::Release);
    }

    fn write_job(&mut self, job: Job) {
        if let Some(t) = self.failed_at {
            if t.elapsed() < RETRY_AFTER {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let t0 = Instant::now();
        let key = job.file.key;
        match self.write_file(&job.file) {
            Ok(len) => {
                self.failed_at = None;
                self.stats.degraded.store(false, Ordering::Relaxed);
                self.stats.written.fetch_add(1, Ordering::Relaxed);
                self.index.add(key, len as u64);
                self.trim();
                self.observer
                    .on_disk_write(t0.elapsed(), job.queued.elapsed());
            }
            Err(e) => {
                self.failed_at = Some(Instant::now());
                degrade(&self.stats, &self.dir, &e);
            }
        }
        // The buffer goes back to the engine thread for its next block (or is freed when
        // enough are waiting there).
        let _ = self.spare.try_send(job.file.payload);
    }

    /// Writes `file` under its key: a temporary name, then a rename. Returns the file's length.
    fn write_file(&self, file: &BlockFile) -> std::io::Result<usize> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self
            .dir
            .join(format!(".{:016x}.{}.tmp", file.key, std::process::id()));
        let res = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            let n = file.write_to(self.identity, &mut f)?;
            std::fs::rename(&tmp, file_path(&self.dir, file.key))?;
            Ok(n)
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res
    }
}
