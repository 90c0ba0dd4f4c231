//! Closing a string whose `pattern` or `format` does not let it close yet. Near `max_tokens`
//! [`super::bounds::JsonBounds::close`] keeps only the closing tokens where the grammar
//! allows one; inside a string such as `^[0-9]+#[A-Za-z0-9]+` while the model writes digits,
//! or a date-time deep in its fractional seconds, the grammar allows no `"` until more text
//! comes, and a model at temperature 1.0 can write digits until the budget cuts the reply.
//! [`Lookahead::steer`] narrows the mask toward the shortest way out it can find:
//!
//! 1. one token: the allowed tokens after which `"` is allowed (`#include` after digits,
//!    `Z` in fractional seconds), each checked with the grammar engine's token validation;
//! 2. otherwise a search over single bytes for text after which `"` is allowed (`/a/a/0-0-0`
//!    to finish an `iglu:` URI), trying first the bytes after which the set of allowed next
//!    bytes changes (a separator that moves the pattern on) rather than another byte of the
//!    same run, and of letters and digits only two of each kind (they behave alike in most
//!    patterns); the text found becomes a plan the next masks keep to, token by token.
//!
//!    Before that search, the literal runs of the schema's patterns ([`super::phrases`]) are
//!    tried as text: an unanchored `"pattern": "wifi"` keeps every byte allowed until the
//!    whole word is written, so the search sees no state change to follow, but `wifi` works.
//!
//! Both are bounded in grammar-engine calls per mask ([`SCAN_MAX`], [`SEARCH_MAX`]) and
//! deterministic (tokens in id order, bytes in a fixed order). Where neither finds a way (a
//! pattern that needs a word no token and no short byte text reaches) the grammar's mask
//! stands, as before.

use super::bounds::TokenBytes;
use llguidance::toktrie::{SimpleVob, TokTrie};
use llguidance::Matcher;
use std::sync::Arc;

/// Tokens checked by the one-token lookahead per mask, at most (in id order).
pub const SCAN_MAX: usize = 16_384;
/// Single-byte validations the search spends per mask, at most.
pub const SEARCH_MAX: usize = 12_288;
/// Bytes the search writes at most before giving up.
pub const SEARCH_DEPTH: usize = 32;
/// Masks left as the grammar made them after a lookahead found no way, before it tries
/// again (from a state the model has moved on).
pub const RETRY_AFTER: u32 = 4;

/// The order the search tries bytes in: separators (punctuation, space) first, as they are
/// what moves a pattern from one run to the next, then digits, upper and lower case letters.
fn byte_order() -> impl Iterator<Item = u8> {
    let punct = (b' '..=b'~').filter(|b| !b.is_ascii_alphanumeric());
    punct
        .chain(b'0'..=b'9')
        .chain(b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .filter(|&b| b != b'"' && b != b'\\')
}

/// One sequence's steering toward a closing quote.
#[derive(Debug, Clone)]
pub struct Lookahead {
    table: Arc<TokenBytes>,
    /// Literal text of the schema's patterns, tried before the byte search.
    phrases: Arc<[Vec<u8>]>,
    /// The bytes still to write before the closing quote, from the last search.
    plan: Vec<u8>,
    /// Masks to leave alone before looking again.
    idle: u32,
}

impl Lookahead {
    pub fn new(table: Arc<TokenBytes>, phrases: Arc<[Vec<u8>]>) -> Lookahead {
        Lookahead {
            table,
            phrases,
            plan: Vec::new(),
            idle: 0,
        }
    }

    /// Narrows `mask` (the grammar's, inside a string where it allows no `"`) to the tokens
    /// on the shortest way to one the lookahead finds; returns how many tokens it removed,
    /// 0 when it found none (the mask stands). `matcher` is the sequence's, in the state the
    /// mask was computed in; it is only validated against, never advanced.
    pub fn steer(&mut self, matcher: &mut Matcher, mask: &mut SimpleVob) -> usize {
        if let Some(removed) = self.follow(mask) {
            return removed;
        }
        if self.idle > 0 {
            self.idle -= 1;
            return 0;
        }
        let Some(quote) = self.table.byte_token(b'"') else {
            return 0;
        };
        let mut keep = Vec::new();
        let mut tried = 0;
        mask.iter_set_entries(|id| {
            let id = id as u32;
            let w = self.table.word(id);
            let plain = !w.is_empty()
                && !w
                    .iter()
                    .any(|&b| matches!(b, b'"' | b'\\' | TokTrie::SPECIAL_TOKEN_MARKER));
            if !plain || tried >= SCAN_MAX {
                return;
            }
            tried += 1;
            if matcher.validate_tokens(&[id, quote]).is_ok_and(|n| n == 2) {
                keep.push(id);
            }
        });
        if !keep.is_empty() {
            return restrict(mask, &keep);
        }
        let mut budget = SEARCH_MAX;
        match to_quote(matcher, &self.table, quote, &self.phrases, &mut budget) {
            Some(plan) if !plan.is_empty() => {
                self.plan = plan;
                self.follow(mask).unwrap_or(0)
            }
            _ => {
                self.idle = RETRY_AFTER;
                0
            }
        }
    }

    /// Advances the plan over the drawn token `id` (a token off the plan drops it).
    pub fn commit(&mut self, id: u32) {
        let w = self.table.word(id);
        if !w.is_empty() && self.plan.starts_with(w) {
            self.plan.drain(..w.len());
        } else {
            self.plan.clear();
        }
    }

    /// Keeps the allowed tokens that start the plan, if it holds any.
    fn follow(&mut self, mask: &mut SimpleVob) -> Option<usize> {
        if self.plan.is_empty() {
            return None;
        }
        let mut keep = Vec::new();
        mask.iter_set_entries(|id| {
            let w = self.table.word(id as u32);
            if !w.is_empty() && self.plan.starts_with(w) {
                keep.push(id as u32);
            }
        });
        if keep.is_empty() {
            self.plan.clear();
            return None;
        }
        Some(restrict(mask, &keep))
    }
}

/// Narrows `mask` to `keep` (all allowed in it); how many tokens it removed.
fn restrict(mask: &mut SimpleVob, keep: &[u32]) -> usize {
    let removed = mask.num_set() - keep.len();
    mask.set_all(false);
    keep.iter().for_each(|&id| mask.allow_token(id));
    removed
}

/// The bytes after which `"` (the token `quote`) is allowed, from the state of `matcher`
/// inside a string: the shortest of `phrases` that gets there, else what [`Search`] finds;
/// None when neither does within `budget` validations (what is spent is taken off it).
/// `matcher` is only validated against (a copy is advanced).
pub(super) fn to_quote(
    matcher: &mut Matcher,
    table: &TokenBytes,
    quote: u32,
    phrases: &[Vec<u8>],
    budget: &mut usize,
) -> Option<Vec<u8>> {
    let mut best: Option<&Vec<u8>> = None;
    for p in phrases {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let ids: Option<Vec<u32>> = p.iter().map(|&b| table.byte_token(b)).collect();
        let Some(mut ids) = ids else { continue };
        ids.push(quote);
        let fits = matcher.validate_tokens(&ids).is_ok_and(|n| n == ids.len());
        if fits && best.is_none_or(|b| p.len() < b.len()) {
            best = Some(p);
        }
    }
    if let Some(p) = best {
        return Some(p.clone());
    }
    Search::run(matcher, table, quote, budget)
}

/// A depth-first search over single bytes, on a copy of the sequence's matcher (advanced
/// and rolled back as it goes).
struct Search {
    matcher: Matcher,
    /// The bytes tried, in order, with their single-byte tokens.
    alphabet: Vec<(u8, u32)>,
    quote: u32,
    /// Validations left.
    budget: usize,
    path: Vec<u8>,
    /// The allowed sets met on the path.
    seen: Vec<Next>,
}

/// The bytes allowed next, as bits (bit `b` for byte `b`; all are ASCII).
type Next = u128;

impl Search {
    /// The bytes after which `"` is allowed, if the search finds them within its bounds.
    fn run(
        matcher: &Matcher,
        table: &TokenBytes,
        quote: u32,
        budget: &mut usize,
    ) -> Option<Vec<u8>> {
        let alphabet = byte_order()
            .filter_map(|b| table.byte_token(b).map(|id| (b, id)))
            .collect();
        let mut s = Search {
            matcher: matcher.clone(),
            alphabet,
            quote,
            budget: (*budget).min(SEARCH_MAX),
            path: Vec::new(),
            seen: Vec::new(),
        };
        let found = s.find();
        *budget -= (*budget).min(SEARCH_MAX) - s.budget;
        found
    }

    fn find(&mut self) -> Option<Vec<u8>> {
        let here = self.next_bytes()?;
        if here & bit(b'"') != 0 {
            return Some(Vec::new());
        }
        self.descend(here, 0)?
            .then(|| std::mem::take(&mut self.path))
    }

    /// The bytes the matcher allows next; None when the budget is spent.
    fn next_bytes(&mut self) -> Option<Next> {
        let mut bits = 0;
        let quote = (b'"', self.quote);
        for &(b, id) in self.alphabet.iter().chain(std::iter::once(&quote)) {
            self.budget = self.budget.checked_sub(1)?;
            if self.matcher.validate_tokens(&[id]).ok()? == 1 {
                bits |= bit(b);
            }
        }
        Some(bits)
    }

    /// Extends the path from a state allowing `here` until `"` is allowed (true, the path
    /// holds the bytes); None when the budget or the matcher gives out. The bytes allowed
    /// next stand in for the pattern's state: a byte after which they are a set not met on
    /// the path so far is progress (tried first, at once), a byte leading back to a set met
    /// before comes next (`:` from one run of `[a-z-]+` into the next), and a byte that keeps
    /// the set as it is (another byte of a run) last, once.
    fn descend(&mut self, here: Next, depth: usize) -> Option<bool> {
        if depth == SEARCH_DEPTH {
            return Some(false);
        }
        self.seen.push(here);
        let mut back = Vec::new();
        let mut same = None;
        let mut tried = [0; 4];
        for i in 0..self.alphabet.len() {
            let (b, id) = self.alphabet[i];
            let class = class(b);
            if here & bit(b) == 0 || class > 0 && tried[class] == CLASS_TRIES {
                continue;
            }
            tried[class] += 1;
            let next = self.push(b, id)?;
            if next & bit(b'"') != 0 {
                return Some(true);
            }
            if next == here {
                same.get_or_insert((b, id));
            } else if self.seen.contains(&next) {
                back.push((b, id));
            } else if self.descend(next, depth + 1)? {
                return Some(true);
            }
            self.pop()?;
        }
        for (b, id) in back.into_iter().chain(same) {
            let next = self.push(b, id)?;
            if self.descend(next, depth + 1)? {
                return Some(true);
            }
            self.pop()?;
        }
        self.seen.pop();
        Some(false)
    }

    fn push(&mut self, b: u8, id: u32) -> Option<Next> {
        self.matcher.consume_token(id).ok()?;
        self.path.push(b);
        self.next_bytes()
    }

    fn pop(&mut self) -> Option<()> {
        self.path.pop();
        self.matcher.rollback(1).ok()
    }
}

fn bit(b: u8) -> Next {
    1 << b
}

/// Letters and digits of one kind behave alike in most patterns (`[a-z0-9-]+`): the search
/// tries this many of each kind at a state, and every separator.
const CLASS_TRIES: u32 = 2;

/// 0 for a separator, else the kind of letter or digit.
fn class(b: u8) -> usize {
    match b {
        b'0'..=b'9' => 1,
        b'A'..=b'Z' => 2,
        b'a'..=b'z' => 3,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
