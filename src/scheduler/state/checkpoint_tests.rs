//! Recurrent-state checkpoints in the schedule (see `checkpoints`), with no model: which
//! chunks are planned, which copies the worker is asked for, and what a later prompt resumes.

use super::*;
use crate::engine::kv_cache::{KvLayout, LayerWindows};
use crate::scheduler::prefix_cache::StateCopy;

const BS: usize = 4;

fn sched(checkpoints: usize) -> Scheduler<()> {
    let limits = Limits {
        max_num_seqs: 2,
        max_batch_tokens: 64,
        max_prefill_while_decoding: usize::MAX,
        attn_positions_per_token: 0,
        max_preemptions: 2,
        n_ctx: 4096,
        prefix_cache: true,
        max_waiting: 100,
    };
    let layout = KvLayout::new(1, &LayerWindows::NONE);
    let alloc = BlockAllocator::with_state_slots(32, BS, layout, Some(4), checkpoints);
    let mut s = Scheduler::new(limits, alloc);
    s.keep_state_checkpoints();
    s
}

/// Runs one planned step as the worker would (advance, a token where logits were asked for).
fn step(s: &mut Scheduler<()>) -> StepPlan {
    let plan = s.schedule();
    for it in &plan.items {
        s.advance(it.seq, it.len);
        if it.logits {
            s.append(it.seq, 7);
        }
    }
    plan
}

fn saves(plan: &StepPlan) -> usize {
    let save = |c: &&StateCopy| matches!(c, StateCopy::Save { .. });
    plan.state_copies.iter().filter(save).count()
}

#[test]
fn prefill_ends_at_block_boundaries_and_a_shared_prefix_resumes_from_its_checkpoint() {
    let mut s = sched(2);
    let prompt: Vec<u32> = (0..10).collect();
    s.add(1, prompt.clone(), 2, 1, ()).unwrap();
    // The 10-token prompt crosses the boundary at 8: the chunk stops there and the state
    // after it is saved.
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].len), (0, 8));
    assert!(!p.items[0].logits);
    assert_eq!(saves(&p), 1);
    assert_eq!(
        s.state_checkpoints(),
        1,
        "attached to the block ending at 8"
    );
    // The tail (2 tokens) follows with the logits; no boundary, no save.
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].len), (8, 2));
    assert!(p.items[0].logits);
    assert_eq!(saves(&p), 0);
    s.remove(1);
    // A prompt sharing the first 9 tokens resumes at 8 from that checkpoint.
    let mut other = prompt[..9].to_vec();
    other.extend([100, 101, 102]);
    s.add(2, other, 2, 1, ()).unwrap();
    let p = step(&mut s);
    assert_eq!(p.items[0].start, 8);
    let restore = p.state_copies.iter().find_map(|c| match *c {
        StateCopy::Restore { seq, covered, .. } => Some((seq, covered)),
        _ => None,
    });
    assert_eq!(restore, Some((2, 8)));
    assert_eq!(s.seq(2).unwrap().cached_tokens, 8);
    // Its chunk 8..12 ends at a boundary whose block has no checkpoint yet: saved.
    assert_eq!((p.items[0].len, saves(&p)), (4, 1));
    assert_eq!(s.state_checkpoints(), 2);
}

#[test]
fn a_hit_stops_at_the_deepest_block_with_a_checkpoint() {
    let mut s = sched(2);
    // 64 tokens in one chunk: one save, at 64 (the prompt's end is a boundary).
    let prompt: Vec<u32> = (0..64).collect();
    s.add(1, prompt.clone(), 1, 1, ()).unwrap();
    let p = step(&mut s);
    assert_eq!((p.items[0].len, saves(&p)), (64, 1));
    s.remove(1);
    // A prompt sharing 40 tokens: every block up to 40 is cached, but only 64 has a state,
    // so nothing can be resumed and it is computed from 0.
    let mut other = prompt[..40].to_vec();
    other.extend([900; 10]);
    s.add(2, other, 1, 1, ()).unwrap();
    let p = step(&mut s);
    assert_eq!(p.items[0].start, 0);
    assert!(p
        .state_copies
        .iter()
        .all(|c| matches!(c, StateCopy::Save { .. })));
    assert_eq!(s.seq(2).unwrap().cached_tokens, 0);
}

#[test]
fn checkpoints_are_bounded_and_the_oldest_gives_way() {
    let mut s = sched(1);
    for (id, salt) in [(1u64, 0u32), (2, 1000)] {
        let prompt: Vec<u32> = (salt..salt + 8).collect();
        s.add(id, prompt, 1, 1, ()).unwrap();
        let p = step(&mut s);
        assert_eq!(
            saves(&p),
            1,
            "a slot for each: the older block gives its up"
        );
        s.remove(id);
    }
    assert_eq!(s.state_checkpoints(), 1);
    // The second prompt's block keeps its state: a prompt extending it resumes.
    let mut second: Vec<u32> = (1000..1008).collect();
    second.push(5000);
    s.add(3, second, 1, 1, ()).unwrap();
    assert_eq!(step(&mut s).items[0].start, 8);
    s.remove(3);
    // The first's gave it up: a prompt extending it starts from 0.
    let mut first: Vec<u32> = (0..8).collect();
    first.push(5000);
    s.add(4, first, 1, 1, ()).unwrap();
    assert_eq!(step(&mut s).items[0].start, 0);
}

#[test]
fn without_checkpoint_slots_nothing_is_resumed() {
    let mut s = sched(0);
    let prompt: Vec<u32> = (0..9).collect();
    s.add(1, prompt.clone(), 1, 1, ()).unwrap();
    assert_eq!(saves(&step(&mut s)), 0);
    step(&mut s);
    s.remove(1);
    let mut other = prompt;
    other.push(77);
    s.add(2, other, 1, 1, ()).unwrap();
    assert_eq!(step(&mut s).items[0].start, 0);
}
