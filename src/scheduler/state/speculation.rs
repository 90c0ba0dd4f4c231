//! The scheduler's side of speculative decoding: each sequence's guessing state, the guesses a
//! step verifies, and what a verify leaves behind (blocks of rejected guesses given back).

use super::{Scheduler, SeqId, StepPlan};
use crate::scheduler::speculative::{ngram, SpecConfig, SpecMethod, SpecRequest, SpecState};

impl<T> Scheduler<T> {
    /// The same scheduler guessing tokens as `spec` says (speculative decoding).
    pub fn with_speculation(mut self, spec: SpecConfig) -> Scheduler<T> {
        self.spec = spec;
        self
    }

    pub fn speculation(&self) -> &SpecConfig {
        &self.spec
    }

    /// Gives sequence `id` its request's own speculation bounds.
    pub fn set_speculation(&mut self, id: SeqId, req: SpecRequest) {
        let spec = SpecState::new(&self.spec, req);
        if let Some(s) = self.seqs.get_mut(&id) {
            s.spec = spec;
        }
    }

    /// The tokens to guess after running sequence `id`'s last one, at most `most` (the step's
    /// budget and rows left): none while its [`SpecState`] pauses, when the proposal is
    /// shorter than its minimum, or when fewer tokens than that are left before `max_len`.
    /// Counts down the pause of a sequence that does not guess.
    pub(super) fn guesses(&mut self, id: SeqId, most: usize) -> Vec<u32> {
        if !matches!(self.spec.method, SpecMethod::Ngram | SpecMethod::Draft) {
            return Vec::new();
        }
        let s = self.seqs.get_mut(&id).expect("running sequence exists");
        let want = s.spec.want();
        if want == 0 {
            s.spec.skipped();
            return Vec::new();
        }
        // The verify emits up to k + 1 tokens; the sequence may end at max_len.
        let room = s.max_len.saturating_sub(s.tokens.len() + 1);
        let k = want.min(room).min(most);
        if k < s.spec.min() {
            return Vec::new();
        }
        let cfg = self.spec;
        let g = match cfg.method {
            SpecMethod::Draft => {
                let (at, mut p) = std::mem::take(&mut s.proposal);
                if at != s.tokens.len() {
                    return Vec::new();
                }
                p.truncate(k);
                p
            }
            _ => ngram::propose(&s.tokens, cfg.ngram_min, cfg.ngram_max, k).to_vec(),
        };
        if g.len() < s.spec.min() {
            return Vec::new();
        }
        g
    }

    /// Running sequences that decode their next token (their prompt computed but the last
    /// token): the step is memory-bound while few of them run.
    pub(super) fn decoders(&self) -> usize {
        self.running
            .iter()
            .filter(|id| {
                let s = &self.seqs[id];
                s.computed + 1 == s.tokens.len() && s.tokens.len() > s.prompt_len
            })
            .count()
    }

    /// With a draft model ([`SpecMethod::Draft`]): the sequences the next plan would verify
    /// guesses for, and how many tokens each may use, for the worker to run the draft model on
    /// before [`Self::schedule`] and hand its proposals to [`Self::propose`]. Empty for other
    /// methods, when more than `max_seqs` sequences decode (the step is compute-bound), and
    /// for sequences pausing after misses, too close to their length limit (`max_tokens`)
    /// for their minimum, or prefilling. The draft's own cost is kept small this way: it runs
    /// only where the plan would use what it proposes.
    pub fn draft_wanted(&self) -> Vec<(SeqId, usize)> {
        if self.spec.method != SpecMethod::Draft || !self.spec.enabled() {
            return Vec::new();
        }
        if self.decoders() > self.spec.max_seqs {
            return Vec::new();
        }
        self.running
            .iter()
            .filter_map(|&id| {
                let s = &self.seqs[&id];
                if s.tokens.len() != s.computed + 1 || (s.rows && s.computed < s.prompt_len) {
                    return None;
                }
                let room = s.max_len.saturating_sub(s.tokens.len() + 1);
                let k = s.spec.want().min(room).min(self.spec.max_draft);
                (k > 0 && k >= s.spec.min()).then_some((id, k))
            })
            .take(self.spec.max_seqs)
            .collect()
    }

    /// With a draft model ([`SpecMethod::Draft`]): the sequences `plan` computes prompt
    /// tokens of and that will guess once they decode (a reply to generate, speculation on
    /// for the request), for the worker to compute their prompts into the draft model's cache
    /// in the same step: the draft's prefill then counts in the time to the first token, as
    /// the target's does, instead of delaying the second. None while more than `max_seqs`
    /// sequences run (no guesses would be made for them).
    pub fn draft_prefills(&self, plan: &StepPlan) -> Vec<SeqId> {
        if self.spec.method != SpecMethod::Draft
            || !self.spec.enabled()
            || self.running.len() > self.spec.max_seqs
        {
            return Vec::new();
        }
        plan.items
            .iter()
            .filter(|it| it.draft == 0)
            .filter_map(|it| {
                let s = self.seqs.get(&it.seq)?;
                (it.start < s.prompt_len && s.max_len > s.prompt_len && s.spec.want() > 0)
                    .then_some(it.seq)
            })
            .collect()
    }

    /// A draft model's proposal for what follows sequence `id`'s current tokens (see
    /// [`Self::draft_wanted`]); the next plan verifies (a prefix of) it.
    pub fn propose(&mut self, id: SeqId, tokens: Vec<u32>) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.proposal = (s.tokens.len(), tokens);
        }
    }

    /// After a verify item of `id` ran and its drawn tokens were appended (each after an
    /// [`Self::advance`] of 1): records that `accepted` of its `drafted` guesses were kept,
    /// forgets the guesses, and gives back the blocks past the positions computed, which held
    /// only rejected guesses' K/V (the prefix cache never saw them: only blocks full of
    /// computed positions go there).
    pub fn verified(&mut self, id: SeqId, drafted: usize, accepted: usize) {
        let bs = self.block_size();
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        s.draft.clear();
        s.spec.verified(drafted, accepted);
        s.table.truncate(s.computed.div_ceil(bs));
    }
}
