//! One engine worker: an OS thread that owns a model replica (with its worker team), a KV
//! cache, the forward pass's scratch and a [`Scheduler`], and loops: take commands, plan a
//! step, copy shared blocks, run one ragged forward pass, sample, and hand each sampled token
//! to output processing ([`output`]: grammar commit, detokenize, stop strings, events). When
//! no sequence is left it blocks on its command channel, so an idle server costs no CPU.

use crate::engine::kv_cache::{KvCache, KvCacheConfig};
use crate::engine::{BatchLimits, EngineError, ForwardScratch, LlamaModel, LogitsWanted, SeqInput};
use crate::scheduler::constrain::{self, MaskWork, Pending};
use crate::scheduler::engine_config::EngineConfig;
use crate::scheduler::observer::{Observer, StepKind, StepStats};
use crate::scheduler::request::{Event, FinishReason, GenerationRequest};
use crate::scheduler::sampling::SampleScratch;
use crate::scheduler::state::{Limits, Scheduler, SeqId, StepPlan};
use crate::structured::SeqConstraint;
use crate::tokenizer::Tokenizer;
use output::{req_of, seq_id, Outputs, Req, SeqOut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod output;
mod sample;
mod shared;

pub(crate) use shared::WorkerShared;

/// Messages from handles to a worker.
pub(crate) enum Command {
    Submit(Box<Submission>),
    /// The request's stream was dropped or aborted.
    Abort(u64),
    /// End every request in flight (finish reason `abort`).
    AbortAll,
    /// Abort everything and stop the thread.
    Shutdown,
}

/// A request on its way to a worker.
pub(crate) struct Submission {
    pub id: u64,
    pub req: GenerationRequest,
    /// The effective seed (the request's, or a random one).
    pub seed: u64,
    pub tx: tokio::sync::mpsc::UnboundedSender<Event>,
    /// Events sent and not yet read by the stream.
    pub unread: Arc<AtomicUsize>,
    pub arrived: Instant,
}

pub(crate) struct Worker {
    index: usize,
    model: LlamaModel,
    kv: KvCache,
    scratch: ForwardScratch,
    sched: Scheduler<SeqOut>,
    rx: mpsc::Receiver<Command>,
    observer: Arc<dyn Observer>,
    shared: Arc<WorkerShared>,
    outputs: Outputs,
    /// One per thread of the model's worker team (sampling runs on the team).
    sample_scratch: Vec<Mutex<SampleScratch>>,
    /// The step's logits rows, copied out of the scratch.
    rows: Vec<f32>,
    steps: u64,
    panic_at_step: Option<u64>,
    max_unread_events: usize,
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        model: LlamaModel,
        tok: Arc<Tokenizer>,
        cfg: &EngineConfig,
        limits: Limits,
        rx: mpsc::Receiver<Command>,
        observer: Arc<dyn Observer>,
        waiting: Arc<AtomicUsize>,
    ) -> Result<Worker, EngineError> {
        let kv_cfg: KvCacheConfig = model.kv_config(cfg.kv_positions, cfg.block_size);
        let kv = KvCache::new(kv_cfg)?;
        let batch = BatchLimits {
            max_tokens: limits.max_batch_tokens,
            max_seqs: limits.max_num_seqs,
            max_logit_rows: limits.max_num_seqs,
        };
        let scratch = model.new_scratch(batch, &kv_cfg)?;
        // The handle bounds the queue; the state machine's own bound must never refuse what
        // the handle accepted.
        let sched_limits = Limits {
            max_waiting: usize::MAX,
            ..limits
        };
        let sched = Scheduler::new(sched_limits, kv.allocator().clone());
        let shared = Arc::new(WorkerShared::new(kv.total_blocks()));
        let sample_scratch = (0..model.pool().threads())
            .map(|_| Mutex::new(SampleScratch::new()))
            .collect();
        let outputs = Outputs::new(
            index,
            tok,
            Arc::clone(&observer),
            Arc::clone(&shared),
            waiting,
        );
        Ok(Worker {
            index,
            model,
            kv,
            scratch,
            sched,
            rx,
            observer,
            shared,
            outputs,
            sample_scratch,
            rows: Vec::new(),
            steps: 0,
            panic_at_step: cfg.panic_at_step,
            max_unread_events: cfg.max_unread_events.max(1),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<WorkerShared> {
        &self.shared
    }

    /// The thread's body: runs until shutdown or until every handle is gone.
    pub(crate) fn run(mut self) {
        loop {
            if self.sched.is_idle() {
                // Nothing to compute: sleep until a command arrives (an idle server burns no CPU).
                match self.rx.recv() {
                    Ok(cmd) => {
                        if !self.command(cmd) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut go_on = true;
            while let Ok(cmd) = self.rx.try_recv() {
                if !self.command(cmd) {
                    go_on = false;
                    break;
                }
            }
            if !go_on {
                break;
            }
            // A step publishes the load itself (with its stats); otherwise publish it here.
            if self.sched.is_idle() {
                self.shared.publish_load(&self.sched);
            } else {
                self.step();
            }
        }
        self.outputs.abort_all(&mut self.sched, FinishReason::Abort);
        self.shared.set_unhealthy();
    }

    /// Applies one command; false when the worker must stop.
    fn command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(sub) => self.admit(*sub),
            Command::Abort(id) => {
                self.outputs
                    .abort_request(&mut self.sched, id, FinishReason::Abort)
            }
            Command::AbortAll => self.outputs.abort_all(&mut self.sched, FinishReason::Abort),
            Command::Shutdown => return false,
        }
        true
    }

    fn admit(&mut self, sub: Submission) {
        let Submission {
            id,
            req,
            seed,
            tx,
            unread,
            arrived,
        } = sub;
        let n = req.n.max(1);
        let r = Req::new(req, seed, tx, unread, self.max_unread_events, arrived);
        if !self.shared.is_healthy() {
            let message = "the engine failed earlier and is not serving".to_string();
            self.outputs.refuse(r, message);
            return;
        }
        let constraint = r
            .req
            .constraint
            .as_ref()
            .map(|c| SeqConstraint::new(c.start()));
        let out = SeqOut::new(id, 0, &r, constraint, n == 1);
        let prompt = r.req.prompt.clone();
        match self
            .sched
            .add(seq_id(id, 0), prompt, r.req.max_tokens, n, out)
        {
            Ok(()) => self.outputs.insert(id, r),
            Err(e) => self.outputs.refuse(r, e.to_string()),
        }
    }

    /// Plans and runs one step.
    fn step(&mut self) {
        let t0 = Instant::now();
        // Prefix-cache lookups happen while planning.
        let before = self.sched.prefix_stats();
        let plan = self.sched.schedule();
        if plan.is_empty() {
            // Nothing could be scheduled (should not happen: the oldest sequence can always
            // preempt the others); avoid spinning hot.
            self.shared.publish_load(&self.sched);
            std::thread::sleep(Duration::from_millis(1));
            return;
        }
        self.steps += 1;
        for it in &plan.items {
            self.outputs.mark_admitted(req_of(it.seq), t0);
        }
        let mut masks = MaskWork::default();
        match self.execute(&plan, &mut masks) {
            Ok(()) => {}
            Err(fatal) => self.fail(&plan, fatal),
        }
        let after = self.sched.prefix_stats();
        self.publish(
            &plan,
            t0,
            after.queries - before.queries,
            after.hits - before.hits,
            masks,
        );
    }

    /// Copies shared blocks, runs the forward pass and handles each sequence's logits. An
    /// error (or a panic) in the forward pass is returned: `Err(true)` when it was a panic.
    fn execute(&mut self, plan: &StepPlan, masks: &mut MaskWork) -> Result<(), bool> {
        for &(src, dst) in &plan.copies {
            self.kv.copy_block(src, dst).map_err(|_| false)?;
        }
        if self.panic_at_step == Some(self.steps) {
            // Testing only (EngineConfig::panic_at_step): a fault inside a step.
            let r = catch_unwind(|| panic!("injected engine fault (panic_at_step)"));
            return r.map_err(|_| true);
        }
        // The masks of constrained sequences that sample this step, computed beside the forward
        // pass.
        let mut pending: Pending = plan
            .items
            .iter()
            .filter(|it| it.logits)
            .filter_map(|it| {
                let c = self.sched.seq_mut(it.seq)?.payload.constraint.take()?;
                Some((it.seq, c))
            })
            .collect();
        let Worker {
            model,
            kv,
            scratch,
            sched,
            rows,
            ..
        } = self;
        let inputs: Vec<SeqInput<'_>> = plan
            .items
            .iter()
            .filter_map(|it| {
                let s = sched.seq(it.seq)?;
                Some(SeqInput {
                    tokens: &s.tokens[it.start..it.start + it.len],
                    start_pos: it.start,
                    table: s.table(),
                    logits: if it.logits {
                        LogitsWanted::Last
                    } else {
                        LogitsWanted::None
                    },
                })
            })
            .collect();
        if inputs.len() != plan.items.len() {
            return Err(false);
        }
        // The logits rows are copied out of the scratch (about 1% of a step) so that sampling
        // can update the scheduler while reading them.
        let (out, work) = constrain::overlapped(&mut pending, || {
            catch_unwind(AssertUnwindSafe(|| {
                let logits = model.forward(&inputs, kv, scratch)?;
                rows.clear();
                rows.extend_from_slice(logits.as_slice());
                Ok::<usize, EngineError>(logits.n_vocab())
            }))
        });
        drop(inputs);
        *masks = work;
        for (sid, c) in pending {
            if let Some(s) = self.sched.seq_mut(sid) {
                s.payload.constraint = Some(c);
            }
        }
        let n_vocab = match out {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                tracing::error!(worker = self.index, error = %e, "engine step failed");
                return Err(false);
            }
            Err(_) => {
                tracing::error!(worker = self.index, "engine step panicked");
                return Err(true);
            }
        };
        let rows = std::mem::take(&mut self.rows);
        let row = |k: usize| &rows[k * n_vocab..(k + 1) * n_vocab];
        // Sequences whose first token forks the other choices go one by one; the rest are
        // sampled in parallel on the worker team, then emitted in plan order.
        let mut batch: Vec<(SeqId, usize)> = Vec::new();
        let mut next_row = 0;
        for it in &plan.items {
            self.sched.advance(it.seq, it.len);
            if it.logits {
                let k = next_row;
                next_row += 1;
                match self.sched.seq(it.seq) {
                    Some(s) if !s.payload.forked => self.on_first_logits(it.seq, row(k)),
                    Some(_) => batch.push((it.seq, k)),
                    None => {}
                }
            }
        }
        let sampled = self.sample_many(&batch, &rows, n_vocab);
        for ((sid, _), sampled) in batch.into_iter().zip(sampled) {
            self.outputs.emit(&mut self.sched, sid, sampled);
        }
        self.rows = rows;
        Ok(())
    }

    /// The first token of a request with `n > 1` choices: fork the other choices (sharing the
    /// prompt's blocks) and sample each of them and the parent from the same logits.
    fn on_first_logits(&mut self, sid: SeqId, row: &[f32]) {
        let Some(s) = self.sched.seq(sid) else {
            return;
        };
        let req_id = s.payload.req;
        // Each choice follows the grammar on its own, from the parent's state (and mask).
        let constraint = s.payload.constraint.clone();
        let mut forks = Vec::new();
        if let Some(r) = self.outputs.get(req_id) {
            for c in 1..r.finish.len() {
                if r.finish[c].is_none() {
                    let payload = SeqOut::new(req_id, c, r, constraint.clone(), true);
                    forks.push((seq_id(req_id, c), payload));
                }
            }
        }
        if let Some(s) = self.sched.seq_mut(sid) {
            s.payload.forked = true;
        }
        for (new, payload) in forks {
            if self.sched.fork(sid, new, payload) {
                let sampled = self.sample_one(new, row);
                self.outputs.emit(&mut self.sched, new, sampled);
            }
        }
        let sampled = self.sample_one(sid, row);
        self.outputs.emit(&mut self.sched, sid, sampled);
    }

    /// A step failed: its requests end with an error. A panic also marks the worker unhealthy
    /// and fails everything it holds (its state can no longer be trusted).
    fn fail(&mut self, plan: &StepPlan, panicked: bool) {
        let mut reqs: Vec<u64> = plan.items.iter().map(|it| req_of(it.seq)).collect();
        if panicked {
            self.shared.set_unhealthy();
            reqs = self.outputs.ids();
        }
        reqs.sort_unstable();
        reqs.dedup();
        for id in reqs {
            self.outputs
                .abort_request(&mut self.sched, id, FinishReason::Error);
        }
    }

    /// Publishes the load for handles and hands the step's numbers to the observer.
    fn publish(&self, plan: &StepPlan, t0: Instant, queries: u64, hits: u64, masks: MaskWork) {
        let (used, cached, total) = self.shared.publish_load(&self.sched);
        let decode = plan
            .items
            .iter()
            .filter(|it| it.len == 1 && it.logits)
            .count();
        let tokens = plan.tokens();
        let phase = match (decode, tokens - decode) {
            (0, _) => StepKind::Prefill,
            (_, 0) => StepKind::Decode,
            _ => StepKind::Mixed,
        };
        self.observer.on_step(&StepStats {
            worker: self.index,
            phase,
            seqs: plan.items.len(),
            tokens,
            prefill_tokens: tokens - decode,
            decode_tokens: decode,
            duration: t0.elapsed(),
            running: self.sched.n_running(),
            waiting: self.sched.n_waiting(),
            kv_blocks_used: used,
            kv_blocks_total: total,
            kv_blocks_cached: cached,
            preemptions: plan.preempted.len(),
            prefix_queries: queries,
            prefix_hits: hits,
            masks: masks.masks,
            mask_time: masks.compute,
            mask_wait: masks.wait,
        });
    }
}
