//! One engine worker: an OS thread that owns a model replica (with its worker team), a KV
//! cache, the forward pass's scratch and a [`Scheduler`], and loops: take commands, plan a
//! step, copy shared blocks, run one ragged forward pass, sample, turn tokens into text and
//! stop decisions, send events. When no sequence is left it blocks on its command channel, so
//! an idle server costs no CPU.

use crate::engine::kv_cache::{KvCache, KvCacheConfig};
use crate::engine::{BatchLimits, EngineError, LlamaModel, LogitsWanted, Scratch, SeqInput};
use crate::scheduler::constrain::{self, MaskWork, Pending};
use crate::scheduler::handle::EngineConfig;
use crate::scheduler::observer::{Observer, Phase, RequestStats, StepStats};
use crate::scheduler::request::{
    Event, FinishReason, GenerationRequest, Timings, TokenLogprob, Usage,
};
use crate::scheduler::sampling::{SampleScratch, Sampled, Sampler};
use crate::scheduler::state::{Limits, Plan, Scheduler, SeqId};
use crate::scheduler::stop::StopMatcher;
use crate::structured::seq::Step;
use crate::structured::SeqConstraint;
use crate::tokenizer::{DecodeState, Tokenizer};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod sample;

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

/// Numbers a worker publishes for handles (routing, load, health) without a round trip.
pub(crate) struct WorkerShared {
    /// Requests on this worker (queued or running): the router's load measure.
    pub active: AtomicUsize,
    /// Sequences running.
    pub running: AtomicUsize,
    /// KV blocks held by sequences (blocks only the prefix cache holds count as free: they are
    /// evicted on demand), and blocks only the prefix cache holds.
    pub kv_used: AtomicUsize,
    pub kv_cached: AtomicUsize,
    pub kv_total: usize,
    healthy: AtomicBool,
    stopping: AtomicBool,
}

impl WorkerShared {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

/// Most choices per request: a sequence id is `request id << CHOICE_BITS | choice`.
const CHOICE_BITS: u32 = 8;

fn seq_id(req: u64, choice: usize) -> SeqId {
    (req << CHOICE_BITS) | choice as u64
}

/// The seed of choice `c`: choice 0 uses the request's seed as it is, so `n = 1` and the first
/// of `n` choices draw the same tokens.
fn choice_seed(seed: u64, c: usize) -> u64 {
    seed.wrapping_add((c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Per-sequence state the scheduler carries for the worker.
struct SeqOut {
    req: u64,
    choice: usize,
    /// Taken out while a step samples in parallel.
    sampler: Option<Sampler>,
    /// The request's grammar, when it has one (taken out while masks are computed and while
    /// a step samples in parallel).
    constraint: Option<SeqConstraint>,
    decode: DecodeState,
    stop: StopMatcher,
    last_token: Option<Instant>,
    /// The n - 1 other choices were forked from this one.
    forked: bool,
}

/// Per-request state.
struct Req {
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    unread: Arc<AtomicUsize>,
    /// The most events `unread` may reach.
    max_unread: usize,
    req: GenerationRequest,
    seed: u64,
    arrived: Instant,
    admitted: Option<Instant>,
    first_token: Option<Instant>,
    itl: Vec<Duration>,
    finish: Vec<Option<FinishReason>>,
    generated: usize,
    cached_tokens: usize,
    preemptions: u32,
}

impl Req {
    /// Sends `ev`; false when the client is gone or has stopped reading.
    fn send(&self, ev: Event) -> bool {
        if self.unread.load(Ordering::Acquire) >= self.max_unread {
            return false;
        }
        self.unread.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(ev).is_err() {
            self.unread.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }
}

pub(crate) struct Worker {
    index: usize,
    model: LlamaModel,
    kv: KvCache,
    scratch: Scratch,
    sched: Scheduler<SeqOut>,
    tok: Arc<Tokenizer>,
    rx: mpsc::Receiver<Command>,
    observer: Arc<dyn Observer>,
    shared: Arc<WorkerShared>,
    /// Accepted requests not yet running, over all workers (the handle's queue bound).
    waiting: Arc<AtomicUsize>,
    reqs: HashMap<u64, Req>,
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
        let shared = Arc::new(WorkerShared {
            active: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            kv_used: AtomicUsize::new(0),
            kv_cached: AtomicUsize::new(0),
            kv_total: kv.total_blocks(),
            healthy: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
        });
        let sample_scratch = (0..model.pool().threads())
            .map(|_| Mutex::new(SampleScratch::new()))
            .collect();
        Ok(Worker {
            index,
            model,
            kv,
            scratch,
            sched,
            tok,
            rx,
            observer,
            shared,
            waiting,
            reqs: HashMap::new(),
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
                self.publish_load();
            } else {
                self.step();
            }
        }
        self.abort_all(FinishReason::Abort);
        self.shared.healthy.store(false, Ordering::Release);
    }

    /// Applies one command; false when the worker must stop.
    fn command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(sub) => self.admit(*sub),
            Command::Abort(id) => self.abort_request(id, FinishReason::Abort),
            Command::AbortAll => self.abort_all(FinishReason::Abort),
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
        let out = SeqOut {
            req: id,
            choice: 0,
            sampler: Some(Sampler::new(&req.params, choice_seed(seed, 0), &req.prompt)),
            constraint: req.constraint.as_ref().map(|c| c.sequence()),
            decode: DecodeState::new(false),
            stop: StopMatcher::new(&req.stop),
            last_token: None,
            forked: n == 1,
        };
        let r = Req {
            tx,
            unread,
            max_unread: self.max_unread_events,
            req: req.clone(),
            seed,
            arrived,
            admitted: None,
            first_token: None,
            itl: Vec::new(),
            finish: vec![None; n],
            generated: 0,
            cached_tokens: 0,
            preemptions: 0,
        };
        if !self.shared.is_healthy() {
            r.send(Event::Error {
                message: "the engine failed earlier and is not serving".to_string(),
            });
            self.release_slot(false);
            return;
        }
        match self
            .sched
            .add(seq_id(id, 0), req.prompt, req.max_tokens, n, out)
        {
            Ok(()) => {
                self.reqs.insert(id, r);
            }
            Err(e) => {
                r.send(Event::Error {
                    message: e.to_string(),
                });
                self.release_slot(false);
            }
        }
    }

    /// A request left this worker: it no longer counts as active (nor as waiting, unless it
    /// had been admitted to a step already).
    fn release_slot(&self, admitted: bool) {
        if !admitted {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
    }

    fn abort_all(&mut self, reason: FinishReason) {
        let ids: Vec<u64> = self.reqs.keys().copied().collect();
        for id in ids {
            self.abort_request(id, reason);
        }
    }

    /// Ends every live choice of request `id` with `reason`.
    fn abort_request(&mut self, id: u64, reason: FinishReason) {
        let Some(r) = self.reqs.get(&id) else {
            return;
        };
        // Choices not forked yet have no sequence; they end all the same.
        let open: Vec<usize> = (0..r.finish.len())
            .filter(|&c| r.finish[c].is_none())
            .collect();
        for c in open {
            self.finish_choice(id, c, seq_id(id, c), reason);
        }
    }

    /// Ends choice `c` of request `id` (sequence `sid`, which may not exist yet for a choice
    /// not forked): sends its Finished event and, after the last choice, Done.
    fn finish_choice(&mut self, id: u64, c: usize, sid: SeqId, reason: FinishReason) {
        let seq = self.sched.remove(sid);
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        if r.finish[c].is_some() {
            return;
        }
        r.finish[c] = Some(reason);
        if let Some(mut s) = seq {
            r.preemptions += s.preemptions;
            // Text held back for a possible stop string is released, unless a stop string or
            // an abort ended the choice; a character cut in half by a length limit is dropped.
            let tail = match reason {
                FinishReason::Stop | FinishReason::Length => s.payload.stop.finish(),
                _ => String::new(),
            };
            s.payload.decode.discard_partial();
            if !tail.is_empty() {
                r.send(Event::Delta {
                    choice: c,
                    ids: Vec::new(),
                    text: tail,
                    logprobs: Vec::new(),
                });
            }
        }
        r.send(Event::Finished { choice: c, reason });
        if r.finish.iter().all(Option::is_some) {
            let mut r = self.reqs.remove(&id).expect("request exists");
            let usage = Usage {
                prompt_tokens: r.req.prompt.len(),
                cached_tokens: r.cached_tokens,
                completion_tokens: r.generated,
            };
            let now = Instant::now();
            let timings = Timings {
                queue: r.admitted.unwrap_or(now).duration_since(r.arrived),
                ttft: r.first_token.map(|t| t.duration_since(r.arrived)),
                itl: std::mem::take(&mut r.itl),
                duration: now.duration_since(r.arrived),
            };
            self.observer.on_request(&RequestStats {
                queue: timings.queue,
                ttft: timings.ttft,
                itl: timings.itl.clone(),
                duration: timings.duration,
                prompt_tokens: usage.prompt_tokens,
                cached_tokens: usage.cached_tokens,
                generated_tokens: usage.completion_tokens,
                finish_reasons: r.finish.iter().map(|f| f.unwrap_or(reason)).collect(),
                preemptions: r.preemptions,
            });
            // Its slot and the load are published before the caller hears of the end, so a
            // client that reads /stats or /metrics after its response sees them.
            self.release_slot(r.admitted.is_some());
            self.publish_load();
            if reason == FinishReason::Error {
                r.send(Event::Error {
                    message: "the engine failed while running this request".to_string(),
                });
            } else {
                r.send(Event::Done { usage, timings });
            }
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
            self.publish_load();
            std::thread::sleep(Duration::from_millis(1));
            return;
        }
        self.steps += 1;
        for it in &plan.items {
            let req = it.seq >> CHOICE_BITS;
            if let Some(r) = self.reqs.get_mut(&req) {
                if r.admitted.is_none() {
                    r.admitted = Some(t0);
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                }
            }
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
    fn execute(&mut self, plan: &Plan, masks: &mut MaskWork) -> Result<(), bool> {
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
            self.emit(sid, sampled);
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
        if let Some(r) = self.reqs.get_mut(&req_id) {
            for c in 1..r.finish.len() {
                if r.finish[c].is_some() {
                    continue;
                }
                let payload = SeqOut {
                    req: req_id,
                    choice: c,
                    sampler: Some(Sampler::new(
                        &r.req.params,
                        choice_seed(r.seed, c),
                        &r.req.prompt,
                    )),
                    constraint: constraint.clone(),
                    decode: DecodeState::new(false),
                    stop: StopMatcher::new(&r.req.stop),
                    last_token: None,
                    forked: true,
                };
                forks.push((seq_id(req_id, c), payload));
            }
        }
        if let Some(s) = self.sched.seq_mut(sid) {
            s.payload.forked = true;
        }
        for (new, payload) in forks {
            if self.sched.fork(sid, new, payload) {
                let sampled = self.sample_one(new, row);
                self.emit(new, sampled);
            }
        }
        let sampled = self.sample_one(sid, row);
        self.emit(sid, sampled);
    }

    /// Appends `sid`'s sampled token, sends its text, and ends the choice on an
    /// end-of-generation token, a stop string or the length limit.
    fn emit(&mut self, sid: SeqId, sampled: impl Into<Option<Sampled>>) {
        let Some(Sampled { id, logprob, top }) = sampled.into() else {
            return;
        };
        let now = Instant::now();
        let Some(s) = self.sched.seq_mut(sid) else {
            return;
        };
        let (req_id, choice) = (s.payload.req, s.payload.choice);
        let Some(r) = self.reqs.get_mut(&req_id) else {
            return;
        };
        r.generated += 1;
        if let Some(prev) = s.payload.last_token.replace(now) {
            r.itl.push(now.duration_since(prev));
        }
        if r.first_token.is_none() {
            r.first_token = Some(now);
            r.cached_tokens = s.cached_tokens;
        }
        let eog = (!r.req.ignore_eos && self.tok.is_eog(id)) || r.req.stop_token_ids.contains(&id);
        // The grammar advances over the token; an end-of-generation token was only allowed
        // where it may end.
        let grammar = match s.payload.constraint.as_mut() {
            None => Step::Continue,
            Some(c) => match c.failure() {
                Some(e) => Step::Failed(e.to_string()),
                None if eog => Step::Continue,
                None => c.commit(id),
            },
        };
        if let Step::Failed(e) = &grammar {
            // Never caused by input alone; the choice ends rather than leave its grammar.
            tracing::warn!(worker = self.index, error = %e, "constrained decoding failed");
            self.finish_choice(req_id, choice, sid, FinishReason::Stop);
            return;
        }
        self.sched.append(sid, id);
        let s = self.sched.seq_mut(sid).expect("sequence exists");
        let mut reason = None;
        let text = if eog {
            reason = Some(FinishReason::Stop);
            String::new()
        } else {
            let piece = s.payload.decode.push(&self.tok, id);
            let rel = s.payload.stop.push(&piece);
            if rel.stopped {
                reason = Some(FinishReason::Stop);
            }
            rel.text
        };
        if reason.is_none() && grammar == Step::Complete {
            reason = Some(FinishReason::Stop);
        }
        if reason.is_none() && s.tokens.len() >= s.max_len {
            reason = Some(FinishReason::Length);
        }
        let logprobs = if r.req.logprobs {
            vec![TokenLogprob { id, logprob, top }]
        } else {
            Vec::new()
        };
        // An end-of-generation token counts as generated but is not part of the output.
        let delivered = eog
            || r.send(Event::Delta {
                choice,
                ids: vec![id],
                text,
                logprobs,
            });
        if !delivered {
            // The client is gone or stopped reading: abort the whole request.
            self.abort_request(req_id, FinishReason::Abort);
            return;
        }
        if let Some(reason) = reason {
            self.finish_choice(req_id, choice, sid, reason);
        }
    }

    /// A step failed: its requests end with an error. A panic also marks the worker unhealthy
    /// and fails everything it holds (its state can no longer be trusted).
    fn fail(&mut self, plan: &Plan, panicked: bool) {
        let mut reqs: Vec<u64> = plan.items.iter().map(|it| it.seq >> CHOICE_BITS).collect();
        if panicked {
            self.shared.healthy.store(false, Ordering::Release);
            reqs = self.reqs.keys().copied().collect();
        }
        reqs.sort_unstable();
        reqs.dedup();
        for id in reqs {
            self.abort_request(id, FinishReason::Error);
        }
    }

    /// Publishes the load numbers for handles; returns (used by sequences, cached only, total)
    /// blocks so a step's stats reuse them.
    fn publish_load(&self) -> (usize, usize, usize) {
        let (used, total) = self.sched.kv_blocks();
        let cached = self.sched.kv_cached_evictable();
        self.shared
            .running
            .store(self.sched.n_running(), Ordering::Relaxed);
        self.shared.kv_used.store(used - cached, Ordering::Relaxed);
        self.shared.kv_cached.store(cached, Ordering::Relaxed);
        (used - cached, cached, total)
    }

    /// Publishes the load for handles and hands the step's numbers to the observer.
    fn publish(&self, plan: &Plan, t0: Instant, queries: u64, hits: u64, masks: MaskWork) {
        let (used, cached, total) = self.publish_load();
        let decode = plan
            .items
            .iter()
            .filter(|it| it.len == 1 && it.logits)
            .count();
        let tokens = plan.tokens();
        let phase = match (decode, tokens - decode) {
            (0, _) => Phase::Prefill,
            (_, 0) => Phase::Decode,
            _ => Phase::Mixed,
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
