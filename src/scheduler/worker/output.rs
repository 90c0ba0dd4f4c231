//! Output processing, apart from the step loop (as vLLM keeps its output processor apart from
//! EngineCore): a sampled token goes through the grammar (commit), the detokenizer and the
//! stop strings, becomes a [`Event::Delta`], and ends its choice on an end-of-generation
//! token, a stop string, a complete grammar or the length limit; the last choice to end sends
//! the request's [`Event::Done`] with its usage and timings.
//!
//! [`Outputs`] owns every request's channel and bookkeeping; the step loop hands it the
//! scheduler whose sequences carry each choice's [`SeqOut`].

use super::sample::Draw;
use super::shared::WorkerShared;
use crate::engine::pooling::Pooler;
use crate::scheduler::drain::WaitQueue;
use crate::scheduler::fault::{FaultStage, Faults};
use crate::scheduler::observer::{Observer, RequestStats};
use crate::scheduler::request::{
    Event, FinishReason, GenerationRequest, PromptOutput, Timings, TokenLogprob, Usage,
};
use crate::scheduler::sampling::{Sampled, Sampler};
use crate::scheduler::state::{Scheduler, SeqId};
use crate::scheduler::stop::StopMatcher;
use crate::structured::seq::Step;
use crate::structured::SeqConstraint;
use crate::tokenizer::{DecodeState, Tokenizer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most choices per request: a sequence id is `request id << CHOICE_BITS | choice`.
pub(super) const CHOICE_BITS: u32 = 8;

pub(super) fn seq_id(req: u64, choice: usize) -> SeqId {
    (req << CHOICE_BITS) | choice as u64
}

/// The request a sequence belongs to.
pub(super) fn req_of(sid: SeqId) -> u64 {
    sid >> CHOICE_BITS
}

/// The seed of choice `c`: choice 0 uses the request's seed as it is, so `n = 1` and the first
/// of `n` choices draw the same tokens.
pub(super) fn choice_seed(seed: u64, c: usize) -> u64 {
    seed.wrapping_add((c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Per-sequence state the scheduler carries for the worker.
pub(super) struct SeqOut {
    pub req: u64,
    pub choice: usize,
    /// Taken out while a step samples in parallel.
    pub sampler: Option<Sampler>,
    /// The request's grammar, when it has one (taken out while masks are computed and while
    /// a step samples in parallel).
    pub constraint: Option<SeqConstraint>,
    pub decode: DecodeState,
    pub stop: StopMatcher,
    pub last_token: Option<Instant>,
    /// The n - 1 other choices were forked from this one.
    pub forked: bool,
}

impl SeqOut {
    /// Choice `choice` of request `req`, starting at the grammar state `constraint`.
    pub fn new(
        req_id: u64,
        choice: usize,
        r: &Req,
        constraint: Option<SeqConstraint>,
        forked: bool,
    ) -> SeqOut {
        SeqOut {
            req: req_id,
            choice,
            sampler: Some(
                Sampler::new(&r.req.params, choice_seed(r.seed, choice), &r.req.prompt)
                    // Only a request asking for logprobs reads them (`emit`).
                    .with_logprob(r.req.logprobs),
            ),
            constraint,
            decode: DecodeState::new(false),
            stop: StopMatcher::new(&r.req.stop),
            last_token: None,
            forked,
        }
    }
}

/// Per-request state.
pub(super) struct Req {
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    unread: Arc<AtomicUsize>,
    /// The most events `unread` may reach.
    max_unread: usize,
    pub req: GenerationRequest,
    pub seed: u64,
    arrived: Instant,
    /// When its first step was planned (it stops counting as waiting then).
    pub admitted: Option<Instant>,
    first_token: Option<Instant>,
    itl: Vec<Duration>,
    /// Each choice's finish reason once it ended.
    pub finish: Vec<Option<FinishReason>>,
    generated: usize,
    /// Guesses verified and kept (speculative decoding), over all choices.
    drafted: usize,
    accepted: usize,
    cached_tokens: usize,
    preemptions: u32,
    /// Why the request failed, for its final [`Event::Error`] (a choice's grammar failed, or
    /// no token could be sampled).
    error: Option<String>,
    /// Prompt logprobs scored so far: entry `i` is prompt token `i + 1`'s.
    prompt_scores: Vec<TokenLogprob>,
    /// The prompt logprobs (or the embedding) were sent.
    prompt_sent: bool,
    /// An embedding's hidden states pooled so far (from its first rows).
    pooler: Option<Pooler>,
}

impl Req {
    pub fn new(
        req: GenerationRequest,
        seed: u64,
        tx: tokio::sync::mpsc::UnboundedSender<Event>,
        unread: Arc<AtomicUsize>,
        max_unread: usize,
        arrived: Instant,
    ) -> Req {
        let n = req.n.max(1);
        Req {
            tx,
            unread,
            max_unread,
            req,
            seed,
            arrived,
            admitted: None,
            first_token: None,
            itl: Vec::new(),
            finish: vec![None; n],
            generated: 0,
            drafted: 0,
            accepted: 0,
            cached_tokens: 0,
            preemptions: 0,
            error: None,
            prompt_scores: Vec::new(),
            prompt_sent: false,
            pooler: None,
        }
    }

    /// Sends `ev`; false when the client is gone or has stopped reading.
    pub fn send(&self, ev: Event) -> bool {
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

    /// Sends the request's last event whatever the unread count (an error must reach a
    /// client that is still there).
    pub fn send_last(&self, ev: Event) {
        self.unread.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(ev).is_err() {
            self.unread.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Every request on the worker, and what their outputs need (see the module docs).
pub(super) struct Outputs {
    worker: usize,
    tok: Arc<Tokenizer>,
    observer: Arc<dyn Observer>,
    shared: Arc<WorkerShared>,
    /// Accepted requests not yet running, over all workers (the handle's queue bound).
    waiting: Arc<WaitQueue>,
    reqs: HashMap<u64, Req>,
    faults: Faults,
}

impl Outputs {
    pub fn new(
        worker: usize,
        tok: Arc<Tokenizer>,
        observer: Arc<dyn Observer>,
        shared: Arc<WorkerShared>,
        waiting: Arc<WaitQueue>,
        faults: Faults,
    ) -> Outputs {
        Outputs {
            worker,
            tok,
            observer,
            shared,
            waiting,
            reqs: HashMap::new(),
            faults,
        }
    }

    pub fn get(&self, id: u64) -> Option<&Req> {
        self.reqs.get(&id)
    }

    pub fn insert(&mut self, id: u64, r: Req) {
        self.reqs.insert(id, r);
    }

    pub fn ids(&self) -> Vec<u64> {
        self.reqs.keys().copied().collect()
    }

    /// A request that never reached the scheduler is refused with `message`.
    pub fn refuse(&self, r: Req, message: String) {
        r.send_last(Event::Error { message });
        self.release_slot(false);
    }

    /// Request `id` had its first step planned at `t`: it no longer counts as waiting.
    pub fn mark_admitted(&mut self, id: u64, t: Instant) {
        if let Some(r) = self.reqs.get_mut(&id) {
            if r.admitted.is_none() {
                r.admitted = Some(t);
                self.waiting.leave();
            }
        }
    }

    /// A request left this worker: it no longer counts as active (nor as waiting, unless it
    /// had been admitted to a step already).
    fn release_slot(&self, admitted: bool) {
        if !admitted {
            self.waiting.leave();
        }
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// After a fault: every request ends with an [`Event::Error`] saying `message`, without
    /// touching the scheduler (its state is not trusted any more; it is rebuilt).
    pub fn fail_all(&mut self, message: &str) {
        for (_, r) in std::mem::take(&mut self.reqs) {
            let now = Instant::now();
            self.observer.on_request(&RequestStats {
                queue: r.admitted.unwrap_or(now).duration_since(r.arrived),
                ttft: r.first_token.map(|t| t.duration_since(r.arrived)),
                itl: Vec::new(),
                duration: now.duration_since(r.arrived),
                prompt_tokens: r.req.prompt.len(),
                cached_tokens: r.cached_tokens,
                generated_tokens: r.generated,
                finish_reasons: vec![FinishReason::Error; r.finish.len()],
                preemptions: r.preemptions,
            });
            self.release_slot(r.admitted.is_some());
            r.send_last(Event::Error {
                message: message.to_string(),
            });
        }
    }

    /// Ends request `id` with an [`Event::Error`] saying `message` (its other choices end too:
    /// the response cannot be whole).
    pub fn fail_request(&mut self, sched: &mut Scheduler<SeqOut>, id: u64, message: String) {
        tracing::warn!(worker = self.worker, request = id, error = %message, "request failed");
        if let Some(r) = self.reqs.get_mut(&id) {
            r.error.get_or_insert(message);
        }
        self.abort_request(sched, id, FinishReason::Error);
    }

    /// Ends every request with `reason`.
    pub fn abort_all(&mut self, sched: &mut Scheduler<SeqOut>, reason: FinishReason) {
        for id in self.ids() {
            self.abort_request(sched, id, reason);
        }
    }

    /// Ends every live choice of request `id` with `reason`.
    pub fn abort_request(&mut self, sched: &mut Scheduler<SeqOut>, id: u64, reason: FinishReason) {
        let Some(r) = self.reqs.get(&id) else {
            return;
        };
        // Choices not forked yet have no sequence; they end all the same.
        let open: Vec<usize> = (0..r.finish.len())
            .filter(|&c| r.finish[c].is_none())
            .collect();
        for c in open {
            self.finish_choice(sched, id, c, seq_id(id, c), reason);
        }
    }

    /// Request `id` had `drafted` guesses verified, `accepted` of them kept (its usage).
    pub fn add_guesses(&mut self, id: u64, drafted: usize, accepted: usize) {
        if let Some(r) = self.reqs.get_mut(&id) {
            r.drafted += drafted;
            r.accepted += accepted;
        }
    }

    /// The next prompt position request `id` needs a score from (rows of positions before it
    /// were scored already, e.g. before a preemption made them run again).
    pub fn next_scored(&self, id: u64) -> usize {
        match self.reqs.get(&id) {
            Some(r) if !r.prompt_sent => r.prompt_scores.len(),
            _ => usize::MAX,
        }
    }

    /// Adds prompt scores for the positions from [`Outputs::next_scored`] on. Once every
    /// prompt token but the first is scored, sends them ([`Event::PromptLogprobs`]) and, for a
    /// request that generates nothing (`max_tokens` 0), ends its choices (`length`).
    pub fn add_prompt_scores(
        &mut self,
        sched: &mut Scheduler<SeqOut>,
        id: u64,
        scores: Vec<TokenLogprob>,
    ) {
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        let want = r.req.prompt.len().saturating_sub(1);
        r.prompt_scores.extend(scores);
        r.prompt_scores.truncate(want);
        if r.prompt_sent || r.prompt_scores.len() < want {
            return;
        }
        r.prompt_sent = true;
        let logprobs = std::mem::take(&mut r.prompt_scores);
        let generates = r.req.max_tokens > 0;
        if !r.send(Event::PromptLogprobs { logprobs }) {
            self.abort_request(sched, id, FinishReason::Abort);
        } else if !generates {
            self.abort_request(sched, id, FinishReason::Length);
        }
    }

    /// Pools the final hidden states `hidden` (rows of `n_embd`, positions `start..`) into
    /// request `id`'s embedding (positions pooled before, e.g. before a preemption made them
    /// run again, are skipped). Once every prompt position is pooled, sends the L2-normalized
    /// embedding ([`Event::Embedding`]) and ends the request (`length`: it generates nothing).
    pub fn add_hidden(
        &mut self,
        sched: &mut Scheduler<SeqOut>,
        id: u64,
        start: usize,
        hidden: &[f32],
        n_embd: usize,
    ) {
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        let PromptOutput::Embedding { pooling } = r.req.prompt_output else {
            return;
        };
        if r.prompt_sent || n_embd == 0 {
            return;
        }
        let len = r.req.prompt.len();
        let pooler = r
            .pooler
            .get_or_insert_with(|| Pooler::new(pooling, len, n_embd));
        pooler.add(start, hidden);
        if !pooler.is_complete() {
            return;
        }
        r.prompt_sent = true;
        let embedding = r.pooler.take().map(Pooler::finish).unwrap_or_default();
        let reason = if r.send(Event::Embedding { embedding }) {
            FinishReason::Length
        } else {
            FinishReason::Abort
        };
        self.abort_request(sched, id, reason);
    }

    /// Ends choice `c` of request `id` (sequence `sid`, which may not exist yet for a choice
    /// not forked): sends its Finished event and, after the last choice, Done.
    pub fn finish_choice(
        &mut self,
        sched: &mut Scheduler<SeqOut>,
        id: u64,
        c: usize,
        sid: SeqId,
        reason: FinishReason,
    ) {
        let seq = sched.remove(sid);
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        if r.finish[c].is_some() {
            return;
        }
        r.finish[c] = Some(reason);
        let stop = seq
            .as_ref()
            .filter(|_| reason == FinishReason::Stop)
            .and_then(|s| s.payload.stop.matched().map(str::to_string));
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
        r.send(Event::Finished {
            choice: c,
            reason,
            stop,
        });
        if r.finish.iter().all(Option::is_some) {
            let mut r = self.reqs.remove(&id).expect("request exists");
            let usage = Usage {
                prompt_tokens: r.req.prompt.len(),
                cached_tokens: r.cached_tokens,
                completion_tokens: r.generated,
                draft_tokens: r.drafted,
                accepted_tokens: r.accepted,
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
            self.shared.publish_load(sched);
            if reason == FinishReason::Error {
                let message = r
                    .error
                    .take()
                    .unwrap_or_else(|| "the engine failed while running this request".to_string());
                r.send_last(Event::Error { message });
            } else {
                r.send(Event::Done { usage, timings });
            }
        }
    }

    /// Appends `sid`'s sampled token, sends its text, and ends the choice on an
    /// end-of-generation token, a stop string, a complete grammar or the length limit. A
    /// sequence that got no token, or whose grammar failed, fails its request.
    pub fn emit(&mut self, sched: &mut Scheduler<SeqOut>, sid: SeqId, drawn: Draw) {
        self.faults.check(FaultStage::Emit);
        let now = Instant::now();
        let Some(s) = sched.seq_mut(sid) else {
            return;
        };
        let (req_id, choice) = (s.payload.req, s.payload.choice);
        let Sampled { id, logprob, top } = match drawn {
            Ok(d) => d,
            Err(e) => {
                let message = format!("choice {choice}: {}", e.message());
                self.fail_request(sched, req_id, message);
                return;
            }
        };
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
                None => {
                    self.faults.check(FaultStage::Commit);
                    if self.faults.grammar_fails() {
                        Step::Failed("injected grammar error (testing only)".to_string())
                    } else {
                        c.commit(id)
                    }
                }
            },
        };
        if let Step::Failed(e) = grammar {
            // The text so far follows the grammar but is not complete: never a "stop" on
            // output that does not validate.
            let message = format!("choice {choice}: the output constraint failed: {e}");
            self.fail_request(sched, req_id, message);
            return;
        }
        sched.append(sid, id);
        let s = sched.seq_mut(sid).expect("sequence exists");
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
            self.abort_request(sched, req_id, FinishReason::Abort);
            return;
        }
        if let Some(reason) = reason {
            self.finish_choice(sched, req_id, choice, sid, reason);
        }
    }
}
