//! Speculative decoding in the state machine, with no model: which decode items carry
//! guesses, and what a verify that keeps some of them leaves in the KV blocks and the prefix
//! cache.

use super::*;
use crate::engine::kv_cache::KvLayout;
use crate::engine::kv_cache::LayerWindows;
use crate::scheduler::speculative::{SpecConfig, SpecMethod, SpecRequest};

const BS: usize = 16;

fn sched(blocks: u32) -> Scheduler<()> {
    let limits = Limits {
        max_num_seqs: 8,
        max_batch_tokens: 256,
        max_prefill_while_decoding: usize::MAX,
        attn_positions_per_token: 0,
        max_preemptions: 2,
        n_ctx: 4096,
        prefix_cache: true,
        max_waiting: 100,
    };
    Scheduler::new(
        limits,
        BlockAllocator::new(blocks, BS, KvLayout::new(1, &LayerWindows::NONE)),
    )
    .with_speculation(SpecConfig::default())
}

/// `1 2 .. period` repeated to `len` tokens: every suffix has an earlier match.
fn periodic(len: usize, period: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 1 + i % period).collect()
}

/// Runs the prefill of every sequence waiting (in as many steps as it takes) and appends
/// `next` to each.
fn prefill(s: &mut Scheduler<()>, next: u32) {
    while s.seqs().any(|q| q.tokens.len() == q.prompt_len) {
        let plan = s.schedule();
        for it in &plan.items {
            assert_eq!(it.draft, 0, "no guesses in a prefill");
            s.advance(it.seq, it.len);
            if it.logits {
                s.append(it.seq, next);
            }
        }
    }
}

/// Executes verify item `it` as the worker does, the model drawing `drawn` (one token per
/// row until the first that differs from its guess); returns the guesses kept.
fn verify(s: &mut Scheduler<()>, it: &PlanItem, drawn: &[u32]) -> usize {
    let draft = s.seq(it.seq).unwrap().draft().to_vec();
    assert_eq!(draft.len(), it.draft);
    let mut kept = 0;
    for (j, &t) in drawn.iter().enumerate().take(draft.len() + 1) {
        s.advance(it.seq, 1);
        s.append(it.seq, t);
        if j == draft.len() || t != draft[j] {
            break;
        }
        kept += 1;
    }
    s.verified(it.seq, draft.len(), kept);
    kept
}

#[test]
fn a_decode_item_carries_the_guesses_prompt_lookup_finds() {
    let mut s = sched(64);
    s.add(1, periodic(24, 8), 100, 1, ()).unwrap();
    prefill(&mut s, 1);
    let plan = s.schedule();
    let it = plan.items[0];
    // Tokens end "6 7 8 1": what followed earlier is "2 3 4 5 ...", 4 of them to start with.
    assert_eq!((it.start, it.len, it.draft, it.logits), (24, 5, 4, true));
    assert_eq!(it.logit_rows(), 5);
    assert_eq!(s.seq(1).unwrap().draft(), &[2, 3, 4, 5]);
    // Every guess kept and the token after them: five tokens from one step.
    assert_eq!(verify(&mut s, &it, &[2, 3, 4, 5, 6]), 4);
    let q = s.seq(1).unwrap();
    assert_eq!(q.tokens.len(), 30);
    assert_eq!(
        q.computed(),
        29,
        "the last token's K/V is computed next step"
    );
    assert!(q.draft().is_empty());
    // Full acceptance asks for two more next time.
    let plan = s.schedule();
    assert_eq!(plan.items[0].draft, 6);
}

#[test]
fn rejected_guesses_leave_no_blocks_and_never_reach_the_prefix_cache() {
    let mut s = sched(64);
    // 30 prompt tokens: the verify's positions 30..35 reach into a third block.
    s.add(1, periodic(30, 10), 100, 1, ()).unwrap();
    prefill(&mut s, 1);
    let (used_before, _) = s.kv_blocks();
    let plan = s.schedule();
    let it = plan.items[0];
    assert_eq!((it.start, it.len), (30, 5));
    assert_eq!(
        s.seq(1).unwrap().table().n_blocks(),
        3,
        "reserved for the guesses"
    );
    // The model disagrees with the first guess: one token, no guess kept.
    assert_eq!(verify(&mut s, &it, &[9]), 0);
    let q = s.seq(1).unwrap();
    assert_eq!((q.computed(), q.tokens.len()), (31, 32));
    assert_eq!(q.table().n_blocks(), 2, "the guesses' own block went back");
    assert_eq!(s.kv_blocks().0, used_before);
    // Only the block full of computed positions is cached: a second request with the same
    // 32 tokens finds 16 of them, not the block where rejected guesses were written.
    let mut same = periodic(30, 10);
    same.extend([1, 9]);
    s.add(2, same, 10, 1, ()).unwrap();
    s.schedule();
    assert_eq!(s.seq(2).unwrap().cached_tokens, 16);
}

#[test]
fn guesses_stop_when_many_decode_and_never_pass_max_tokens() {
    let mut s = sched(256);
    for id in 0..5 {
        s.add(id, periodic(24, 8), 100, 1, ()).unwrap();
    }
    prefill(&mut s, 1);
    let plan = s.schedule();
    assert_eq!(plan.items.len(), 5);
    assert!(
        plan.items.iter().all(|it| it.draft == 0),
        "five decoding sequences are past max_seqs (4)"
    );
    // Two tokens left before max_len: at most one guess (the verify emits up to k + 1).
    let mut s = sched(64);
    s.add(7, periodic(24, 8), 3, 1, ()).unwrap();
    prefill(&mut s, 1);
    let plan = s.schedule();
    assert_eq!(plan.items[0].draft, 1);
}

#[test]
fn a_sequence_that_keeps_nothing_pauses_its_guessing() {
    let mut s = sched(64);
    s.add(1, periodic(24, 8), 100, 1, ()).unwrap();
    prefill(&mut s, 1);
    let it = s.schedule().items[0];
    assert_eq!(verify(&mut s, &it, &[9]), 0);
    // Paused for two steps (decoding one token each, the model going back to the pattern),
    // then guessing again.
    for _ in 0..2 {
        let it = s.schedule().items[0];
        assert_eq!(it.draft, 0, "paused");
        s.advance(1, 1);
        s.append(1, 2 + (s.seq(1).unwrap().tokens.len() as u32 % 8));
    }
    let it = s.schedule().items[0];
    assert!(it.draft > 0, "guessing again after the pause");
}

#[test]
fn a_draft_model_prefills_the_prompts_that_will_guess_in_their_prefill_step() {
    let mut s = sched(256).with_speculation(SpecConfig {
        method: SpecMethod::Draft,
        ..SpecConfig::default()
    });
    s.add(1, periodic(24, 8), 100, 1, ()).unwrap();
    s.add(2, periodic(24, 8), 100, 1, ()).unwrap();
    s.set_speculation(
        2,
        SpecRequest {
            n_max: Some(0),
            n_min: None,
        },
    );
    // A prompt-only request (nothing to generate) never guesses either.
    s.add(3, periodic(24, 8), 0, 1, ()).unwrap();
    let plan = s.schedule();
    assert_eq!(plan.items.len(), 3);
    assert_eq!(s.draft_prefills(&plan), vec![1]);
    for it in &plan.items {
        s.advance(it.seq, it.len);
        if it.logits {
            s.append(it.seq, 1);
        }
    }
    // Decoding: the draft proposes (draft_wanted), nothing is left to prefill.
    let plan = s.schedule();
    assert!(s.draft_prefills(&plan).is_empty());
    // Past max_seqs (4) running sequences no guess is made: no draft prefill either.
    let mut s = sched(256).with_speculation(SpecConfig {
        method: SpecMethod::Draft,
        ..SpecConfig::default()
    });
    for id in 0..5 {
        s.add(id, periodic(24, 8), 100, 1, ()).unwrap();
    }
    let plan = s.schedule();
    assert_eq!(plan.items.len(), 5);
    assert!(s.draft_prefills(&plan).is_empty());
}
