//! Grammar masks in a step: the constrained sequences' masks are computed on the worker's
//! long-lived mask thread while the forward pass runs on the worker team (a mask needs the
//! tokens so far, never the logits), so constrained and free sequences share one batch and a
//! free sequence's step time grows only by what mask work outlasts the forward pass.

use crate::scheduler::state::SeqId;
use crate::structured::SeqConstraint;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Masks a step computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskWork {
    /// Masks computed, and the mask thread's time computing them.
    pub masks: usize,
    pub compute: Duration,
    /// How long the step waited for masks after its forward pass ended.
    pub wait: Duration,
}

/// The constraints taken out of their sequences for the step.
pub type Pending = Vec<(SeqId, SeqConstraint)>;

/// One step's constraints on their way to the mask thread, tagged with the step's number so a
/// batch abandoned by a step that panicked is never mistaken for a later step's.
struct Job {
    tag: u64,
    pending: Pending,
}

/// A batch back from the mask thread: its constraints (masks computed) and the time it took.
struct Done {
    tag: u64,
    pending: Pending,
    compute: Duration,
}

/// The worker's mask thread, started on first use and kept for the worker's life (one OS
/// thread per worker, not one per step). Dropping it ends and joins the thread.
///
/// [`SeqConstraint::compute_mask`] turns a panic of the grammar engine into the sequence's
/// failure, so the thread outlives any one grammar. Should it be gone anyway (it could not be
/// started, or it died), masks are computed on the caller's thread after the forward pass:
/// slower, never wrong.
pub struct MaskThread {
    name: String,
    jobs: Option<mpsc::Sender<Job>>,
    done: Option<mpsc::Receiver<Done>>,
    thread: Option<JoinHandle<()>>,
    next_tag: u64,
}

impl MaskThread {
    /// A mask thread named `name` (started on first use).
    pub fn new(name: String) -> MaskThread {
        MaskThread {
            name,
            jobs: None,
            done: None,
            thread: None,
            next_tag: 0,
        }
    }

    /// The running thread's id (None before first use or once it ended).
    pub fn thread_id(&self) -> Option<std::thread::ThreadId> {
        self.thread
            .as_ref()
            .filter(|t| !t.is_finished())
            .map(|t| t.thread().id())
    }

    /// Whether the OS thread is running (started and not ended).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn start(&mut self) {
        if self.is_running() {
            return;
        }
        self.stop();
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let spawned = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || {
                while let Ok(Job { tag, mut pending }) = job_rx.recv() {
                    let t0 = Instant::now();
                    for (_, c) in pending.iter_mut() {
                        c.compute_mask();
                    }
                    let compute = t0.elapsed();
                    if done_tx
                        .send(Done {
                            tag,
                            pending,
                            compute,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
            });
        match spawned {
            Ok(t) => {
                self.jobs = Some(job_tx);
                self.done = Some(done_rx);
                self.thread = Some(t);
            }
            Err(e) => tracing::warn!(error = %e, "cannot start the mask thread; masks run inline"),
        }
    }

    /// Ends the thread (if any) and waits for it.
    fn stop(&mut self) {
        self.jobs = None;
        self.done = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Runs `forward` on this thread while the mask thread computes every pending mask;
    /// returns `forward`'s result and the mask work. On return `pending` holds the same
    /// constraints (masks computed), in the same order. With nothing pending the mask thread
    /// is not involved.
    pub fn overlapped<R>(
        &mut self,
        pending: &mut Pending,
        forward: impl FnOnce() -> R,
    ) -> (R, MaskWork) {
        if pending.is_empty() {
            return (forward(), MaskWork::default());
        }
        let masks = pending.len();
        self.start();
        self.next_tag += 1;
        let tag = self.next_tag;
        let job = Job {
            tag,
            pending: std::mem::take(pending),
        };
        let sent = match &self.jobs {
            Some(tx) => tx.send(job).map_err(|e| e.0.pending),
            None => Err(job.pending),
        };
        let r = forward();
        let t1 = Instant::now();
        let compute = match sent {
            Ok(()) => match self.receive(tag) {
                Some(done) => {
                    *pending = done.pending;
                    done.compute
                }
                // The thread died holding the batch: its constraints are gone, which the
                // caller sees as sequences missing from `pending`.
                None => Duration::ZERO,
            },
            Err(back) => {
                *pending = back;
                inline(pending)
            }
        };
        let work = MaskWork {
            masks,
            compute,
            wait: t1.elapsed(),
        };
        (r, work)
    }

    /// The batch tagged `tag`, skipping batches of steps that panicked before collecting
    /// theirs; None when the thread is gone.
    fn receive(&mut self, tag: u64) -> Option<Done> {
        let rx = self.done.as_ref()?;
        loop {
            match rx.recv() {
                Ok(done) if done.tag == tag => return Some(done),
                Ok(_) => continue,
                Err(_) => {
                    self.stop();
                    return None;
                }
            }
        }
    }
}

impl Drop for MaskThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Computes every pending mask on this thread; returns the time it took.
fn inline(pending: &mut Pending) -> Duration {
    let t0 = Instant::now();
    for (_, c) in pending.iter_mut() {
        c.compute_mask();
    }
    t0.elapsed()
}
