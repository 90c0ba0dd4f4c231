//! The scheduler proper: a pure state machine over sequences and KV blocks, with no model,
//! no threads and no clock. [`Scheduler::schedule`] decides one step (which sequences run and
//! how many of their tokens, which blocks to copy first); the worker runs the forward pass and
//! reports back with [`Scheduler::advance`], [`Scheduler::append`], [`Scheduler::fork`] and
//! [`Scheduler::remove`]. That makes budgets, chunking, fairness and preemption testable step
//! by step (see the tests) — vLLM v1's design.
//!
//! One step, as vLLM's v1 scheduler does it: every sequence has `computed` tokens in the KV
//! cache and wants to bring that up to all the tokens it has (the prompt, or the prompt plus
//! what it generated). The token budget (`max_batch_tokens`) is spent on running sequences
//! first, in admission order (a decoding sequence takes 1 token, a partly prefilled one a
//! chunk), then on waiting ones, first come first served, while `max_num_seqs` allows.
//! Chunked prefill is nothing more than clipping a sequence's new tokens to the budget left,
//! so a long prompt never blocks the streams already decoding, and no request that passed
//! admission can stall the queue. While any sequence is decoding, prompt tokens in a step are
//! further capped (`max_prefill_while_decoding`): the step's time is every stream's
//! inter-token gap.
//!
//! KV blocks: a sequence reserves blocks for the positions it is about to compute. When the
//! pool is short, unused prefix-cache blocks are evicted first; then the newest running
//! sequence is preempted (its blocks freed, its `computed` reset to 0, and it goes back to the
//! front of the queue: recomputation). A sequence preempted `max_preemptions` times is not
//! chosen again while another victim exists. While a step preempted anything, nothing new is
//! admitted. A waiting sequence that cannot get its blocks stops admission (first come, first
//! served: nobody overtakes it).

use crate::engine::kv_cache::{BlockAllocator, BlockTable, KvCacheError};
use crate::scheduler::prefix_cache::{
    namespace_root, Hit, PrefixCache, PrefixStats, RamTier, ROOT,
};
use crate::scheduler::speculative::{SpecConfig, SpecRequest, SpecState};
use std::collections::{HashMap, VecDeque};

/// Identifies a sequence (one choice of one request).
pub type SeqId = u64;

/// Prompt positions whose logits rows one step may produce for sequences that want a row at
/// every prompt position (prompt logprobs): their prefill chunks are clipped to this, so the
/// step's logits buffer stays small (each row is `n_vocab` floats).
pub const PROMPT_LOGIT_ROWS: usize = 32;

/// The scheduler's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sequences in one step (running at once).
    pub max_num_seqs: usize,
    /// New tokens in one step, over all sequences (prefill chunks + decode tokens).
    pub max_batch_tokens: usize,
    /// Prompt (prefill) work in one step while any sequence is decoding, in token
    /// equivalents (see `attn_positions_per_token`): a step's time is the gap every running
    /// stream sees, so a long prompt is read in small chunks beside them. With nobody
    /// decoding, prefill may use all of `max_batch_tokens`.
    pub max_prefill_while_decoding: usize,
    /// Cached positions whose attention costs as much as one token's matmuls: a prompt token
    /// at position `p` counts as `1 + p / attn_positions_per_token` token equivalents, so a
    /// chunk deep into a long prompt is smaller. 0 counts tokens only.
    pub attn_positions_per_token: usize,
    /// Times a sequence may be preempted before it is no longer chosen as the victim.
    pub max_preemptions: u32,
    /// The model's context: a sequence never grows past it.
    pub n_ctx: usize,
    /// Reuse cached prompt blocks.
    pub prefix_cache: bool,
    /// Sequences waiting at most; [`Scheduler::add`] refuses more ([`AdmitError::QueueFull`]).
    pub max_waiting: usize,
}

/// Why a sequence cannot be admitted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("the prompt ({prompt} tokens) plus max_tokens ({max_tokens}) exceed the model's context of {n_ctx} tokens")]
    ContextLength {
        prompt: usize,
        max_tokens: usize,
        n_ctx: usize,
    },
    #[error(
        "the request needs {needed} KV positions, more than the whole KV cache holds ({capacity})"
    )]
    KvCapacity { needed: usize, capacity: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("{waiting} requests are already waiting (the limit)")]
    QueueFull { waiting: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Waiting,
    Running,
}

/// A sequence's state. `T` is the worker's per-sequence payload (sampler, text state, ...).
pub struct Seq<T> {
    pub id: SeqId,
    /// Prompt then generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// The sequence never grows past this many tokens (prompt + max_tokens, within n_ctx).
    pub max_len: usize,
    /// Tokens whose K/V are in the cache.
    computed: usize,
    table: BlockTable,
    /// Full blocks of `tokens` already inserted in the prefix cache, and the last one's key.
    registered: usize,
    last_key: u64,
    /// The prefix cache namespace's root its blocks chain from ([`namespace_root`]).
    root: u64,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: usize,
    pub preemptions: u32,
    /// Running slots this sequence stands for until it forks (its request's `n`), else 1.
    slots: usize,
    /// Every prompt position needs its logits row (see [`Scheduler::want_prompt_rows`]).
    rows: bool,
    /// How many tokens to guess next (speculative decoding).
    pub spec: SpecState,
    /// The guesses planned for this step's verify item (empty outside a step that verifies).
    draft: Vec<u32>,
    /// A draft model's proposal and the token count it continues
    /// ([`Scheduler::propose`]; used only while `tokens` is that long).
    proposal: (usize, Vec<u32>),
    at: Where,
    pub payload: T,
}

impl<T> Seq<T> {
    pub fn computed(&self) -> usize {
        self.computed
    }

    pub fn table(&self) -> &BlockTable {
        &self.table
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// The guesses this step verifies after the last token (see [`PlanItem::draft`]).
    pub fn draft(&self) -> &[u32] {
        &self.draft
    }

    /// Whether the sequence is still in the waiting queue (never scheduled, or preempted).
    pub fn is_waiting(&self) -> bool {
        self.at == Where::Waiting
    }
}

/// Counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub preemptions: u64,
    pub steps: u64,
}

/// See the module docs.
pub struct Scheduler<T> {
    limits: Limits,
    alloc: BlockAllocator,
    prefix: PrefixCache,
    seqs: HashMap<SeqId, Seq<T>>,
    waiting: VecDeque<SeqId>,
    /// In admission order (the newest last: the first preemption victim).
    running: Vec<SeqId>,
    running_slots: usize,
    counters: Counters,
    spec: SpecConfig,
    pending: checkpoints::PendingCheckpoints,
}

impl<T> Scheduler<T> {
    /// A scheduler handing out `alloc`'s blocks.
    pub fn new(limits: Limits, alloc: BlockAllocator) -> Scheduler<T> {
        Scheduler {
            limits,
            prefix: PrefixCache::new(alloc.clone()),
            alloc,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            running_slots: 0,
            counters: Counters::default(),
            spec: SpecConfig::off(),
            pending: checkpoints::PendingCheckpoints::default(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn block_size(&self) -> usize {
        self.alloc.block_size()
    }

    /// Checks that a request can ever run: its prompt and `max_tokens` for each of its `n`
    /// choices fit the context and the whole KV pool (the choices share the prompt's blocks).
    pub fn check_fits(&self, prompt: usize, max_tokens: usize, n: usize) -> Result<(), AdmitError> {
        check_fits_layout(
            prompt,
            max_tokens,
            n,
            self.limits.n_ctx,
            self.limits.max_batch_tokens,
            PoolShape {
                layout: self.alloc.layout(),
                block_size: self.block_size(),
                total: self.alloc.total_blocks(),
            },
        )
    }

    /// Queues a new sequence (last in line) for a request with `n` choices (it forks the other
    /// `n - 1` when its prompt is done).
    pub fn add(
        &mut self,
        id: SeqId,
        prompt: Vec<u32>,
        max_tokens: usize,
        n: usize,
        payload: T,
    ) -> Result<(), AdmitError> {
        self.check_fits(prompt.len(), max_tokens, n)?;
        if self.waiting.len() >= self.limits.max_waiting {
            return Err(AdmitError::QueueFull {
                waiting: self.waiting.len(),
            });
        }
        let prompt_len = prompt.len();
        let seq = Seq {
            id,
            max_len: prompt_len + max_tokens,
            tokens: prompt,
            prompt_len,
            computed: 0,
            table: BlockTable::new(&self.alloc),
            registered: 0,
            last_key: ROOT,
            root: ROOT,
            cached_tokens: 0,
            preemptions: 0,
            slots: n.max(1),
            rows: false,
            spec: SpecState::new(&self.spec, SpecRequest::default()),
            draft: Vec::new(),
            proposal: (0, Vec::new()),
            at: Where::Waiting,
            payload,
        };
        self.seqs.insert(id, seq);
        self.waiting.push_back(id);
        Ok(())
    }

    /// Marks a waiting sequence as needing the logits row of every prompt position (prompt
    /// logprobs): it skips the prefix cache (a cached position has no row), and its prefill
    /// chunks produce at most [`PROMPT_LOGIT_ROWS`] rows per step, over all such sequences.
    pub fn want_prompt_rows(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.rows = true;
        }
    }

    /// Puts a waiting sequence that has not looked up the prefix cache yet in namespace `ns`
    /// of the prefix cache ([`namespace_root`]; None: the shared one): its prompt matches,
    /// and its blocks enter, only that namespace.
    pub fn set_cache_namespace(&mut self, id: SeqId, ns: Option<u64>) {
        if let Some(s) = self.seqs.get_mut(&id) {
            invariant!(s.table.n_blocks() == 0 && s.registered == 0);
            s.root = namespace_root(ns);
            s.last_key = s.root;
        }
    }

    pub fn seq(&self, id: SeqId) -> Option<&Seq<T>> {
        self.seqs.get(&id)
    }

    pub fn seq_mut(&mut self, id: SeqId) -> Option<&mut Seq<T>> {
        self.seqs.get_mut(&id)
    }

    /// Every sequence, in no particular order.
    pub fn seqs(&self) -> impl Iterator<Item = &Seq<T>> {
        self.seqs.values()
    }

    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn n_running(&self) -> usize {
        self.running.len()
    }

    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Blocks in use (by sequences or the prefix cache) and in the pool.
    pub fn kv_blocks(&self) -> (usize, usize) {
        let total = self.alloc.total_blocks();
        (total - self.alloc.free_blocks(), total)
    }

    /// Blocks held only by the prefix cache (free to evict).
    pub fn kv_cached_evictable(&self) -> usize {
        self.prefix.evictable()
    }

    pub fn prefix_stats(&self) -> PrefixStats {
        self.prefix.stats()
    }

    /// Gives the prefix cache a RAM tier of `ram_bytes` (0: none), and with `persist` queues
    /// its new blocks for a disk tier; drops what it held.
    pub fn set_tiers(&mut self, ram_bytes: usize, persist: bool) {
        self.prefix = PrefixCache::with_ram(self.alloc.clone(), ram_bytes);
        if persist {
            self.prefix.persist_new_blocks();
        }
    }

    /// The prefix cache's RAM tier (for monitoring).
    pub fn ram_tier(&self) -> &RamTier {
        self.prefix.ram()
    }

    /// The prefix cache, for the worker's tier copies ([`PrefixCache::store_spill`], disk
    /// loads): only what the plan asked for.
    pub fn prefix_mut(&mut self) -> &mut PrefixCache {
        &mut self.prefix
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Plans the next step (see the module docs). The plan's items borrow nothing: read their
    /// tokens and tables through [`Self::seq`] while executing.
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = self.plan();
        plan.spills = self.prefix.take_spills();
        plan
    }

    fn plan(&mut self) -> StepPlan {
        self.counters.steps += 1;
        self.drop_pending_checkpoints();
        let mut plan = StepPlan::default();
        let mut budget = self.limits.max_batch_tokens;
        let decoders = self.decoders();
        let decoding = decoders > 0;
        // Guesses only while the step is small (memory-bound): see the speculative module.
        let mut guess_rows = if decoders <= self.spec.max_seqs {
            self.spec.max_rows()
        } else {
            0
        };
        let mut prefill_left = if decoding {
            self.limits.max_prefill_while_decoding.max(1)
        } else {
            usize::MAX
        };
        let mut rows_left = PROMPT_LOGIT_ROWS;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let (computed, have, rows) = {
                let s = &self.seqs[&id];
                (
                    s.computed,
                    s.tokens.len(),
                    s.rows && s.computed < s.prompt_len,
                )
            };
            let is_decode = have - computed == 1 && !rows;
            let mut draft = if is_decode {
                self.guesses(id, budget.saturating_sub(1).min(guess_rows))
            } else {
                Vec::new()
            };
            let n = if is_decode {
                1 + draft.len()
            } else {
                self.chunk_fitting(computed, have - computed, prefill_left)
            }
            .min(budget)
            .min(if rows { rows_left } else { usize::MAX });
            let n = if is_decode {
                n
            } else {
                self.checkpoint_chunk(computed, n)
            };
            if n == 0 {
                i += 1;
                continue;
            }
            let mut reserved = self.reserve(id, computed + n, &mut plan.copies);
            let mut n = n;
            if reserved.is_err() && !draft.is_empty() {
                // Guesses never preempt anyone: decode the one token instead.
                draft.clear();
                n = 1;
                reserved = self.reserve(id, computed + n, &mut plan.copies);
            }
            match reserved {
                Ok(()) => {
                    guess_rows -= draft.len();
                    plan.items.push(PlanItem {
                        seq: id,
                        start: computed,
                        len: n,
                        logits: computed + n - draft.len() == have
                            && self.seqs[&id].max_len > self.seqs[&id].prompt_len,
                        rows,
                        draft: draft.len(),
                    });
                    self.seqs
                        .get_mut(&id)
                        .expect("running sequence exists")
                        .draft = draft;
                    budget -= n;
                    if rows {
                        rows_left -= n;
                    }
                    if !is_decode {
                        prefill_left = prefill_left.saturating_sub(self.chunk_cost(computed, n));
                        self.plan_checkpoint(id, computed + n, &mut plan);
                    }
                    i += 1;
                }
                Err(_) => {
                    // Preempt the newest running sequence not yet planned (possibly this one).
                    let victim = self.pick_victim(i);
                    plan.preempted.push(self.preempt(victim));
                    if victim == i {
                        // This sequence went back to the queue; the next one moved into slot i.
                        continue;
                    }
                }
            }
        }
        if !plan.preempted.is_empty() {
            return plan;
        }
        while budget > 0 && prefill_left > 0 {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            let slots = self.seqs[&id].slots;
            if self.running_slots + slots > self.limits.max_num_seqs && !self.running.is_empty() {
                break;
            }
            let wants_rows = self.seqs[&id].rows;
            let restores_before = plan.restores.len();
            let mut looked_up: Option<Hit> = None;
            if self.seqs[&id].table.n_blocks() == 0 && self.limits.prefix_cache && !wants_rows {
                let s = self.seqs.get_mut(&id).expect("waiting sequence exists");
                let hit = self
                    .prefix
                    .lookup(s.root, &s.tokens, &mut s.table, &mut plan.restores);
                s.computed = hit.tokens;
                // Restored blocks enter the pool's cache after this step (see `advance`).
                s.registered = hit.pool_tokens / self.alloc.block_size();
                s.last_key = key_of(
                    s.root,
                    &s.tokens[..hit.pool_tokens],
                    self.alloc.block_size(),
                );
                if s.preemptions == 0 {
                    s.cached_tokens = hit.tokens.min(s.prompt_len);
                }
                looked_up = Some(hit);
            }
            let (computed, have) = {
                let s = &self.seqs[&id];
                (s.computed, s.tokens.len())
            };
            let rows = wants_rows && computed < self.seqs[&id].prompt_len;
            let n = self
                .chunk_fitting(computed, have - computed, prefill_left)
                .min(budget)
                .min(if rows { rows_left } else { usize::MAX });
            let n = self.checkpoint_chunk(computed, n);
            if n == 0 {
                break;
            }
            if self.reserve(id, computed + n, &mut plan.copies).is_err() {
                // Give back cached blocks it took, so they stay evictable while it waits; the
                // lookup is counted again when it is admitted.
                let s = self.seqs.get_mut(&id).expect("waiting sequence exists");
                if let Some(hit) = &looked_up {
                    self.prefix.forget_lookup(hit);
                }
                plan.restores.truncate(restores_before);
                s.table = BlockTable::new(&self.alloc);
                s.computed = 0;
                s.registered = 0;
                s.last_key = s.root;
                break;
            }
            self.waiting.pop_front();
            let s = self.seqs.get_mut(&id).expect("waiting sequence exists");
            s.at = Where::Running;
            self.running.push(id);
            self.running_slots += slots;
            plan.items.push(PlanItem {
                seq: id,
                start: computed,
                len: n,
                logits: computed + n == have && self.seqs[&id].max_len > self.seqs[&id].prompt_len,
                rows,
                draft: 0,
            });
            Self::plan_restore(id, looked_up, &mut plan);
            self.plan_checkpoint(id, computed + n, &mut plan);
            budget -= n;
            if rows {
                rows_left -= n;
            }
            prefill_left = prefill_left.saturating_sub(self.chunk_cost(computed, n));
        }
        plan
    }

    /// Token equivalents of prompt tokens at positions `start..start + n` (each costs 1 plus
    /// its attention over the positions before it).
    fn chunk_cost(&self, start: usize, n: usize) -> usize {
        let k = self.limits.attn_positions_per_token;
        if k == 0 || n == 0 {
            return n;
        }
        // Sum of positions start..start+n, in u128 so that no budget can overflow it.
        let pos_sum = (n as u128) * (2 * start as u128 + n as u128 - 1) / 2;
        n.saturating_add(usize::try_from(pos_sum / k as u128).unwrap_or(usize::MAX))
    }

    /// The most tokens (at most `want`, at least 1 when `left` allows any work) of a prompt
    /// chunk starting at `start` whose cost fits `left`.
    fn chunk_fitting(&self, start: usize, want: usize, left: usize) -> usize {
        if left == usize::MAX || self.chunk_cost(start, want) <= left {
            return want;
        }
        if left == 0 {
            return 0;
        }
        // Largest n with cost(n) <= left (cost grows with n); a chunk never stalls at 0.
        let (mut lo, mut hi) = (1, want);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.chunk_cost(start, mid) <= left {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Index in `running` of the sequence to preempt when `running[i]` needs blocks: the newest
    /// one after `i` still under the preemption bound, else the newest after `i`, else `i`.
    fn pick_victim(&self, i: usize) -> usize {
        let max = self.limits.max_preemptions;
        let later = i + 1..self.running.len();
        later
            .clone()
            .rev()
            .find(|&j| self.seqs[&self.running[j]].preemptions < max)
            .or_else(|| later.clone().next_back())
            .unwrap_or(i)
    }

    /// Frees `running[idx]`'s blocks and puts it at the front of the queue (recompute);
    /// returns its id.
    fn preempt(&mut self, idx: usize) -> SeqId {
        let id = self.running.remove(idx);
        let s = self.seqs.get_mut(&id).expect("running sequence exists");
        s.table = BlockTable::new(&self.alloc);
        s.computed = 0;
        s.registered = 0;
        s.last_key = s.root;
        s.preemptions += 1;
        s.at = Where::Waiting;
        self.running_slots -= s.slots;
        self.waiting.push_front(id);
        self.counters.preemptions += 1;
        id
    }

    /// Makes `id`'s table cover positions `< upto`, first giving it its own copy of a shared
    /// block it is about to write (recorded in `copies`), evicting cached blocks if the pool is
    /// short. On failure nothing changes.
    fn reserve(
        &mut self,
        id: SeqId,
        upto: usize,
        copies: &mut Vec<(u32, u32)>,
    ) -> Result<(), KvCacheError> {
        let bs = self.block_size();
        let s = self.seqs.get_mut(&id).expect("sequence exists");
        // Local layers' pages out of every query's window from here on go back first.
        s.table.forget_before(s.computed);
        let first = s.computed / bs;
        let shared_first = s.table.shared_pages_at(first);
        let need = s.table.pages_to_reserve(upto) + shared_first;
        let free = self.alloc.free_blocks();
        if need > free {
            self.prefix.evict(need - free);
            if need > self.alloc.free_blocks() {
                return Err(KvCacheError::OutOfBlocks {
                    needed: need,
                    free: self.alloc.free_blocks(),
                });
            }
        }
        let s = self.seqs.get_mut(&id).expect("sequence exists");
        if shared_first > 0 {
            copies.extend(s.table.unshare(first)?);
        }
        s.table.reserve(upto)
    }

    /// Records that the step computed `len` more tokens of `id` (its plan item), and inserts
    /// the blocks that became full into the prefix cache (their K/V now exists).
    pub fn advance(&mut self, id: SeqId, len: usize) {
        let bs = self.block_size();
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        s.computed = (s.computed + len).min(s.tokens.len());
        if !self.limits.prefix_cache {
            return;
        }
        while (s.registered + 1) * bs <= s.computed {
            let b = s.registered;
            let chunk = &s.tokens[b * bs..(b + 1) * bs];
            match self
                .prefix
                .insert(s.root, s.last_key, chunk, &s.table.block_pages(b))
            {
                Ok(key) => s.last_key = key,
                Err(_) => break,
            }
            s.registered += 1;
        }
        let (registered, last_key) = (s.registered, s.last_key);
        self.attach_checkpoints(id, registered, last_key);
    }

    /// Appends a generated token to `id`.
    pub fn append(&mut self, id: SeqId, token: u32) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.tokens.push(token);
        }
    }

    /// A new running sequence `new` sharing everything `parent` has computed (its prompt
    /// blocks; the partly filled last block is copied on its first write), with its own
    /// payload. The parent stops standing for the forked slots.
    pub fn fork(&mut self, parent: SeqId, new: SeqId, payload: T) -> bool {
        let Some(p) = self.seqs.get_mut(&parent) else {
            return false;
        };
        if p.slots > 1 {
            p.slots -= 1;
        } else {
            self.running_slots += 1;
        }
        // A table with a recurrent state cannot share it: the fork recomputes the prompt
        // from position 0 in a table of its own (as after a preemption).
        let (table, computed, registered, last_key) = if p.table.state_slot().is_some() {
            (BlockTable::new(&self.alloc), 0, 0, p.root)
        } else {
            (p.table.fork(), p.computed, p.registered, p.last_key)
        };
        let seq = Seq {
            id: new,
            tokens: p.tokens[..p.computed].to_vec(),
            prompt_len: p.prompt_len,
            max_len: p.max_len,
            computed,
            table,
            registered,
            last_key,
            root: p.root,
            cached_tokens: p.cached_tokens,
            preemptions: 0,
            slots: 1,
            rows: false,
            spec: p.spec,
            draft: Vec::new(),
            proposal: (0, Vec::new()),
            at: p.at,
            payload,
        };
        let at = seq.at;
        self.seqs.insert(new, seq);
        match at {
            Where::Running => self.running.push(new),
            Where::Waiting => self.waiting.push_back(new),
        }
        true
    }

    /// Removes a sequence wherever it is (finished, aborted or failed); its blocks are freed
    /// (those in the prefix cache stay cached). Returns its state.
    pub fn remove(&mut self, id: SeqId) -> Option<Seq<T>> {
        let s = self.seqs.remove(&id)?;
        match s.at {
            Where::Running => {
                self.running.retain(|&x| x != id);
                self.running_slots -= s.slots;
            }
            Where::Waiting => self.waiting.retain(|&x| x != id),
        }
        Some(s)
    }

    /// Empties the prefix cache (its unused blocks return to the pool).
    pub fn clear_prefix_cache(&mut self) {
        self.prefix.clear();
    }
}

/// The chained key of the full blocks of `tokens` from `root`.
fn key_of(root: u64, tokens: &[u32], bs: usize) -> u64 {
    tokens
        .chunks_exact(bs)
        .fold(root, crate::scheduler::prefix_cache::block_key)
}

mod checkpoints;
mod fits;
mod plan;
mod speculation;
pub use checkpoints::checkpoint_slots;
pub use fits::{check_fits, check_fits_layout, PoolShape};
pub use plan::{PlanItem, StepPlan};

#[cfg(test)]
mod checkpoint_tests;
#[cfg(test)]
mod spec_tests;
#[cfg(test)]
mod tests;
