//! A draft model's side of speculative decoding ([`crate::scheduler::speculative`],
//! `method = "draft"`): a second, smaller model with the same vocabulary, run by the target's
//! engine thread on the target's worker team between target steps, proposes each wanted
//! sequence's next tokens as its own greedy continuation. The target's verify decides what is
//! kept, so the proposal's quality changes the speed only, never the reply.
//!
//! The draft has its own paged KV cache (sized like the target's, counted in the same budget
//! by [`crate::scheduler::setup`]) and remembers, per sequence, the tokens whose K/V it holds.
//! Before proposing it keeps only the longest prefix of those that the sequence still has:
//! guesses the target rejected (and the draft's own last guesses it fed) are dropped, their
//! blocks go back to the pool, and their positions are written again before anything reads
//! them, so the cache is as if they had never been written.
//!
//! A sequence's prompt goes into the draft cache in the step that prefills it on the target
//! ([`Drafter::prefill_for`]), so its first proposal is a pass of two tokens (the prompt's last
//! and the target's first) rather than a prefill of the whole prompt between the reply's
//! first and second tokens.

use super::{StepError, Worker};
use crate::engine::kv_cache::{BlockTable, KvCache, KvCacheConfig};
use crate::engine::{BatchLimits, EngineError, ForwardScratch, LogitsWanted, Model, SeqInput};
use crate::scheduler::state::{Scheduler, SeqId, StepPlan};
use std::collections::HashMap;

impl Worker {
    /// With a draft model: its proposals for the sequences the next plan would verify guesses
    /// for (run before planning, on this worker's team).
    pub(super) fn run_draft(&mut self) -> Result<(), StepError> {
        let Some(d) = self.drafter.as_mut() else {
            return Ok(());
        };
        let wanted = self.sched.draft_wanted();
        if wanted.is_empty() {
            return Ok(());
        }
        for (id, guesses) in d.propose(&self.sched, &wanted)? {
            self.sched.propose(id, guesses);
        }
        Ok(())
    }

    /// With a draft model: the prompts `plan` prefills computed into the draft's cache too
    /// ([`crate::scheduler::state::Scheduler::draft_prefills`]).
    pub(super) fn run_draft_prefills(&mut self, plan: &StepPlan) -> Result<(), StepError> {
        let Some(d) = self.drafter.as_mut() else {
            return Ok(());
        };
        let ids = self.sched.draft_prefills(plan);
        if ids.is_empty() {
            return Ok(());
        }
        let sched = &self.sched;
        d.prefill_for(|id| sched.seq(id).map(|s| s.tokens.as_slice()), &ids)?;
        Ok(())
    }
}

/// The draft model of one engine worker, its KV cache and scratch.
pub(crate) struct Drafter {
    model: Model,
    kv: KvCache,
    scratch: ForwardScratch,
    /// Per sequence: its draft cache blocks and the tokens whose K/V they hold, in order.
    seqs: HashMap<SeqId, DraftSeq>,
    /// Most tokens in one draft forward pass.
    max_tokens: usize,
}

struct DraftSeq {
    table: BlockTable,
    tokens: Vec<u32>,
}

/// One sequence's proposal in the making.
struct Job {
    id: SeqId,
    /// The sequence's tokens then the draft's guesses so far.
    tokens: Vec<u32>,
    /// The sequence's own token count (where the guesses start).
    len: usize,
    /// Positions whose K/V the draft cache holds.
    done: usize,
    want: usize,
    /// The job proposes guesses; otherwise it only computes `tokens` into the draft cache.
    guess: bool,
    failed: bool,
}

impl Job {
    /// Whether another pass has work for this job.
    fn pending(&self) -> bool {
        !self.failed
            && if self.guess {
                self.tokens.len() < self.len + self.want
            } else {
                self.done < self.tokens.len()
            }
    }
}

impl Drafter {
    /// A drafter running `model` (already on the worker's team, [`Model::on_team_of`]) with a
    /// KV cache of `positions` positions in blocks of `kv_cfg`'s size and type, for up to
    /// `max_seqs` sequences and `max_tokens` tokens per pass.
    pub(crate) fn new(
        model: Model,
        positions: usize,
        kv_like: &KvCacheConfig,
        max_seqs: usize,
        max_tokens: usize,
    ) -> Result<Drafter, EngineError> {
        let kv_cfg = model
            .kv_config(positions, kv_like.block_size)
            .with_kv_type(kv_like.kv_type);
        let kv = KvCache::new(kv_cfg)?;
        let max_seqs = max_seqs.max(1);
        let limits = BatchLimits {
            max_tokens: max_tokens.max(max_seqs),
            max_seqs,
            max_logit_rows: max_seqs,
        };
        let scratch = model.new_scratch(limits, &kv_cfg)?;
        Ok(Drafter {
            model,
            kv,
            scratch,
            seqs: HashMap::new(),
            max_tokens: limits.max_tokens,
        })
    }

    /// The same drafter computing on `target`'s (new) worker team, with an empty cache (after
    /// a worker rebuild).
    pub(crate) fn rebuilt(&self, target: &Model) -> Result<Drafter, EngineError> {
        let kv_cfg = *self.kv.config();
        let n = self.scratch_limits();
        Drafter::new(
            self.model.on_team_of(target),
            kv_cfg.n_blocks * kv_cfg.block_size,
            &kv_cfg,
            n.max_seqs,
            n.max_tokens,
        )
    }

    fn scratch_limits(&self) -> BatchLimits {
        self.scratch.limits
    }

    /// Draft KV blocks in use.
    #[cfg(test)]
    fn blocks_used(&self) -> usize {
        self.kv.total_blocks() - self.kv.free_blocks()
    }

    /// The draft's proposals for `wanted` (sequence, most tokens) of `sched`
    /// ([`Self::propose_for`]).
    pub(crate) fn propose<T>(
        &mut self,
        sched: &Scheduler<T>,
        wanted: &[(SeqId, usize)],
    ) -> Result<Vec<(SeqId, Vec<u32>)>, EngineError> {
        self.propose_for(|id| sched.seq(id).map(|s| s.tokens.as_slice()), wanted)
    }

    /// The draft's proposals for `wanted` (sequence, most tokens), `tokens_of` giving each
    /// sequence's tokens (None: the sequence is gone): each sequence's greedy continuation
    /// under the draft model, `want` tokens long, or empty when the draft cache has no room
    /// for it. Forgets the sequences `tokens_of` no longer knows.
    pub(crate) fn propose_for<'a>(
        &mut self,
        tokens_of: impl Fn(SeqId) -> Option<&'a [u32]>,
        wanted: &[(SeqId, usize)],
    ) -> Result<Vec<(SeqId, Vec<u32>)>, EngineError> {
        self.seqs.retain(|id, _| tokens_of(*id).is_some());
        let mut jobs: Vec<Job> = Vec::with_capacity(wanted.len());
        for &(id, want) in wanted {
            let Some(tokens) = tokens_of(id) else {
                continue;
            };
            // Keep what the sequence still has; the last token is run again for its logits.
            let done = self.keep_common(id, tokens);
            jobs.push(Job {
                id,
                tokens: tokens.to_vec(),
                len: tokens.len(),
                done,
                want,
                guess: true,
                failed: tokens.is_empty() || want == 0,
            });
        }
        // Each pass computes every unfinished job's pending tokens (the catch-up of a long
        // prompt spreads over several passes) and gives the jobs whose chunk reached their last
        // token one more guess.
        while jobs.iter().any(Job::pending) {
            self.pass(&mut jobs)?;
        }
        let mut out = Vec::with_capacity(jobs.len());
        for j in jobs {
            if let Some(ds) = self.seqs.get_mut(&j.id) {
                // The last guess was never fed: the cache holds `done` positions.
                ds.tokens.clear();
                ds.tokens.extend_from_slice(&j.tokens[..j.done]);
                if j.failed {
                    // Out of draft blocks: start over next time (frees them now).
                    self.seqs.remove(&j.id);
                }
            }
            let guesses = if j.failed {
                Vec::new()
            } else {
                j.tokens[j.len..].to_vec()
            };
            out.push((j.id, guesses));
        }
        Ok(out)
    }

    /// Computes the prompts of `ids` (all their tokens but the last, which the first
    /// proposal runs for its logits) into the draft cache, `tokens_of` giving each sequence's
    /// tokens: run in the step that prefills them on the target, so that the first proposal
    /// after the sequence's first token is a pass of two tokens, not a prefill of the whole
    /// prompt between two of its decode steps. Keeps what the draft cache already holds of
    /// them; a sequence the cache has no room for is dropped (its first proposal starts over).
    pub(crate) fn prefill_for<'a>(
        &mut self,
        tokens_of: impl Fn(SeqId) -> Option<&'a [u32]>,
        ids: &[SeqId],
    ) -> Result<(), EngineError> {
        let mut jobs: Vec<Job> = Vec::with_capacity(ids.len());
        for &id in ids {
            let Some(tokens) = tokens_of(id) else {
                continue;
            };
            let done = self.keep_common(id, tokens);
            let upto = tokens.len().saturating_sub(1);
            if done >= upto {
                continue;
            }
            jobs.push(Job {
                id,
                tokens: tokens[..upto].to_vec(),
                len: upto,
                done,
                want: 0,
                guess: false,
                failed: false,
            });
        }
        while jobs.iter().any(Job::pending) {
            self.pass(&mut jobs)?;
        }
        for j in jobs {
            if j.failed {
                self.seqs.remove(&j.id);
            } else if let Some(ds) = self.seqs.get_mut(&j.id) {
                ds.tokens.clear();
                ds.tokens.extend_from_slice(&j.tokens[..j.done]);
            }
        }
        Ok(())
    }

    /// Keeps the longest prefix of what the draft cache holds for `id` that `tokens` still
    /// has, but never its last token (it is run again for its logits); returns its length.
    fn keep_common(&mut self, id: SeqId, tokens: &[u32]) -> usize {
        let bs = self.kv.config().block_size;
        let ds = self.seqs.entry(id).or_insert_with(|| DraftSeq {
            table: BlockTable::new(self.kv.allocator()),
            tokens: Vec::new(),
        });
        let common = ds
            .tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        let done = common.min(tokens.len().saturating_sub(1));
        ds.tokens.truncate(done);
        ds.table.truncate(done.div_ceil(bs));
        done
    }

    /// One draft forward pass over the jobs' pending tokens (within `max_tokens`).
    fn pass(&mut self, jobs: &mut [Job]) -> Result<(), EngineError> {
        let mut room = self.max_tokens;
        // (job index, chunk end, wants logits)
        let mut chunks: Vec<(usize, usize, bool)> = Vec::new();
        for (i, j) in jobs.iter_mut().enumerate() {
            if !j.pending() || room == 0 {
                continue;
            }
            let n = (j.tokens.len() - j.done).min(room);
            let end = j.done + n;
            let ds = self.seqs.get_mut(&j.id).expect("job has a draft sequence");
            if ds.table.reserve(end).is_err() {
                j.failed = true;
                continue;
            }
            room -= n;
            chunks.push((i, end, j.guess && end == j.tokens.len()));
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let inputs: Vec<SeqInput<'_>> = chunks
            .iter()
            .map(|&(i, end, logits)| {
                let j = &jobs[i];
                SeqInput {
                    tokens: &j.tokens[j.done..end],
                    start_pos: j.done,
                    table: &self.seqs[&j.id].table,
                    logits: if logits {
                        LogitsWanted::Last
                    } else {
                        LogitsWanted::None
                    },
                }
            })
            .collect();
        let logits = self
            .model
            .forward(&inputs, &mut self.kv, &mut self.scratch)?;

        let next: Vec<Option<u32>> = (0..chunks.len())
            .map(|b| logits.last(b).map(argmax))
            .collect();
        drop(inputs);
        for (&(i, end, _), t) in chunks.iter().zip(next) {
            let j = &mut jobs[i];
            j.done = end;
            if let Some(t) = t {
                j.tokens.push(t);
            }
        }
        Ok(())
    }
}

/// The most likely token (the lowest id among equals): the draft's greedy choice.
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::{argmax, Drafter};
    use crate::engine::Model;
    use crate::scheduler::state::SeqId;

    /// A drafter over the real default model (one thread), 64 blocks of 16 positions.
    fn drafter() -> Drafter {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(
            path.is_file(),
            "default model {} is missing",
            path.display()
        );
        let m = Model::load(&path, 1).unwrap();
        let kv = m.kv_config(1024, 16);
        Drafter::new(m.on_team_of(&m), 1024, &kv, 4, 256).unwrap()
    }

    #[test]
    fn a_rejected_proposal_leaves_the_draft_cache_as_if_never_written() {
        let id: SeqId = 7;
        // A prompt of 40 tokens (ids of ordinary words), proposals of 6.
        let prompt: Vec<u32> = (0..40).map(|i| 1000 + (i * 37) % 500).collect();
        let mut a = drafter();
        let p1 = a
            .propose_for(|_| Some(prompt.as_slice()), &[(id, 6)])
            .unwrap()[0]
            .1
            .clone();
        assert_eq!(p1.len(), 6);
        // The target kept two guesses, then drew another token than the third.
        let mut tokens = prompt.clone();
        tokens.extend_from_slice(&p1[..2]);
        tokens.push(p1[2] ^ 1);
        let p2 = a
            .propose_for(|_| Some(tokens.as_slice()), &[(id, 6)])
            .unwrap();
        // A drafter that only ever saw the kept tokens proposes the same, holding as many
        // blocks.
        let mut b = drafter();
        let fresh = b
            .propose_for(|_| Some(tokens.as_slice()), &[(id, 6)])
            .unwrap();
        assert_eq!(p2, fresh);
        assert_eq!(a.blocks_used(), b.blocks_used());
        // A sequence that is gone gives its blocks back.
        a.propose_for(|_| None, &[]).unwrap();
        assert_eq!(a.blocks_used(), 0);
    }

    #[test]
    fn a_prompt_prefilled_ahead_proposes_as_a_fresh_drafter_does() {
        let id: SeqId = 3;
        let prompt: Vec<u32> = (0..40).map(|i| 1000 + (i * 37) % 500).collect();
        let mut a = drafter();
        a.prefill_for(|_| Some(prompt.as_slice()), &[id]).unwrap();
        // Every prompt token but the last, which the first proposal runs for its logits.
        assert_eq!(a.seqs[&id].tokens, prompt[..39]);
        assert_eq!(a.blocks_used(), 3);
        // Prefilling again computes nothing new.
        a.prefill_for(|_| Some(prompt.as_slice()), &[id]).unwrap();
        assert_eq!(a.seqs[&id].tokens.len(), 39);
        // The target's first token, then a proposal: the same as a drafter that computed the
        // whole prompt in the proposal's own passes.
        let mut tokens = prompt.clone();
        tokens.push(1234);
        let p = a
            .propose_for(|_| Some(tokens.as_slice()), &[(id, 4)])
            .unwrap();
        let mut b = drafter();
        let fresh = b
            .propose_for(|_| Some(tokens.as_slice()), &[(id, 4)])
            .unwrap();
        assert_eq!(p, fresh);
        assert_eq!(p[0].1.len(), 4);
        assert_eq!(a.blocks_used(), b.blocks_used());
    }

    #[test]
    fn argmax_takes_the_first_of_equals() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
