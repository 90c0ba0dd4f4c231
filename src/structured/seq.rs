//! One sequence's constraint inside the scheduler: compute the mask of allowed tokens (before
//! or while the forward pass runs; it needs no logits), let the sampler draw under it, then
//! advance on the drawn token.
//!
//! End of generation: llguidance allows the end-of-generation ids only where the grammar may
//! end, so a reply cannot stop half-way. Once the grammar can take no further token the
//! sequence is complete ([`Step::Complete`]) and the scheduler ends it without spending a
//! token on the end marker.

use super::bounds::JsonBounds;
use super::completion::Completion;
use super::lookahead::Lookahead;
use super::think::ThinkBudget;
use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mask work of one sequence (reported per request and per step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskStats {
    pub masks: u64,
    pub time: Duration,
}

/// What a drawn token did to the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// More tokens may follow.
    Continue,
    /// The grammar is complete and allows nothing more: end the sequence now.
    Complete,
    /// The token was not allowed or the matcher failed (a bug, never input): end the sequence.
    Failed(String),
}

/// A sequence's matcher and its current mask.
pub struct SeqConstraint {
    matcher: Matcher,
    /// Narrows each mask so JSON numbers and whitespace runs end ([`super::bounds`]).
    bounds: Option<JsonBounds>,
    mask: Option<SimpleVob>,
    /// Tokens the sequence may still draw (`max_tokens` less those committed) and the margin
    /// within which the bounds steer the JSON to close ([`JsonBounds::close`]), when known.
    budget: Option<(usize, usize)>,
    /// Within the closing margin, steers a string the grammar does not let close yet toward
    /// a quote ([`super::lookahead`]); set with the budget.
    lookahead: Option<Lookahead>,
    /// Steers toward the shortest completion once the budget left comes within what it costs
    /// ([`super::completion`]); set with the budget.
    completion: Option<Completion>,
    /// Literal text of the schema's patterns, for the steering inside strings.
    phrases: Arc<[Vec<u8>]>,
    /// The free think part before the structured one ([`super::think`]): while it lasts the
    /// bounds and steering stand aside, and near the budget's end its close is forced.
    think: Option<ThinkBudget>,
    /// The mask could not be computed; the sequence must end.
    failed: Option<String>,
    stats: MaskStats,
}

impl std::fmt::Debug for SeqConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqConstraint")
            .field("has_mask", &self.mask.is_some())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Clone for SeqConstraint {
    /// A copy in the same state (its own parser; used when `n` choices fork from one prompt).
    fn clone(&self) -> Self {
        SeqConstraint {
            matcher: self.matcher.deep_clone(),
            bounds: self.bounds.clone(),
            mask: self.mask.clone(),
            budget: self.budget,
            lookahead: self.lookahead.clone(),
            completion: self.completion.clone(),
            phrases: Arc::clone(&self.phrases),
            think: self.think.clone(),
            failed: self.failed.clone(),
            stats: MaskStats::default(),
        }
    }
}

impl SeqConstraint {
    /// The grammar alone (no bounds on JSON runs).
    pub fn new(matcher: Matcher) -> SeqConstraint {
        SeqConstraint::with_bounds(matcher, None)
    }

    /// The grammar, each mask narrowed by `bounds`.
    pub fn with_bounds(matcher: Matcher, bounds: Option<JsonBounds>) -> SeqConstraint {
        SeqConstraint {
            matcher,
            bounds,
            budget: None,
            lookahead: None,
            completion: None,
            phrases: Arc::from(Vec::new()),
            think: None,
            mask: None,
            failed: None,
            stats: MaskStats::default(),
        }
    }

    /// The literal runs of the schema's patterns ([`super::phrases`]), tried by the steering
    /// inside strings; set before [`SeqConstraint::with_budget`].
    pub fn with_phrases(mut self, phrases: Arc<[Vec<u8>]>) -> SeqConstraint {
        self.phrases = phrases;
        self
    }

    /// A think part before the structured one ([`super::think`]).
    pub fn with_think(mut self, think: ThinkBudget) -> SeqConstraint {
        self.think = Some(think);
        self
    }

    /// Sets the tokens this sequence may draw in all (its `max_tokens`): once the budget left
    /// comes within what the shortest completion costs, masks follow that completion
    /// ([`super::completion`]); within the bounds' closing margin, masks keep only closing
    /// tokens where the grammar allows one, and inside a string that may not close yet, the
    /// tokens on the way to its quote ([`super::lookahead`]).
    pub fn with_budget(mut self, max_tokens: usize) -> SeqConstraint {
        self.budget = self
            .bounds
            .as_ref()
            .map(|b| (max_tokens, b.close_margin(max_tokens)));
        let table = self.bounds.as_ref().map(|b| Arc::clone(b.table()));
        self.lookahead = table
            .clone()
            .map(|t| Lookahead::new(t, Arc::clone(&self.phrases)));
        let slack = self.budget.map_or(0, |(_, margin)| margin / 4);
        self.completion =
            table.map(|t| Completion::new(t, Arc::clone(&self.phrases), max_tokens, slack));
        self
    }

    /// The same sequence without the steering toward the shortest completion (the closing
    /// margin and the string lookahead only): to measure what that steering adds.
    pub fn without_completion(mut self) -> SeqConstraint {
        self.completion = None;
        self
    }

    /// Whether the next token's mask is still to be computed.
    pub fn needs_mask(&self) -> bool {
        self.mask.is_none() && self.failed.is_none()
    }

    /// Computes the mask for the next token (a no-op when it is ready). Costly (up to a few
    /// milliseconds): run it off the step's critical path.
    pub fn compute_mask(&mut self) {
        if !self.needs_mask() {
            return;
        }
        let t0 = Instant::now();
        // A panic in the grammar engine fails this sequence only: the mask thread that runs
        // this outlives it (the matcher is not used again once `failed` is set).
        let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut m = self.matcher.compute_mask().map_err(|e| e.to_string())?;
            if let Some(t) = self.think.as_ref().filter(|t| t.active()) {
                t.force_close(&mut m);
            } else if m.num_set() > 0 {
                if let Some(b) = &self.bounds {
                    b.narrow(&mut m);
                    if let Some((left, margin)) = self.budget {
                        let completed = match &mut self.completion {
                            Some(c) => c.steer(&mut self.matcher, b, &mut m, left).is_some(),
                            None => false,
                        };
                        if !completed
                            && left <= margin
                            && b.close(&mut m).is_none()
                            && b.in_string()
                        {
                            if let Some(l) = &mut self.lookahead {
                                l.steer(&mut self.matcher, &mut m);
                            }
                        }
                    }
                }
            }
            Ok::<_, String>(m)
        }));
        match computed {
            Ok(Ok(m)) if m.num_set() > 0 => self.mask = Some(m),
            Ok(Ok(_)) => self.failed = Some("the grammar allows no token here".to_string()),
            Ok(Err(e)) => self.failed = Some(e),
            Err(_) => self.failed = Some("the grammar engine panicked".to_string()),
        }
        self.stats.masks += 1;
        self.stats.time += t0.elapsed();
    }

    /// The allowed tokens as bits (bit `i % 32` of word `i / 32`), once computed. Tokens past
    /// the end are not allowed.
    pub fn allowed(&self) -> Option<&[u32]> {
        self.mask.as_ref().map(SimpleVob::as_slice)
    }

    /// Why the mask could not be computed, if it could not.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Advances over the drawn token `id` (an end-of-generation id is accepted by the caller
    /// without calling this: the mask only allowed it where the grammar may end).
    pub fn commit(&mut self, id: u32) -> Step {
        let allowed = self.mask.take().is_some_and(|m| m.is_allowed(id));
        if !allowed {
            return Step::Failed(format!("token {id} is outside the grammar's mask"));
        }
        if let Err(e) = self.matcher.consume_token(id) {
            return Step::Failed(e.to_string());
        }
        // Where the structured part starts in this token (None: still thinking).
        let from = match &mut self.think {
            Some(t) => t.commit(id),
            None => Some(0),
        };
        match (from, &mut self.bounds) {
            (Some(0), Some(b)) => b.commit(id),
            (Some(at), Some(b)) => {
                let table = Arc::clone(b.table());
                b.commit_bytes(table.word(id).get(at..).unwrap_or_default());
            }
            _ => {}
        }
        if from.is_some() {
            if let Some(l) = &mut self.lookahead {
                l.commit(id);
            }
            if let Some(c) = &mut self.completion {
                c.commit(id);
            }
        }
        if let Some((left, _)) = &mut self.budget {
            *left = left.saturating_sub(1);
        }
        if self.matcher.is_stopped() {
            Step::Complete
        } else {
            Step::Continue
        }
    }

    pub fn stats(&self) -> MaskStats {
        self.stats
    }
}
