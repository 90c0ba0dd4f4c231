//! The async side's view of the engine: a cloneable [`EngineHandle`] that validates and routes
//! requests to the engine workers (OS threads), and the [`RequestStream`] of events each
//! request gets back. Dropping a stream aborts its request at the next step.

use crate::engine::kv_cache::KvLayout;
use crate::engine::pooling::PoolingType;
use crate::engine::{EngineError, Model};
use crate::random::random_u64;
use crate::scheduler::drain::WaitQueue;
use crate::scheduler::engine_config::EngineConfig;
use crate::scheduler::observer::Observer;
use crate::scheduler::request::{
    Event, GenerationRequest, SubmitError, MAX_N, MAX_STOPS, MAX_STOP_BYTES,
};
use crate::scheduler::state::{check_fits_layout, AdmitError, PoolShape};
use crate::scheduler::worker::{Command, Submission, Worker, WorkerShared, WorkerState};
use crate::tokenizer::Tokenizer;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// What callers may want to know about the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    pub n_ctx: usize,
    pub n_vocab: usize,
    /// The width of the model's hidden states (an embedding's length).
    pub n_embd: usize,
    /// How embeddings pool: the configured pooling, else the file's `pooling_type`, else
    /// mean. `none` and `rank` give no embedding ([`PoolingType::pooling`]).
    pub pooling: PoolingType,
    pub workers: usize,
    pub threads_per_worker: usize,
    pub kv_positions_per_worker: usize,
    pub block_size: usize,
    pub max_num_seqs: usize,
    pub max_batch_tokens: usize,
    pub max_waiting: usize,
    /// Bytes of one sequence's recurrent state (0 for a model of attention layers only): a
    /// fixed cost per running sequence beside its KV blocks.
    pub recurrent_state_bytes_per_seq: usize,
}

/// Load right now, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Requests accepted but not yet running.
    pub waiting: usize,
    /// Sequences running.
    pub running: usize,
    /// KV blocks held by sequences; blocks only the prefix cache holds; all blocks.
    pub kv_blocks_used: usize,
    pub kv_blocks_cached: usize,
    pub kv_blocks_total: usize,
}

struct Link {
    tx: mpsc::Sender<Command>,
    shared: Arc<WorkerShared>,
}

struct Inner {
    links: Vec<Link>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    info: EngineInfo,
    n_ctx: usize,
    kv_blocks: usize,
    /// How the model's layers share KV pages (sliding windows release local layers' pages).
    kv_layout: KvLayout,
    next_id: AtomicU64,
    /// Accepted requests not yet running, over all workers.
    waiting: Arc<WaitQueue>,
}

/// A place in the waiting queue, held for a request before its body is read, rendered and
/// tokenized ([`EngineHandle::reserve`]): it counts against `max_waiting` from the moment it
/// is taken, so the work done after it is never refused for capacity. Submitting with it
/// ([`EngineHandle::submit_reserved`]) uses it; dropping it unused gives the place back.
pub struct Reservation {
    queue: Arc<WaitQueue>,
    used: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.used {
            self.queue.give_back();
        }
    }
}

/// A cloneable handle to the engine workers. See the module docs.
#[derive(Clone)]
pub struct EngineHandle {
    inner: Arc<Inner>,
}

impl EngineHandle {
    /// Starts `cfg.workers` engine threads over `model` (the first worker runs on `model`
    /// itself, the others on replicas sharing its weights).
    pub fn start(
        model: Model,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
        observer: Arc<dyn Observer>,
    ) -> Result<EngineHandle, EngineError> {
        EngineHandle::start_with_draft(model, None, tokenizer, cfg, observer)
    }

    /// [`Self::start`] with a draft model for speculative decoding (`method = "draft"`): each
    /// worker runs it on its own team, with a draft KV cache of `cfg.kv_positions` positions
    /// (the caller sizes `kv_positions` so that both caches fit its budget). The draft must
    /// share the model's vocabulary ([`crate::scheduler::setup`] checks it).
    pub fn start_with_draft(
        model: Model,
        draft: Option<Model>,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
        observer: Arc<dyn Observer>,
    ) -> Result<EngineHandle, EngineError> {
        let workers = cfg.workers.max(1);
        let mut limits = cfg.limits;
        let model_ctx = model.desc().n_ctx_train;
        let n_embd = model.desc().n_embd;
        let recurrent_state_bytes_per_seq = model.state_shape(1).bytes();
        let pooling = cfg
            .pooling
            .map(PoolingType::from)
            .or(model.desc().pooling)
            .unwrap_or(PoolingType::Mean);
        limits.n_ctx = if limits.n_ctx == 0 {
            model_ctx
        } else {
            limits.n_ctx.min(model_ctx)
        };
        let threads = if cfg.threads == 0 {
            crate::engine::cpus::default_threads(workers)
        } else {
            cfg.threads
        };
        let kv_layout = model.kv_config(0, cfg.block_size).layout();
        let mut models = Vec::with_capacity(workers);
        for _ in 1..workers {
            models.push(model.replica(threads)?);
        }
        let threads_first = if model.team().threads() == threads {
            None
        } else {
            Some(model.replica(threads)?)
        };
        models.insert(0, threads_first.unwrap_or(model));
        let waiting = Arc::new(WaitQueue::default());
        let mut links = Vec::new();
        let mut handles = Vec::new();
        let mut kv_blocks = 0;
        for (i, m) in models.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            let worker = Worker::new(
                i,
                m,
                Arc::clone(&tokenizer),
                &cfg,
                limits,
                rx,
                Arc::clone(&observer),
                Arc::clone(&waiting),
                draft.as_ref(),
            )?;
            kv_blocks = worker.shared().kv_total;
            let shared = Arc::clone(worker.shared());
            let h = std::thread::Builder::new()
                .name(format!("kiln-worker-{i}"))
                .spawn(move || worker.run())
                .map_err(|e| EngineError::Team(e.to_string()))?;
            handles.push(h);
            links.push(Link { tx, shared });
        }
        let info = EngineInfo {
            n_ctx: limits.n_ctx,
            n_vocab: tokenizer.n_vocab(),
            n_embd,
            pooling,
            workers,
            threads_per_worker: threads,
            // Positions of every layer (a windowed model's local layers keep fewer: longer
            // sequences fit than this says).
            kv_positions_per_worker: kv_blocks * cfg.block_size / kv_layout.n_groups().max(1),
            block_size: cfg.block_size,
            max_num_seqs: limits.max_num_seqs,
            max_batch_tokens: limits.max_batch_tokens,
            max_waiting: limits.max_waiting,
            recurrent_state_bytes_per_seq,
        };
        Ok(EngineHandle {
            inner: Arc::new(Inner {
                links,
                threads: Mutex::new(handles),
                info,
                n_ctx: limits.n_ctx,
                kv_blocks,
                kv_layout,
                next_id: AtomicU64::new(1),
                waiting,
            }),
        })
    }

    pub fn info(&self) -> &EngineInfo {
        &self.inner.info
    }

    /// True unless a worker has failed for good (its thread ended, or its rebuild after a
    /// fault failed). A worker rebuilding after a fault is healthy: it serves again soon.
    pub fn is_healthy(&self) -> bool {
        self.inner.links.iter().all(|l| l.shared.is_healthy())
    }

    /// True while every worker is serving: not rebuilding after a fault, not failed.
    pub fn is_ready(&self) -> bool {
        self.inner
            .links
            .iter()
            .all(|l| l.shared.state() == WorkerState::Serving)
    }

    /// Load summed over the workers.
    pub fn load(&self) -> Load {
        let mut l = Load {
            waiting: self.inner.waiting.len(),
            ..Load::default()
        };
        for w in self.worker_loads() {
            l.running += w.running;
            l.kv_blocks_used += w.kv_blocks_used;
            l.kv_blocks_cached += w.kv_blocks_cached;
            l.kv_blocks_total += w.kv_blocks_total;
        }
        l
    }

    /// Each worker's load (its `waiting` is always 0: the queue bound is global).
    pub fn worker_loads(&self) -> Vec<Load> {
        self.inner
            .links
            .iter()
            .map(|link| {
                let s = &link.shared;
                Load {
                    waiting: 0,
                    running: s.running.load(Ordering::Relaxed),
                    kv_blocks_used: s.kv_used.load(Ordering::Relaxed),
                    kv_blocks_cached: s.kv_cached.load(Ordering::Relaxed),
                    kv_blocks_total: s.kv_total,
                }
            })
            .collect()
    }

    /// Checks everything that can be checked without the engine (parameters, sizes, context
    /// and KV capacity), so a refusal is immediate and names its reason.
    pub fn validate(&self, req: &GenerationRequest) -> Result<(), SubmitError> {
        let n_vocab = self.inner.info.n_vocab;
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        if let Some(&id) = req.prompt.iter().find(|&&id| id as usize >= n_vocab) {
            return Err(SubmitError::BadToken { id, n_vocab });
        }
        if req.max_tokens == 0 && !req.prompt_output.wants_rows() {
            return Err(SubmitError::ZeroMaxTokens);
        }
        let max_n = MAX_N.min(self.inner.info.max_num_seqs);
        if req.n == 0 || req.n > max_n {
            return Err(SubmitError::BadN {
                got: req.n,
                max: max_n,
            });
        }
        if req.stop.len() > MAX_STOPS || req.stop.iter().any(|s| s.len() > MAX_STOP_BYTES) {
            return Err(SubmitError::BadStop {
                max: MAX_STOPS,
                max_bytes: MAX_STOP_BYTES,
            });
        }
        if req.stop_token_ids.len() > MAX_STOPS {
            return Err(SubmitError::BadStop {
                max: MAX_STOPS,
                max_bytes: MAX_STOP_BYTES,
            });
        }
        if let Some(&id) = req
            .stop_token_ids
            .iter()
            .find(|&&id| id as usize >= n_vocab)
        {
            return Err(SubmitError::BadStopToken { id, n_vocab });
        }
        req.params.validate(n_vocab)?;
        let info = &self.inner.info;
        check_fits_layout(
            req.prompt.len(),
            req.max_tokens,
            req.n,
            self.inner.n_ctx,
            info.max_batch_tokens,
            PoolShape {
                layout: &self.inner.kv_layout,
                block_size: info.block_size,
                total: self.inner.kv_blocks,
            },
        )
        .map_err(|e| match e {
            AdmitError::KvCapacity { .. } => SubmitError::KvCapacity(e),
            AdmitError::EmptyPrompt => SubmitError::EmptyPrompt,
            _ => SubmitError::ContextLength(e),
        })
    }

    /// Takes a place in the waiting queue for a request to come: the cheap capacity check
    /// made before any work is spent on a request. Fails with [`SubmitError::Overloaded`]
    /// (and when to retry, from the queue's measured drain rate) when `max_waiting` places are
    /// taken, and with [`SubmitError::Unavailable`] when no worker can take requests.
    pub fn reserve(&self) -> Result<Reservation, SubmitError> {
        let inner = &self.inner;
        if !inner
            .links
            .iter()
            .any(|l| l.shared.is_healthy() && !l.shared.is_stopping())
        {
            return Err(SubmitError::Unavailable("no healthy engine worker"));
        }
        let max = inner.info.max_waiting;
        match inner.waiting.try_enter(max) {
            Ok(()) => Ok(Reservation {
                queue: Arc::clone(&inner.waiting),
                used: false,
            }),
            Err(waiting) => Err(SubmitError::Overloaded {
                waiting,
                retry_after: inner.waiting.retry_after(waiting, max),
            }),
        }
    }

    /// Validates `req` and queues it on the least loaded worker. Fails at once when it can
    /// never run, when the waiting queue is full ([`SubmitError::Overloaded`]) or when the
    /// engine is down.
    pub fn submit(&self, req: GenerationRequest) -> Result<RequestStream, SubmitError> {
        self.submit_reserved(req, None)
    }

    /// [`EngineHandle::submit`] in a place taken earlier by [`EngineHandle::reserve`] (a
    /// reservation of another engine is given back and a place taken here).
    pub fn submit_reserved(
        &self,
        req: GenerationRequest,
        reservation: Option<Reservation>,
    ) -> Result<RequestStream, SubmitError> {
        self.validate(&req)?;
        let inner = &self.inner;
        let mut place = match reservation {
            Some(r) if Arc::ptr_eq(&r.queue, &inner.waiting) => r,
            _ => self.reserve()?,
        };
        let link = inner
            .links
            .iter()
            .filter(|l| l.shared.is_healthy() && !l.shared.is_stopping())
            // A worker rebuilding after a fault takes requests (they wait in its channel for
            // the rebuild, milliseconds) only when no worker is serving.
            .min_by_key(|l| {
                let rebuilding = l.shared.state() != WorkerState::Serving;
                (rebuilding, l.shared.active.load(Ordering::Relaxed))
            })
            .ok_or(SubmitError::Unavailable("no healthy engine worker"))?;
        link.shared.active.fetch_add(1, Ordering::AcqRel);
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let unread = Arc::new(AtomicUsize::new(0));
        let seed = req.params.seed.unwrap_or_else(random_u64);
        let sub = Submission {
            id,
            req,
            seed,
            tx,
            unread: Arc::clone(&unread),
            arrived: Instant::now(),
        };
        if link.tx.send(Command::Submit(Box::new(sub))).is_err() {
            link.shared.active.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::Unavailable("the engine worker has stopped"));
        }
        // The worker accounts for the place from now on (it leaves the queue when the request
        // first runs or ends).
        place.used = true;
        Ok(RequestStream {
            id,
            rx,
            unread,
            abort: link.tx.clone(),
            done: false,
        })
    }

    /// Ends every request in flight with finish reason `abort` (the end of a drain).
    pub fn abort_all(&self) {
        for l in &self.inner.links {
            let _ = l.tx.send(Command::AbortAll);
        }
    }

    /// Drops every worker's prefix cache: unused cached KV blocks, the RAM tier and the disk
    /// tier's files (requests in flight keep their blocks). Applied in order with the requests
    /// submitted before it.
    pub fn clear_prefix_cache(&self) {
        for l in &self.inner.links {
            let _ = l.tx.send(Command::ClearPrefixCache);
        }
    }

    /// Stops the workers (requests in flight end with `abort`) and waits for their threads.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        for l in &self.links {
            l.shared.set_stopping();
            let _ = l.tx.send(Command::Shutdown);
        }
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
    }
}

/// The last handle gone: the workers stop and their threads are joined, which frees their
/// KV caches and model replicas (an unloaded model's memory is returned here).
impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The events of one request (see [`Event`]). Dropping it before the end aborts the request.
pub struct RequestStream {
    id: u64,
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    unread: Arc<AtomicUsize>,
    abort: mpsc::Sender<Command>,
    done: bool,
}

impl RequestStream {
    /// The request's id (unique per engine).
    pub fn id(&self) -> u64 {
        self.id
    }

    fn took(&mut self, ev: Option<Event>) -> Option<Event> {
        match &ev {
            Some(Event::Done { .. } | Event::Error { .. }) | None => self.done = true,
            Some(_) => {}
        }
        if ev.is_some() {
            self.unread.fetch_sub(1, Ordering::AcqRel);
        }
        ev
    }

    /// The next event; None after the last one.
    pub async fn recv(&mut self) -> Option<Event> {
        let ev = self.rx.recv().await;
        self.took(ev)
    }

    /// The next event, blocking the calling thread (not for async code).
    pub fn blocking_recv(&mut self) -> Option<Event> {
        let ev = self.rx.blocking_recv();
        self.took(ev)
    }

    /// Aborts the request now (the same as dropping the stream).
    pub fn abort(mut self) {
        self.send_abort();
    }

    fn send_abort(&mut self) {
        if !self.done {
            self.done = true;
            let _ = self.abort.send(Command::Abort(self.id));
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.send_abort();
    }
}
