//! The engine's one worker team: fork-join parallel loops with spinning workers.
//!
//! Every parallel region of the forward pass runs here. A decode step of a 30-layer model is
//! ~150 short regions (a few microseconds each), so the cost of starting and joining a region
//! is what matters: the calling thread takes part as worker 0, tasks are claimed from one
//! atomic counter, and idle workers spin on the region counter (as llama.cpp's thread pool
//! polls) for [`SPIN`] before parking on a condition variable, so back-to-back regions never
//! pay a futex wake-up while a step is running, and an idle engine burns no CPU.
//!
//! Its size defaults to the physical cores this process may use ([`crate::engine::cpus`]: the
//! affinity mask and the cgroup quota; hyper-threads share the vector units the
//! kernels saturate, so they add contention rather than speed). Regions do not nest: a
//! [`Team::run`] called from inside a task runs its tasks inline. A waiting thread (a worker
//! between regions, the caller at a join) first works through its [`Team::warm`] slot:
//! prefetching the next matrix it will multiply (see [`crate::engine::warm`]).

use crate::engine::error::EngineError;
use crate::engine::warm::WarmSlots;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker polls for the next region before it parks.
const SPIN: Duration = Duration::from_millis(2);

/// A region's task body: `f(task, worker)`.
type Task<'a> = dyn Fn(usize, usize) + Sync + 'a;

thread_local! {
    /// True while this thread runs tasks of a region (nested regions run inline).
    static IN_REGION: Cell<bool> = const { Cell::new(false) };
}

/// State shared by the caller and the workers.
struct Shared {
    /// Bumped once per region (after `job`, `n_tasks`, `next`, `pending` are set).
    epoch: AtomicU64,
    /// The current region's body, lifetime-erased: valid until `pending` reaches 0.
    job: Mutex<Option<JobPtr>>,
    n_tasks: AtomicUsize,
    /// Next unclaimed task.
    next: AtomicUsize,
    /// Workers (not counting the caller) that have not finished the current region.
    pending: AtomicUsize,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    /// A task of the current region panicked on a worker.
    panicked: AtomicBool,
    stop: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// What each thread prefetches while it waits (see [`Team::warm`]).
    warm: WarmSlots,
}

/// A `&Task` with its lifetime erased (see [`Team::run`] for why that is sound).
#[derive(Clone, Copy)]
struct JobPtr(*const Task<'static>);
// SAFETY: the pointee is `Sync` (Task requires it) and outlives every use (Team::run waits for
// all workers before returning), so the pointer may be sent to and shared by the workers.
unsafe impl Send for JobPtr {}

/// The team: `threads - 1` worker threads plus the calling thread.
pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Serializes regions started from different threads (the engine normally has one caller).
    caller: Mutex<()>,
}

impl Team {
    /// A team of `threads` (0 means one per usable physical core, [`crate::engine::cpus`]).
    pub fn new(threads: usize) -> Result<Team, EngineError> {
        let threads = if threads == 0 {
            crate::engine::cpus::default_threads(1)
        } else {
            threads
        };
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            warm: WarmSlots::new(threads),
        });
        let mut workers = Vec::with_capacity(threads.saturating_sub(1));
        for i in 1..threads {
            let sh = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("kiln-engine-{i}"))
                .spawn(move || worker(&sh, i))
                .map_err(|e| EngineError::Team(e.to_string()))?;
            workers.push(h);
        }
        Ok(Team {
            shared,
            workers,
            threads,
            caller: Mutex::new(()),
        })
    }

    /// Number of threads, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The team's idle-time prefetch slots, indexed like `f`'s `worker` in [`Team::run`]:
    /// a worker works through its slot while it waits for the next region, the caller
    /// through slot 0 while it waits at a region's join.
    pub fn warm(&self) -> &WarmSlots {
        &self.shared.warm
    }

    /// Runs `f(task, worker)` for every `task < n_tasks` across the team and returns when all
    /// have finished. `worker < threads()` identifies the thread (for per-thread scratch); tasks
    /// are claimed dynamically, in increasing order. Allocates nothing. A panic in a task is
    /// re-raised here after the region ends.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.threads == 1 || n_tasks == 1 || IN_REGION.get() {
            for t in 0..n_tasks {
                f(t, 0);
            }
            return;
        }
        let _one_caller = self.caller.lock().unwrap_or_else(|e| e.into_inner());
        let sh = &*self.shared;
        let job: *const Task<'_> = f;
        // SAFETY: (lifetime erasure) workers dereference the pointer only between seeing the
        // new epoch and decrementing `pending`; this function does not return (nor unwind)
        // before `pending` is 0, so `f` outlives every use.
        let job =
            JobPtr(unsafe { std::mem::transmute::<*const Task<'_>, *const Task<'static>>(job) });
        *sh.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        sh.n_tasks.store(n_tasks, Ordering::Relaxed);
        sh.next.store(0, Ordering::Relaxed);
        sh.pending.store(self.threads - 1, Ordering::Relaxed);
        sh.panicked.store(false, Ordering::Relaxed);
        sh.epoch.fetch_add(1, Ordering::SeqCst);
        if sh.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.wake.notify_all();
        }
        let caught = catch_unwind(AssertUnwindSafe(|| claim(sh, f, 0)));
        let mut spins = 0u32;
        while sh.pending.load(Ordering::Acquire) != 0 {
            if !sh.warm.step(0) {
                backoff(&mut spins);
            }
        }
        if let Err(p) = caught {
            std::panic::resume_unwind(p);
        }
        if sh.panicked.load(Ordering::Relaxed) {
            panic!("a task of an engine parallel region panicked on a worker thread");
        }
    }

    /// Calls `f(i, chunk)` for each `width`-long chunk `i` of `buf[..n * width]`, in parallel.
    pub fn for_chunks<T: Send>(
        &self,
        buf: &mut [T],
        width: usize,
        n: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let buf = &mut buf[..n * width];
        let base = SendPtr(buf.as_mut_ptr());
        self.run(n, &|i, _| {
            // SAFETY: chunk i is buf[i * width..(i + 1) * width], inside `buf` (i < n), and
            // each task index is run exactly once, so no two calls alias.
            let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(i * width), width) };
            f(i, chunk)
        });
    }
}

/// A raw pointer that may cross threads; users hand disjoint parts of its target to tasks.
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used to give tasks disjoint regions of one buffer; see the uses.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// One round of a wait loop: pause-spin at first, then yield the CPU so a waiter never keeps
/// a descheduled worker (or another process) from running on a busy machine.
#[inline]
fn backoff(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if *spins < YIELD_AFTER {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Pause-spins before a waiter starts yielding (~ tens of microseconds).
const YIELD_AFTER: u32 = 2000;

/// Claims and runs tasks of the current region until none are left.
fn claim(sh: &Shared, f: &Task<'_>, worker: usize) {
    /// Clears IN_REGION however `claim` ends (a task may panic).
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_REGION.set(false);
        }
    }
    let n = sh.n_tasks.load(Ordering::Relaxed);
    IN_REGION.set(true);
    let _leave = Leave;
    loop {
        let t = sh.next.fetch_add(1, Ordering::Relaxed);
        if t >= n {
            break;
        }
        f(t, worker);
    }
}

/// A worker thread: wait for a region (spin, then park), run its tasks, report, repeat.
fn worker(sh: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if sh.epoch.load(Ordering::Acquire) != seen || sh.stop.load(Ordering::Relaxed) {
                break;
            }
            if sh.warm.step(index) {
                continue;
            }
            backoff(&mut spins);
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN {
                let mut g = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
                sh.sleeping.fetch_add(1, Ordering::SeqCst);
                while sh.epoch.load(Ordering::SeqCst) == seen && !sh.stop.load(Ordering::SeqCst) {
                    g = sh.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                sh.sleeping.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        seen = sh.epoch.load(Ordering::Acquire);
        let job = *sh.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobPtr(p)) = job {
            // SAFETY: see JobPtr and Team::run: the region's caller keeps the closure alive
            // until `pending` reaches 0, which happens only after this use.
            let f = unsafe { &*p };
            if catch_unwind(AssertUnwindSafe(|| claim(sh, f, index))).is_err() {
                sh.panicked.store(true, Ordering::Relaxed);
            }
        }
        sh.pending.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("threads", &self.threads)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_task_runs_exactly_once_on_a_valid_worker() {
        let p = Team::new(3).unwrap();
        assert_eq!(p.threads(), 3);
        for n in [0usize, 1, 2, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            p.run(n, &|t, w| {
                assert!(w < 3);
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
        assert!(crate::engine::cpus::default_threads(1) >= 1);
    }

    #[test]
    fn wakes_parked_workers_and_nests_inline() {
        let p = Team::new(2).unwrap();
        std::thread::sleep(SPIN * 3); // the worker parks
        let sum = AtomicUsize::new(0);
        p.run(4, &|t, _| {
            // A nested region runs inline on this thread.
            p.run(3, &|u, _| {
                sum.fetch_add(t * 3 + u, Ordering::Relaxed);
            });
        });
        assert_eq!(sum.load(Ordering::Relaxed), (0..12).sum::<usize>());
        let mut v = vec![0u32; 10];
        p.for_chunks(&mut v, 2, 5, |i, c| c.fill(i as u32));
        assert_eq!(v, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn a_task_panic_reaches_the_caller_and_the_team_survives() {
        let p = Team::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            p.run(64, &|t, _| {
                if t == 40 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        p.run(10, &|_, _| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 10);
    }
}
