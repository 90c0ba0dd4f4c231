//! One engine worker: an OS thread that owns a model replica (with its worker team), a KV
//! cache, the forward pass's scratch and a [`Scheduler`], and loops: take commands, plan a
//! step, copy shared blocks, run one ragged forward pass, sample, and hand each sampled token
//! to output processing ([`output`]: grammar commit, detokenize, stop strings, events). When
//! no sequence is left it blocks on its command channel, so an idle server costs no CPU.

use crate::engine::kv_cache::{KvCache, KvCacheConfig};
use crate::engine::{BatchLimits, EngineError, ForwardScratch, LogitsWanted, Model, SeqInput};
use crate::scheduler::constrain::{MaskThread, MaskWork, Pending};
use crate::scheduler::drain::WaitQueue;
use crate::scheduler::engine_config::EngineConfig;
use crate::scheduler::fault::{FaultStage, Faults};
use crate::scheduler::observer::{CacheTier, Observer, StepKind, StepStats};
use crate::scheduler::prefix_cache::DiskTier;
use crate::scheduler::request::{
    Event, FinishReason, GenerationRequest, PromptOutput, TokenLogprob,
};
use crate::scheduler::sampling::{score, SampleScratch};
use crate::scheduler::speculative::SpecConfig;
use crate::scheduler::state::{
    checkpoint_slots, Limits, PlanItem, Scheduler, SeqId, StepPlan, PROMPT_LOGIT_ROWS,
};
use crate::tokenizer::Tokenizer;
use draft::Drafter;
use output::{req_of, seq_id, Outputs, Req, SeqOut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tiers::WRITES_POLL;
use verify::Guesses;

mod disk_wait;
mod draft;
mod output;
mod sample;
mod shared;
mod tiers;
mod verify;

pub(crate) use shared::{WorkerShared, WorkerState};

/// Messages from handles to a worker.
pub(crate) enum Command {
    Submit(Box<Submission>),
    /// The request's stream was dropped or aborted.
    Abort(u64),
    /// End every request in flight (finish reason `abort`).
    AbortAll,
    /// Drop the prefix cache: the KV pool's unused cached blocks, the RAM tier and the disk
    /// tier's files (requests in flight keep their blocks).
    ClearPrefixCache,
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
    model: Model,
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
    /// The same rows' final hidden states (for embeddings), copied out of the scratch.
    hidden: Vec<f32>,
    /// Steps run, counted across rebuilds.
    steps: u64,
    /// Where a rebuild starts from.
    cfg: EngineConfig,
    limits: Limits,
    faults: Faults,
    max_unread_events: usize,
    /// Computes grammar masks beside the forward pass (kept across rebuilds).
    masks: MaskThread,
    /// The prefix cache's disk tier, if configured (kept across rebuilds).
    disk: Option<DiskTier>,
    /// Requests waiting for the disk tier's reader ([`disk_wait`]).
    parked: Vec<disk_wait::Parked>,
    /// The disk writer's finished jobs when the tier numbers were last published while idle.
    writes_published: u64,
    /// The draft model (speculative `method = "draft"`), on this worker's team.
    drafter: Option<Drafter>,
}

/// What a step mutates, built new at start and after every fault: the KV cache, the forward
/// pass's scratch, the scheduler's state and the sampling scratch.
struct StepState {
    kv: KvCache,
    scratch: ForwardScratch,
    sched: Scheduler<SeqOut>,
    sample_scratch: Vec<Mutex<SampleScratch>>,
}

impl StepState {
    fn new(model: &Model, cfg: &EngineConfig, limits: Limits) -> Result<Self, EngineError> {
        let kv_cfg: KvCacheConfig = model
            .kv_config(cfg.kv_positions, cfg.block_size)
            .with_kv_type(cfg.kv_type);
        // A recurrent model's sequences each hold a state slot: one per running sequence, plus
        // room for the tables a step frees as another takes its place.
        let kv = KvCache::with_state_checkpoints(
            kv_cfg,
            model.state_shape(limits.max_num_seqs + 2),
            checkpoint_slots(&limits),
        )?;
        let batch = BatchLimits {
            max_tokens: limits.max_batch_tokens,
            max_seqs: limits.max_num_seqs,
            max_logit_rows: limits.max_num_seqs + PROMPT_LOGIT_ROWS + cfg.speculative.max_rows(),
        };
        let scratch = model.new_scratch(batch, &kv_cfg)?;
        // The handle bounds the queue; the state machine's own bound must never refuse what
        // the handle accepted.
        // A recurrent state cannot be rolled back after rejected draft tokens: such models run
        // without speculation. They resume cached prefixes from state checkpoints (see
        // `scheduler::state::checkpoints`), which the RAM and disk tiers keep with the blocks.
        let recurrent = model.desc().has_recurrent();
        let sched_limits = Limits {
            max_waiting: usize::MAX,
            ..limits
        };
        let spec = if recurrent {
            SpecConfig::off()
        } else {
            cfg.speculative
        };
        let mut sched = Scheduler::new(sched_limits, kv.allocator().clone()).with_speculation(spec);
        if sched_limits.prefix_cache {
            sched.set_tiers(cfg.tiers.ram_bytes, cfg.tiers.dir.is_some());
        }
        if recurrent {
            sched.keep_state_checkpoints();
        }
        let sample_scratch = (0..model.team().threads())
            .map(|_| Mutex::new(SampleScratch::new()))
            .collect();
        Ok(StepState {
            kv,
            scratch,
            sched,
            sample_scratch,
        })
    }
}

/// Why a step failed without a panic.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("a planned sequence is missing from the scheduler")]
    Plan,
    #[error("the grammar mask thread ended while computing this step's masks")]
    MasksLost,
}

/// What a caught panic says, for the log.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// What the requests a fault ended are told.
const FAULT_MESSAGE: &str = "the engine failed while running this request (an internal fault, \
    not caused by the request; the server logged it and restarted the engine worker): retry it";

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        model: Model,
        tok: Arc<Tokenizer>,
        cfg: &EngineConfig,
        limits: Limits,
        rx: mpsc::Receiver<Command>,
        observer: Arc<dyn Observer>,
        waiting: Arc<WaitQueue>,
        draft: Option<&Model>,
    ) -> Result<Worker, EngineError> {
        let StepState {
            kv,
            scratch,
            sched,
            sample_scratch,
        } = StepState::new(&model, cfg, limits)?;
        // The draft's cache has as many positions as the target's (the budget counts both).
        let drafter = match draft {
            Some(d) => Some(Drafter::new(
                d.on_team_of(&model),
                cfg.kv_positions,
                kv.config(),
                cfg.speculative.max_seqs,
                limits.max_batch_tokens,
            )?),
            None => None,
        };
        let shared = Arc::new(WorkerShared::new(kv.total_blocks()));
        let disk = match &cfg.tiers.dir {
            Some(dir) if limits.prefix_cache => Some(DiskTier::open(
                dir,
                cfg.tiers.identity,
                (kv.block_bytes(), kv.checkpoint_bytes()),
                cfg.tiers.disk_bytes,
                Arc::clone(&observer),
            )),
            _ => None,
        };
        let faults = Faults::new(&cfg.faults);
        let outputs = Outputs::new(
            index,
            tok,
            Arc::clone(&observer),
            Arc::clone(&shared),
            waiting,
            faults.clone(),
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
            hidden: Vec::new(),
            steps: 0,
            cfg: cfg.clone(),
            limits,
            faults,
            max_unread_events: cfg.max_unread_events.max(1),
            masks: MaskThread::new(format!("kiln-masks-{index}")),
            disk,
            parked: Vec::new(),
            writes_published: 0,
            drafter,
        })
    }

    pub(crate) fn shared(&self) -> &Arc<WorkerShared> {
        &self.shared
    }

    /// The thread's body: runs until shutdown or until every handle is gone. Every round
    /// (commands, then a step) is supervised: a panic anywhere in it (forward pass, sampling
    /// on the team, output processing, grammar commit) ends the requests in flight with an
    /// error, and the worker is rebuilt ([`Worker::recover`]).
    pub(crate) fn run(mut self) {
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.round())) {
                Ok(true) => {}
                Ok(false) => break,
                Err(p) => self.recover(&panic_message(p.as_ref())),
            }
        }
        if self.shared.state() != WorkerState::Failed {
            self.admit_parked_now();
            self.outputs.abort_all(&mut self.sched, FinishReason::Abort);
        }
        self.shared.set_state(WorkerState::Failed);
    }

    /// Takes the commands waiting (blocking for one when idle) and runs a step; false when
    /// the worker must stop.
    fn round(&mut self) -> bool {
        if self.sched.is_idle() {
            // Nothing to compute: sleep until a command arrives (an idle server burns no CPU),
            // or while requests wait for the disk, poll for their reads every millisecond, or
            // while blocks are still being written, publish the writer's progress.
            let poll = if self.has_parked() {
                Some(Duration::from_millis(1))
            } else if self.disk_writes_pending() {
                Some(WRITES_POLL)
            } else {
                None
            };
            // After the check above: when nothing was pending, this publishes the final numbers.
            self.publish_disk_writes();
            let cmd = if let Some(poll) = poll {
                match self.rx.recv_timeout(poll) {
                    Ok(cmd) => Some(cmd),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return false,
                }
            } else {
                Some(match self.rx.recv() {
                    Ok(cmd) => cmd,
                    Err(_) => return false,
                })
            };
            if let Some(cmd) = cmd {
                if !self.command(cmd) {
                    return false;
                }
            }
        }
        while let Ok(cmd) = self.rx.try_recv() {
            if !self.command(cmd) {
                return false;
            }
        }
        self.admit_loaded();
        // A step publishes the load itself (with its stats); otherwise publish it here.
        if self.sched.is_idle() {
            self.shared.publish_load(&self.sched);
        } else if let Err(e) = self.step() {
            self.recover(&e.to_string());
        }
        true
    }

    /// After a fault (`why`): counts it, ends every request this worker holds with an error
    /// (requests still in its channel stay there), and rebuilds what a step mutates (a new
    /// worker team over the same weights, a new KV cache, scratch and scheduler). While it
    /// rebuilds the worker is not ready; if the rebuild fails it stays down and refuses
    /// everything (the engine is then unhealthy).
    fn recover(&mut self, why: &str) {
        self.shared.set_state(WorkerState::Rebuilding);
        self.observer.on_fault(self.index);
        tracing::error!(
            worker = self.index,
            step = self.steps,
            fault = ?why,
            "engine fault: failing the requests in flight and rebuilding the worker"
        );
        self.outputs.fail_all(FAULT_MESSAGE);
        match self.rebuild() {
            Ok(()) => {
                self.shared.publish_load(&self.sched);
                self.shared.set_state(WorkerState::Serving);
                tracing::info!(worker = self.index, "engine worker rebuilt; serving");
            }
            Err(e) => {
                self.shared.set_state(WorkerState::Failed);
                tracing::error!(
                    worker = self.index,
                    error = %e,
                    "the engine worker could not be rebuilt: it refuses every request"
                );
            }
        }
    }

    fn rebuild(&mut self) -> Result<(), EngineError> {
        if self.faults.rebuild_fails() {
            return Err(EngineError::Team(
                "injected rebuild failure (testing only)".to_string(),
            ));
        }
        let model = self.model.replica(self.model.team().threads())?;
        let state = StepState::new(&model, &self.cfg, self.limits)?;
        if let Some(d) = &self.drafter {
            self.drafter = Some(d.rebuilt(&model)?);
        }
        self.model = model;
        self.kv = state.kv;
        self.scratch = state.scratch;
        self.sched = state.sched;
        self.sample_scratch = state.sample_scratch;
        self.rows = Vec::new();
        self.hidden = Vec::new();
        Ok(())
    }

    /// Applies one command; false when the worker must stop.
    fn command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(sub) => self.admit_or_park(*sub),
            Command::Abort(id) => {
                if !self.abort_parked(Some(id)) {
                    self.outputs
                        .abort_request(&mut self.sched, id, FinishReason::Abort)
                }
            }
            Command::AbortAll => {
                self.abort_parked(None);
                self.outputs.abort_all(&mut self.sched, FinishReason::Abort)
            }
            Command::ClearPrefixCache => {
                self.sched.clear_prefix_cache();
                if let Some(d) = self.disk.as_mut() {
                    d.clear();
                }
                self.shared.publish_load(&self.sched);
            }
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
        if self.shared.state() == WorkerState::Failed {
            let message = "the engine failed earlier and is not serving".to_string();
            self.outputs.refuse(r, message);
            return;
        }
        let constraint = r
            .req
            .constraint
            .as_ref()
            .map(|c| c.sequence_within(r.req.max_tokens));
        let out = SeqOut::new(id, 0, &r, constraint, n == 1);
        let prompt = r.req.prompt.clone();
        let rows = r.req.prompt_output.wants_rows();
        let ns = r.req.api_key_id.filter(|_| self.cfg.tiers.namespace_by_key);
        match self
            .sched
            .add(seq_id(id, 0), prompt, r.req.max_tokens, n, out)
        {
            Ok(()) => {
                self.sched.set_cache_namespace(seq_id(id, 0), ns);
                if rows {
                    self.sched.want_prompt_rows(seq_id(id, 0));
                }
                self.sched.set_speculation(seq_id(id, 0), r.req.speculative);
                self.outputs.insert(id, r)
            }
            Err(e) => self.outputs.refuse(r, e.to_string()),
        }
    }

    /// Plans and runs one step. An error leaves the worker's state untrusted: the caller
    /// recovers as from a panic.
    fn step(&mut self) -> Result<(), StepError> {
        let t0 = Instant::now();
        // Prefix-cache lookups happen while planning.
        let before = self.sched.prefix_stats();
        self.run_draft()?;
        let plan = self.sched.schedule();
        // Evicted blocks' pages are free: copy them out before anything writes them.
        self.run_spills(&plan)?;
        if plan.is_empty() {
            // Nothing could be scheduled (should not happen: the oldest sequence can always
            // preempt the others); avoid spinning hot.
            self.shared.publish_load(&self.sched);
            std::thread::sleep(Duration::from_millis(1));
            return Ok(());
        }
        self.run_draft_prefills(&plan)?;
        self.steps += 1;
        self.faults.set_step(self.steps);
        for it in &plan.items {
            self.outputs.mark_admitted(req_of(it.seq), t0);
        }
        let (masks, guesses) = self.execute(&plan)?;
        let after = self.sched.prefix_stats();
        self.publish(
            &plan,
            t0,
            after.queries - before.queries,
            after.hits - before.hits,
            masks,
            guesses,
        );
        Ok(())
    }

    /// Copies shared blocks, runs the forward pass (beside the grammar masks) and hands each
    /// sequence's logits to sampling and output processing.
    fn execute(&mut self, plan: &StepPlan) -> Result<(MaskWork, Guesses), StepError> {
        if !plan.restores.is_empty() {
            let t0 = Instant::now();
            self.run_restores(plan)?;
            self.observer
                .on_tier_restore(CacheTier::Ram, plan.restores.len(), t0.elapsed());
        }
        for &(src, dst) in &plan.copies {
            self.kv.copy_block(src, dst).map_err(EngineError::from)?;
        }
        self.run_state_copies(plan, true)?;
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
            hidden,
            faults,
            masks,
            ..
        } = self;
        // A verify item's tokens are the sequence's last one and its guesses (not in `tokens`).
        let chunks: Vec<Option<Vec<u32>>> = plan
            .items
            .iter()
            .map(|it| {
                let s = sched.seq(it.seq).filter(|_| it.draft > 0)?;
                let mut c = s.tokens[it.start..].to_vec();
                c.extend_from_slice(s.draft());
                Some(c)
            })
            .collect();
        let inputs: Vec<SeqInput<'_>> = plan
            .items
            .iter()
            .zip(&chunks)
            .filter_map(|(it, chunk)| {
                let s = sched.seq(it.seq)?;
                let tokens = match chunk {
                    Some(c) => c.as_slice(),
                    None => &s.tokens[it.start..it.start + it.len],
                };
                if tokens.len() != it.len {
                    return None;
                }
                Some(SeqInput {
                    tokens,
                    start_pos: it.start,
                    table: s.table(),
                    logits: if it.rows || it.draft > 0 {
                        LogitsWanted::All
                    } else if it.logits {
                        LogitsWanted::Last
                    } else {
                        LogitsWanted::None
                    },
                })
            })
            .collect();
        if inputs.len() != plan.items.len() {
            return Err(StepError::Plan);
        }
        // The logits rows are copied out of the scratch (about 1% of a step) so that sampling
        // can update the scheduler while reading them.
        let constrained = pending.len();
        let (out, masks) = masks.overlapped(&mut pending, || {
            faults.check(FaultStage::Forward);
            let logits = model.forward(&inputs, kv, scratch)?;
            rows.clear();
            rows.extend_from_slice(logits.as_slice());
            hidden.clear();
            hidden.extend_from_slice(logits.hidden());
            Ok::<(usize, usize), EngineError>((logits.n_vocab(), logits.n_embd()))
        });
        drop(inputs);
        drop(chunks);
        if pending.len() != constrained {
            // The mask thread died holding them: never sample those sequences unconstrained.
            return Err(StepError::MasksLost);
        }
        for (sid, c) in pending {
            if let Some(s) = self.sched.seq_mut(sid) {
                s.payload.constraint = Some(c);
            }
        }
        let (n_vocab, n_embd) = out?;
        self.run_state_copies(plan, false)?;
        let rows = std::mem::take(&mut self.rows);
        let hidden = std::mem::take(&mut self.hidden);
        let row = |k: usize| &rows[k * n_vocab..(k + 1) * n_vocab];
        // Sequences whose first token forks the other choices go one by one; the rest are
        // sampled in parallel on the worker team, then emitted in plan order.
        let mut batch: Vec<(SeqId, usize)> = Vec::new();
        let mut next_row = 0;
        let mut guesses = Guesses::default();
        for it in &plan.items {
            let first_row = next_row;
            next_row += it.logit_rows();
            if it.draft > 0 {
                let kept = self.verify(it, &rows[first_row * n_vocab..next_row * n_vocab], n_vocab);
                guesses.drafted += it.draft;
                guesses.accepted += kept;
                continue;
            }
            self.sched.advance(it.seq, it.len);
            if it.rows {
                match self
                    .outputs
                    .get(req_of(it.seq))
                    .map(|r| r.req.prompt_output)
                {
                    Some(PromptOutput::Embedding { .. }) => {
                        let h = &hidden[first_row * n_embd..next_row * n_embd];
                        self.outputs.add_hidden(
                            &mut self.sched,
                            req_of(it.seq),
                            it.start,
                            h,
                            n_embd,
                        );
                    }
                    _ => self.score_prompt(
                        it,
                        &rows[first_row * n_vocab..next_row * n_vocab],
                        n_vocab,
                    ),
                }
            }
            if it.logits {
                let k = next_row - 1;
                match self.sched.seq(it.seq) {
                    Some(s) if !s.payload.forked => self.on_first_logits(it.seq, row(k)),
                    Some(_) => batch.push((it.seq, k)),
                    None => {}
                }
            }
        }
        self.run_persists()?;
        let drawn = self.sample_many(&batch, &rows, n_vocab);
        for ((sid, _), d) in batch.into_iter().zip(drawn) {
            self.outputs.emit(&mut self.sched, sid, d);
        }
        self.rows = rows;
        self.hidden = hidden;
        Ok((masks, guesses))
    }

    /// Scores the prompt tokens `item`'s rows predict (row `j` gives the distribution of the
    /// token after position `start + j`) and hands them to output processing.
    fn score_prompt(&mut self, item: &PlanItem, rows: &[f32], n_vocab: usize) {
        let req = req_of(item.seq);
        let Some(r) = self.outputs.get(req) else {
            return;
        };
        let prompt = &r.req.prompt;
        let top = match r.req.prompt_output {
            PromptOutput::Logprobs { top } => top,
            _ => 0,
        };
        let from = self.outputs.next_scored(req);
        let mut sc = self.sample_scratch[0]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let scores: Vec<TokenLogprob> = (0..item.len)
            .map(|j| item.start + j)
            .filter(|&pos| pos >= from && pos + 1 < prompt.len())
            .map(|pos| {
                let j = pos - item.start;
                let row = &rows[j * n_vocab..(j + 1) * n_vocab];
                let s = score(row, prompt[pos + 1], top, &mut sc);
                TokenLogprob {
                    id: s.id,
                    logprob: s.logprob,
                    top: s.top,
                }
            })
            .collect();
        drop(sc);
        // A gap (rows past what was scored) cannot happen: a sequence computes its positions
        // in order, and after a preemption from 0 again.
        self.outputs.add_prompt_scores(&mut self.sched, req, scores);
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
                if let Some(d) = self.sample_one(new, row) {
                    self.outputs.emit(&mut self.sched, new, d);
                }
            }
        }
        if let Some(d) = self.sample_one(sid, row) {
            self.outputs.emit(&mut self.sched, sid, d);
        }
    }

    /// Publishes the load for handles and hands the step's numbers to the observer.
    fn publish(
        &self,
        plan: &StepPlan,
        t0: Instant,
        queries: u64,
        hits: u64,
        masks: MaskWork,
        guesses: Guesses,
    ) {
        let (used, cached, total) = self.shared.publish_load(&self.sched);
        // A verify item is decode work: one token and its guesses.
        let decode = plan
            .items
            .iter()
            .filter(|it| (it.len == 1 || it.draft > 0) && it.logits)
            .map(|it| it.len)
            .sum::<usize>();
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
            spec_method: self.sched.speculation().method,
            drafted: guesses.drafted,
            accepted: guesses.accepted,
        });
        self.observer.on_tiers(&self.tier_stats());
    }
}
