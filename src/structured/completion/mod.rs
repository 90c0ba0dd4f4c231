//! Closing sized to the shortest completion. A reply cut by `max_tokens` between JSON tokens
//! with required keys still to write (array items of eleven required keys, nested settings)
//! needs more than any fixed closing margin holds, and the margin's rule (keep the closers
//! the grammar allows) finds none there. [`Completion`] measures what finishing takes:
//!
//! - a plan: a short text that takes the grammar from its current state to one where the
//!   reply may end, built byte by byte on a copy of the sequence's matcher: the bytes the
//!   grammar forces (a required key's name), `}` and `]` wherever allowed, the shortest
//!   values (`0`, `""`, `null`), and inside a string that may not close yet the lookahead's
//!   way to its quote ([`super::lookahead::to_quote`]: a pattern's literal, or a byte search);
//! - its cost: the tokens following the plan takes, each the longest word that starts what
//!   is left ([`TokenBytes::cost`]).
//!
//! While the budget left is above the cost (and [`SLACK`]) the model writes freely; the plan
//! is measured again after a quarter of the distance, so the checks come closer together as
//! the budget runs out (a few per reply). Once the budget left comes within the cost and the
//! slack, each mask keeps only the longest allowed token that starts the plan, and at its end
//! the end of generation: the reply closes valid within `max_tokens`.
//!
//! A completion grows by more than a token at one kind of place: where the reply may close
//! its array or object or go on with `,` (another item of eleven required keys). In the
//! second half of the budget, at each such place the plan is measured as if the reply went
//! on; when that would not fit, the mask keeps the closers ([`JsonBounds::close`]). A token
//! can cross such a place inside it (`"}, {` ends a string, an item and starts the next):
//! once what going on costs (measured there, or at the plan's first closer) comes within
//! the budget, tokens with a `,` past their first byte are left out, so every `,` is drawn
//! at a mask where it is checked.
//!
//! Bounded: a plan is at most [`PLAN_BYTES`] long and spends at most [`PLAN_VALIDATIONS`]
//! grammar-engine validations; where none is found within them the mask stands and the plan
//! is tried again [`RETRY_AFTER`] masks later (then less and less often).

use super::bounds::{JsonBounds, TokenBytes};
use super::lookahead::to_quote;
use llguidance::toktrie::{SimpleVob, TokTrie};
use llguidance::Matcher;
use std::sync::Arc;

/// Bytes a plan holds at most.
pub const PLAN_BYTES: usize = 2048;
/// Grammar-engine validations one plan spends at most.
pub const PLAN_VALIDATIONS: usize = 32_768;
/// Tokens of the budget kept beyond the plan's cost when steering starts: what a token the
/// model draws freely may add to the shortest completion before the next check.
pub const SLACK: usize = 8;
/// Masks left as the grammar made them after no plan was found, before trying again; it
/// doubles with each plan not found in a row (a schema whose completion is past the bounds
/// costs a search every few hundred masks, not every few).
pub const RETRY_AFTER: usize = 8;
/// The longest rest after failed plans.
const RETRY_MAX: usize = 256;

/// The order values and structure are tried in between JSON tokens: what closes first, then
/// the shortest values, then separators, then every other printable byte.
fn between_order() -> impl Iterator<Item = u8> {
    let first = b"}]0n\",: tf[{-";
    let rest = (b' '..=b'~').filter(move |b| !first.contains(b));
    first.iter().copied().chain(rest)
}

/// After a backslash in a string: the shortest escapes first.
const ESCAPES: &[u8] = b"n\"\\/tbfr";

/// One sequence's steering toward the shortest completion.
#[derive(Debug, Clone)]
pub struct Completion {
    table: Arc<TokenBytes>,
    phrases: Arc<[Vec<u8>]>,
    /// The text still to write to a state where the reply may end, when known.
    plan: Option<Vec<u8>>,
    /// Masks to leave alone before measuring again.
    wait: usize,
    /// The budget has come within the plan's cost: every mask follows it.
    forcing: bool,
    /// Tokens kept beyond the plan's cost ([`SLACK`] at most).
    slack: usize,
    /// Plans not found in a row.
    misses: u32,
    /// From this many tokens left, a reply about to go on with `,` is checked to fit.
    window: usize,
    /// What finishing costs when the reply goes on with `,` at its next chance (measured
    /// at the last such place, or along the last plan), when known.
    more: Option<usize>,
}

impl Completion {
    /// Steering for a sequence of `max_tokens`, with `slack` tokens kept beyond a plan's
    /// cost (at most [`SLACK`]; a small budget keeps less).
    pub fn new(
        table: Arc<TokenBytes>,
        phrases: Arc<[Vec<u8>]>,
        max_tokens: usize,
        slack: usize,
    ) -> Completion {
        Completion {
            table,
            phrases,
            plan: None,
            wait: 0,
            forcing: false,
            slack: slack.min(SLACK),
            misses: 0,
            window: max_tokens / 2,
            more: None,
        }
    }

    /// Narrows `mask` to the next token of the plan once `left` (tokens the sequence may
    /// still draw, this one included) is within its cost, or to the closers where going on
    /// would not fit; returns how many tokens it removed, None when it did neither (tokens
    /// with an inner `,` may still have been left out). `matcher` and `bounds` are the sequence's, in the
    /// state the mask was computed in; neither is advanced.
    pub fn steer(
        &mut self,
        matcher: &mut Matcher,
        bounds: &JsonBounds,
        mask: &mut SimpleVob,
        left: usize,
    ) -> Option<usize> {
        if !self.forcing && left <= self.window {
            if let Some(r) = self.close_before_more(matcher, bounds, mask, left) {
                return Some(r);
            }
            if self.more.is_some_and(|more| more >= left) {
                // Pruning only: the closing rules after this one still apply.
                self.drop_inner_commas(bounds, mask);
            }
        }
        self.follow_plan(matcher, bounds, mask, left)
    }

    /// The plan's part of [`Completion::steer`]: measure it when due, follow it once the
    /// budget comes within its cost.
    fn follow_plan(
        &mut self,
        matcher: &mut Matcher,
        bounds: &JsonBounds,
        mask: &mut SimpleVob,
        left: usize,
    ) -> Option<usize> {
        if !self.forcing {
            if self.wait > 0 {
                self.wait -= 1;
                return None;
            }
            if self.plan.is_none() {
                self.plan = plan(matcher, bounds, &self.table, &self.phrases);
                if let Some(p) = &self.plan {
                    self.more = self.more_along(matcher, bounds, p).or(self.more);
                }
            }
            let Some(plan) = &self.plan else {
                self.wait = (RETRY_AFTER << self.misses.min(5)).min(RETRY_MAX);
                self.misses += 1;
                return None;
            };
            self.misses = 0;
            // One token more for the end of generation.
            let cost = self.table.cost(plan) + 1 + self.slack;
            if left > cost {
                self.wait = (left - cost) / 4;
                return None;
            }
            self.forcing = true;
        }
        let keep = self.next_token(mask);
        if keep.is_none() {
            // Off the plan (the grammar's mask and the plan disagree): measure again.
            self.plan = None;
            self.forcing = false;
        }
        keep.map(|id| {
            let removed = mask.num_set() - 1;
            mask.set_all(false);
            mask.allow_token(id);
            removed
        })
    }

    /// Where the mask allows both a closer and `,`: narrows it to the closers when what
    /// finishing costs after `,` (the shortest next item or key, then the rest) would not fit
    /// in `left`.
    fn close_before_more(
        &mut self,
        matcher: &mut Matcher,
        bounds: &JsonBounds,
        mask: &mut SimpleVob,
        left: usize,
    ) -> Option<usize> {
        let comma = self.table.byte_token(b',')?;
        let may_close = self.table.closers_allowed(mask);
        if !may_close || !mask.is_allowed(comma) || bounds.in_string() {
            return None;
        }
        let mut m = matcher.clone();
        m.consume_token(comma).ok()?;
        let mut lex = bounds.clone();
        let _ = lex.step(b',');
        let Some(mut after) = plan(&m, &lex, &self.table, &self.phrases) else {
            // No way found after `,` within the bounds: nothing known, the mask stands.
            return None;
        };
        after.insert(0, b',');
        let cost = self.table.cost(&after) + 1 + self.slack;
        self.more = Some(cost);
        if cost < left {
            // The reply may go on. Should it, this plan is what finishing costs (a new item
            // is the completion's largest step): the next check comes within a quarter of
            // the distance from it, not from the shorter completion before the `,`.
            self.plan = Some(after);
            self.wait = (left - cost) / 4;
            return None;
        }
        self.plan = None;
        bounds.close(mask)
    }

    /// What finishing costs if the reply, following `path`, goes on with `,` where the path
    /// first closes an array or object that could take more (None when it never does).
    fn more_along(&self, matcher: &Matcher, bounds: &JsonBounds, path: &[u8]) -> Option<usize> {
        let comma = self.table.byte_token(b',')?;
        let mut m = matcher.clone();
        let mut lex = bounds.clone();
        for (i, &b) in path.iter().enumerate() {
            let closer = matches!(b, b'}' | b']') && !lex.in_string() && !lex.escaped();
            if closer && m.validate_tokens(&[comma]).ok()? == 1 {
                m.consume_token(comma).ok()?;
                let _ = lex.step(b',');
                let after = plan(&m, &lex, &self.table, &self.phrases)?;
                let cost = self.table.cost(&path[..i]) + 1 + self.table.cost(&after);
                return Some(cost + 1 + self.slack);
            }
            m.consume_token(self.table.byte_token(b)?).ok()?;
            let _ = lex.step(b);
        }
        None
    }

    /// Leaves out of `mask` the tokens with a `,` outside strings past their first byte
    /// (unless that leaves nothing); how many it removed.
    fn drop_inner_commas(&self, bounds: &JsonBounds, mask: &mut SimpleVob) -> Option<usize> {
        let mut drop = Vec::new();
        mask.iter_set_entries(|id| {
            let w = self.table.word(id as u32);
            if w.len() < 2 || !w[1..].contains(&b',') {
                return;
            }
            let mut lex = bounds.clone();
            for (i, &b) in w.iter().enumerate() {
                let between = !lex.in_string() && !lex.escaped();
                if i > 0 && b == b',' && between {
                    drop.push(id as u32);
                    return;
                }
                let _ = lex.step(b);
            }
        });
        if drop.is_empty() || drop.len() == mask.num_set() {
            return None;
        }
        drop.iter().for_each(|&id| mask.disallow_token(id));
        Some(drop.len())
    }

    /// Advances the plan over the drawn token `id` (a token off the plan drops it).
    pub fn commit(&mut self, id: u32) {
        let w = self.table.word(id);
        match &mut self.plan {
            Some(p) if !w.is_empty() && p.starts_with(w) => {
                p.drain(..w.len());
            }
            _ => {
                self.plan = None;
                self.forcing = false;
            }
        }
    }

    /// Whether the masks follow the plan.
    pub fn forcing(&self) -> bool {
        self.forcing
    }

    /// The longest allowed token that starts the plan, or at its end an allowed control
    /// token (the end of generation).
    fn next_token(&self, mask: &SimpleVob) -> Option<u32> {
        let plan = self.plan.as_deref()?;
        let mut best: Option<(usize, u32)> = None;
        mask.iter_set_entries(|id| {
            let w = self.table.word(id as u32);
            let fits = if plan.is_empty() {
                w.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER)
            } else {
                !w.is_empty() && plan.starts_with(w)
            };
            if fits && best.is_none_or(|(len, _)| w.len() > len) {
                best = Some((w.len(), id as u32));
            }
        });
        best.map(|(_, id)| id)
    }
}

/// A text that takes `matcher` (a copy is advanced) to a state where the reply may end,
/// found greedily (see the module docs); None when none is found within the bounds.
pub fn plan(
    matcher: &Matcher,
    bounds: &JsonBounds,
    table: &TokenBytes,
    phrases: &[Vec<u8>],
) -> Option<Vec<u8>> {
    let quote = table.byte_token(b'"')?;
    let mut m = matcher.clone();
    let mut lex = bounds.clone();
    let mut out = Vec::new();
    let mut budget = PLAN_VALIDATIONS;
    let push = |m: &mut Matcher, lex: &mut JsonBounds, out: &mut Vec<u8>, text: &[u8]| {
        for &b in text {
            m.consume_token(table.byte_token(b)?).ok()?;
            let _ = lex.step(b);
            out.push(b);
        }
        Some(())
    };
    loop {
        if m.is_stopped() || m.is_accepting().ok()? {
            return Some(out);
        }
        if out.len() >= PLAN_BYTES || budget == 0 {
            return None;
        }
        budget -= 1;
        let forced = m.compute_ff_bytes();
        if !forced.is_empty() {
            push(&mut m, &mut lex, &mut out, &forced)?;
            continue;
        }
        if lex.in_string() {
            budget = budget.checked_sub(1)?;
            let text = if m.validate_tokens(&[quote]).ok()? == 1 {
                b"\"".to_vec()
            } else {
                let mut t = to_quote(&mut m, table, quote, phrases, &mut budget)?;
                t.push(b'"');
                t
            };
            push(&mut m, &mut lex, &mut out, &text)?;
            continue;
        }
        let order: Box<dyn Iterator<Item = u8>> = if lex.escaped() {
            Box::new(ESCAPES.iter().copied())
        } else {
            Box::new(between_order())
        };
        let mut next = None;
        for b in order {
            let Some(id) = table.byte_token(b) else {
                continue;
            };
            if !lex.clone().try_byte(b) {
                continue;
            }
            budget = budget.checked_sub(1)?;
            if m.validate_tokens(&[id]).ok()? == 1 {
                next = Some(b);
                break;
            }
        }
        push(&mut m, &mut lex, &mut out, &[next?])?;
    }
}

#[cfg(test)]
mod tests;
