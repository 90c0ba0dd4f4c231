//! The state machine driven step by step with no model: each step's plan is "executed" by
//! advancing the planned sequences and appending token 7 where logits were asked for.

use super::*;
use crate::engine::kv_cache::KvLayout;
use crate::engine::kv_cache::LayerWindows;

const BS: usize = 16;

fn limits() -> Limits {
    Limits {
        max_num_seqs: 4,
        max_batch_tokens: 64,
        max_prefill_while_decoding: usize::MAX,
        attn_positions_per_token: 0,
        max_preemptions: 2,
        n_ctx: 4096,
        prefix_cache: true,
        max_waiting: 100,
    }
}

fn sched(limits: Limits, blocks: u32) -> Scheduler<()> {
    Scheduler::new(
        limits,
        BlockAllocator::new(blocks, BS, KvLayout::new(1, &LayerWindows::NONE)),
    )
}

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| i * 31 + salt * 1000).collect()
}

/// Executes a plan: advances every item, appends a token where logits were produced, and
/// removes sequences that reached their length. Returns the plan.
fn step(s: &mut Scheduler<()>) -> StepPlan {
    let plan = s.schedule();
    let lim = *s.limits();
    assert!(plan.tokens() <= lim.max_batch_tokens, "token budget");
    assert!(plan.items.len() <= lim.max_num_seqs, "sequence budget");
    for it in &plan.items {
        let seq = s.seq(it.seq).unwrap();
        assert_eq!(
            it.start,
            seq.computed(),
            "a step starts where the cache ends"
        );
        assert!(
            seq.table().capacity() >= it.start + it.len,
            "blocks reserved"
        );
        s.advance(it.seq, it.len);
        if it.logits {
            s.append(it.seq, 7);
            let seq = s.seq(it.seq).unwrap();
            if seq.tokens.len() >= seq.max_len {
                s.remove(it.seq);
            }
        }
    }
    plan
}

fn lens(plan: &StepPlan) -> Vec<(SeqId, usize)> {
    plan.items.iter().map(|i| (i.seq, i.len)).collect()
}

/// After everything is removed and the prefix cache cleared, every block is free.
fn assert_drained(mut s: Scheduler<()>) {
    let ids: Vec<SeqId> = s.seqs().map(|q| q.id).collect();
    for id in ids {
        s.remove(id);
    }
    s.clear_prefix_cache();
    let (used, _) = s.kv_blocks();
    assert_eq!(used, 0, "leaked blocks");
    assert_eq!(s.running_slots, 0);
}

#[test]
fn long_prompts_are_chunked_to_the_budget() {
    // vLLM's case: three long prompts sharing a budget.
    let mut s = sched(
        Limits {
            max_batch_tokens: 1024,
            ..limits()
        },
        1000,
    );
    s.add(1, prompt(400, 1), 4, 1, ()).unwrap();
    s.add(2, prompt(400, 2), 4, 1, ()).unwrap();
    s.add(3, prompt(576, 3), 4, 1, ()).unwrap();
    assert_eq!(lens(&step(&mut s)), [(1, 400), (2, 400), (3, 224)]);
    assert_eq!(lens(&step(&mut s)), [(1, 1), (2, 1), (3, 352)]);
    assert_eq!(lens(&step(&mut s)), [(1, 1), (2, 1), (3, 1)]);
    assert_drained(s);
}

#[test]
fn decoding_streams_keep_running_while_a_long_prompt_is_chunked() {
    let mut s = sched(limits(), 1000);
    for id in 0..3 {
        s.add(id, prompt(10, id as u32), 100, 1, ()).unwrap();
    }
    step(&mut s);
    s.add(9, prompt(2000, 9), 10, 1, ()).unwrap();
    let mut chunks = 0;
    while s.seq(9).unwrap().computed() < 2000 {
        let plan = step(&mut s);
        // Every decoding stream gets its token in every step.
        for id in 0..3 {
            assert!(plan.items.iter().any(|i| i.seq == id && i.len == 1));
        }
        let long = plan.items.iter().find(|i| i.seq == 9).unwrap();
        assert_eq!(long.len, (64 - 3).min(2000 - long.start));
        assert_eq!(long.logits, long.start + long.len == 2000);
        chunks += 1;
    }
    assert_eq!(chunks, 2000usize.div_ceil(61));
    assert_drained(s);
}

#[test]
fn prefill_is_capped_while_others_decode() {
    let lim = Limits {
        max_batch_tokens: 512,
        max_prefill_while_decoding: 40,
        ..limits()
    };
    let mut s = sched(lim, 1000);
    // Alone, a long prompt takes the whole budget.
    s.add(0, prompt(600, 0), 50, 1, ()).unwrap();
    assert_eq!(lens(&step(&mut s)), [(0, 512)]);
    assert_eq!(lens(&step(&mut s)), [(0, 88)]);
    // Now seq 0 decodes: a new long prompt goes in chunks of 40, a short one waits its turn.
    s.add(1, prompt(100, 1), 5, 1, ()).unwrap();
    s.add(2, prompt(10, 2), 5, 1, ()).unwrap();
    assert_eq!(lens(&step(&mut s)), [(0, 1), (1, 40)]);
    assert_eq!(lens(&step(&mut s)), [(0, 1), (1, 40)]);
    assert_eq!(lens(&step(&mut s)), [(0, 1), (1, 20), (2, 10)]);
    assert_drained(s);
}

#[test]
fn chunks_deep_in_a_long_prompt_are_smaller() {
    let lim = Limits {
        max_batch_tokens: 512,
        max_prefill_while_decoding: 64,
        attn_positions_per_token: 100,
        ..limits()
    };
    let mut s = sched(lim, 1000);
    s.add(0, prompt(10, 0), 500, 1, ()).unwrap();
    step(&mut s);
    s.add(1, prompt(2000, 1), 5, 1, ()).unwrap();
    let mut sizes = Vec::new();
    while s.seq(1).unwrap().computed() < 2000 {
        let plan = step(&mut s);
        let it = plan.items.iter().find(|i| i.seq == 1).unwrap();
        assert!(s.chunk_cost(it.start, it.len) <= 64 || it.len == 1);
        sizes.push(it.len);
    }
    assert!(sizes[0] > 40 && *sizes.last().unwrap() < 10, "{sizes:?}");
    assert!(
        sizes.windows(2).all(|w| w[1] <= w[0] || w[1] < 64),
        "{sizes:?}"
    );
    assert_drained(s);
}

#[test]
fn first_come_first_served_without_starvation() {
    let mut s = sched(
        Limits {
            max_num_seqs: 2,
            ..limits()
        },
        1000,
    );
    for id in 0..6 {
        s.add(id, prompt(8, id as u32), 3, 1, ()).unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..40 {
        for it in step(&mut s).items {
            if it.start == 0 {
                order.push(it.seq);
            }
        }
    }
    assert_eq!(order, [0, 1, 2, 3, 4, 5], "admitted in arrival order");
    assert!(s.is_idle(), "everyone finished");
    assert_drained(s);
}

#[test]
fn waiting_head_that_cannot_get_blocks_is_not_overtaken() {
    // 10 blocks: seq 0 takes 8 (prompt 120 + room), seq 1 needs 4, seq 2 needs 1.
    let mut s = sched(
        Limits {
            max_batch_tokens: 256,
            ..limits()
        },
        10,
    );
    s.add(0, prompt(120, 0), 8, 1, ()).unwrap();
    step(&mut s);
    s.add(1, prompt(60, 1), 4, 1, ()).unwrap();
    s.add(2, prompt(5, 2), 4, 1, ()).unwrap();
    let plan = step(&mut s);
    assert_eq!(lens(&plan), [(0, 1)], "seq 2 must not jump ahead of seq 1");
    assert_drained(s);
}

#[test]
fn preemption_frees_the_newest_and_requeues_it_first() {
    // 6 blocks of 16. Seq 0 (48 tokens) and seq 1 (40) take 3 blocks each; seq 0's next
    // position needs a 4th block, so seq 1 (the newest) is preempted.
    let mut s = sched(
        Limits {
            max_batch_tokens: 256,
            ..limits()
        },
        6,
    );
    s.add(0, prompt(48, 0), 10, 1, ()).unwrap();
    s.add(1, prompt(40, 1), 10, 1, ()).unwrap();
    step(&mut s);
    s.add(2, prompt(5, 2), 4, 1, ()).unwrap();
    let plan = step(&mut s);
    assert_eq!(plan.preempted, [1]);
    assert_eq!(
        lens(&plan),
        [(0, 1)],
        "nothing admitted in a step that preempted"
    );
    let q = s.seq(1).unwrap();
    assert!(q.is_waiting());
    assert_eq!(
        (q.computed(), q.table().blocks().len(), q.preemptions),
        (0, 0, 1)
    );
    assert_eq!(s.counters().preemptions, 1);
    // The preempted sequence is first in line again, ahead of seq 2, and recomputes its prompt
    // and its generated token (the prefix cache gives back its two full blocks).
    let mut order = Vec::new();
    while !s.is_idle() {
        for it in step(&mut s).items {
            if !order.contains(&it.seq) && it.seq != 0 {
                order.push(it.seq);
                if it.seq == 1 {
                    assert_eq!(
                        (it.start, it.len),
                        (32, 9),
                        "recomputes past the cached blocks"
                    );
                }
            }
        }
    }
    assert_eq!(order, [1, 2]);
    assert_drained(s);
}

#[test]
fn preemption_bound_picks_another_victim() {
    let mut s = sched(limits(), 100);
    s.add(0, prompt(4, 0), 4, 1, ()).unwrap();
    s.add(1, prompt(4, 1), 4, 1, ()).unwrap();
    s.add(2, prompt(4, 2), 4, 1, ()).unwrap();
    step(&mut s);
    s.seq_mut(2).unwrap().preemptions = 2;
    assert_eq!(s.pick_victim(0), 1, "seq 2 reached the bound");
    s.seq_mut(1).unwrap().preemptions = 2;
    assert_eq!(s.pick_victim(0), 2, "all at the bound: the newest");
    assert_eq!(s.pick_victim(2), 2, "the newest preempts itself");
    assert_drained(s);
}

#[test]
fn abort_frees_blocks_in_every_state() {
    let mut s = sched(
        Limits {
            max_num_seqs: 2,
            max_batch_tokens: 32,
            ..limits()
        },
        100,
    );
    s.add(0, prompt(10, 0), 50, 1, ()).unwrap(); // will decode
    s.add(1, prompt(100, 1), 50, 1, ()).unwrap(); // will be mid-prefill
    s.add(2, prompt(10, 2), 50, 1, ()).unwrap(); // stays waiting (max_num_seqs 2)
    step(&mut s);
    step(&mut s);
    assert!(s.seq(1).unwrap().computed() > 0 && s.seq(1).unwrap().computed() < 100);
    assert!(s.seq(2).unwrap().is_waiting());
    for id in [2, 1, 0] {
        s.remove(id);
    }
    s.clear_prefix_cache();
    assert_eq!(s.kv_blocks().0, 0);
    assert!(s.is_idle());
    assert_eq!((s.n_running(), s.n_waiting(), s.running_slots), (0, 0, 0));
}

#[test]
fn refuses_what_can_never_fit_and_bounds_the_queue() {
    let mut s = sched(
        Limits {
            max_waiting: 2,
            n_ctx: 256,
            ..limits()
        },
        10,
    );
    assert!(matches!(
        s.add(0, prompt(200, 0), 100, 1, ()),
        Err(AdmitError::ContextLength {
            prompt: 200,
            max_tokens: 100,
            n_ctx: 256
        })
    ));
    assert!(matches!(
        s.add(0, prompt(150, 0), 100, 1, ()),
        Err(AdmitError::KvCapacity { .. })
    ));
    assert!(matches!(
        s.add(0, vec![], 1, 1, ()),
        Err(AdmitError::EmptyPrompt)
    ));
    s.add(1, prompt(5, 1), 5, 1, ()).unwrap();
    s.add(2, prompt(5, 2), 5, 1, ()).unwrap();
    assert!(matches!(
        s.add(3, prompt(5, 3), 5, 1, ()),
        Err(AdmitError::QueueFull { waiting: 2 })
    ));
    assert_drained(s);
}

#[test]
fn shared_prefix_is_served_from_the_cache() {
    let mut s = sched(limits(), 100);
    let mut a = prompt(50, 1);
    s.add(0, a.clone(), 2, 1, ()).unwrap();
    while !s.is_idle() {
        step(&mut s);
    }
    a.truncate(40);
    a.extend([5, 6, 7, 8, 9]);
    s.add(1, a, 2, 1, ()).unwrap();
    let plan = step(&mut s);
    assert_eq!(
        plan.items[0].start, 32,
        "two full blocks of the shared 40 tokens reused"
    );
    assert_eq!(s.seq(1).unwrap().cached_tokens, 32);
    assert_eq!(s.prefix_stats().hits, 1);
    assert_eq!(s.prefix_stats().queries, 2);
    assert_drained(s);
}

#[test]
fn forks_share_the_prompt_and_copy_the_partial_block_on_write() {
    let mut s = sched(limits(), 100);
    s.add(0, prompt(20, 0), 5, 3, ()).unwrap();
    assert_eq!(s.running_slots, 0);
    let plan = step(&mut s);
    assert_eq!(lens(&plan), [(0, 20)]);
    assert_eq!(s.running_slots, 3, "the parent stands for its 3 choices");
    assert!(s.fork(0, 10, ()));
    assert!(s.fork(0, 11, ()));
    assert_eq!(s.running_slots, 3);
    s.append(10, 8);
    s.append(11, 9);
    let shared = s.seq(0).unwrap().table().blocks().to_vec();
    assert_eq!(s.seq(10).unwrap().table().blocks(), shared.as_slice());
    let plan = step(&mut s);
    assert_eq!(lens(&plan), [(0, 1), (10, 1), (11, 1)]);
    // Block 1 (positions 16..20, partly filled) is shared by three: the first two writers copy.
    assert_eq!(plan.copies.len(), 2);
    assert!(plan.copies.iter().all(|&(src, _)| src == shared[1]));
    let b: Vec<u32> = [0, 10, 11]
        .iter()
        .map(|&id| s.seq(id).unwrap().table().blocks()[1])
        .collect();
    assert!(b[0] != b[1] && b[1] != b[2] && b[0] != b[2], "{b:?}");
    assert_eq!(
        s.seq(10).unwrap().table().blocks()[0],
        shared[0],
        "full block still shared"
    );
    assert_drained(s);
}

#[test]
fn random_workloads_never_leak_and_always_finish() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(64), |(
        reqs in proptest::collection::vec((1usize..120, 1usize..40, 1usize..3, 0u32..3), 1..12),
        blocks in 24u32..60,
        budget in 8usize..128,
        aborts in proptest::collection::vec((0usize..40, 0u64..12), 0..4),
    )| {
        let lim = Limits { max_batch_tokens: budget, n_ctx: 512, ..limits() };
        let mut s = sched(lim, blocks);
        let mut next_id = 100;
        for (id, &(p, m, n, salt)) in reqs.iter().enumerate() {
            let _ = s.add(id as u64, prompt(p, salt), m, n, ());
        }
        for t in 0..2000 {
            if s.is_idle() { break; }
            for &(at, id) in &aborts {
                if at == t { s.remove(id); }
            }
            let plan = s.schedule();
            prop_assert!(plan.tokens() <= budget);
            for it in &plan.items {
                s.advance(it.seq, it.len);
                if it.logits {
                    let q = s.seq(it.seq).unwrap();
                    if q.computed() == q.prompt_len && q.slots > 1 {
                        for _ in 1..q.slots {
                            s.fork(it.seq, next_id, ());
                            s.append(next_id, 3);
                            next_id += 1;
                        }
                    }
                    s.append(it.seq, 7);
                    let q = s.seq(it.seq).unwrap();
                    if q.tokens.len() >= q.max_len { s.remove(it.seq); }
                }
            }
            // Forked sequences that already reached their length.
            let done: Vec<SeqId> = s.seqs().filter(|q| q.tokens.len() >= q.max_len).map(|q| q.id).collect();
            for id in done { s.remove(id); }
            prop_assert!(s.running_slots <= lim.max_num_seqs.max(3));
        }
        prop_assert!(s.is_idle(), "work left after 2000 steps");
        assert_drained(s);
    });
}

/// Random workloads on a pool whose layout has sliding windows (three layers: two local with
/// a window of 24 positions, one global): nothing leaks, everything finishes (preemption
/// included), and every planned item's table holds the pages its queries' windows cover.
#[test]
fn windowed_random_workloads_hold_their_windows_and_never_leak() {
    use crate::engine::kv_cache::RELEASED;
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(64), |(
        reqs in proptest::collection::vec((1usize..120, 1usize..40, 1usize..3, 0u32..3), 1..12),
        pages in 60u32..160,
        budget in 8usize..128,
        aborts in proptest::collection::vec((0usize..40, 0u64..12), 0..4),
    )| {
        let lim = Limits { max_batch_tokens: budget, n_ctx: 512, ..limits() };
        let w = LayerWindows::new(24, &[true, false, true]).unwrap();
        let alloc = BlockAllocator::new(pages, BS, KvLayout::new(3, &w));
        let layout = alloc.layout().clone();
        let mut s: Scheduler<()> = Scheduler::new(lim, alloc);
        let mut next_id = 100;
        for (id, &(p, m, n, salt)) in reqs.iter().enumerate() {
            let _ = s.add(id as u64, prompt(p, salt), m, n, ());
        }
        for t in 0..2000 {
            if s.is_idle() { break; }
            for &(at, id) in &aborts {
                if at == t { s.remove(id); }
            }
            let plan = s.schedule();
            prop_assert!(plan.tokens() <= budget);
            for it in &plan.items {
                let table = s.seq(it.seq).unwrap().table();
                let end_block = (it.start + it.len).div_ceil(BS);
                prop_assert!(table.n_blocks() >= end_block);
                for g in 0..layout.n_groups() {
                    let first = layout.first_kept_block(g, it.start, BS);
                    prop_assert!(
                        !table.group(g)[first..end_block].contains(&RELEASED),
                        "group {} lacks a page its window needs", g
                    );
                }
            }
            for it in &plan.items {
                s.advance(it.seq, it.len);
                if it.logits {
                    let q = s.seq(it.seq).unwrap();
                    if q.computed() == q.prompt_len && q.slots > 1 {
                        for _ in 1..q.slots {
                            s.fork(it.seq, next_id, ());
                            s.append(next_id, 3);
                            next_id += 1;
                        }
                    }
                    s.append(it.seq, 7);
                    let q = s.seq(it.seq).unwrap();
                    if q.tokens.len() >= q.max_len { s.remove(it.seq); }
                }
            }
            let done: Vec<SeqId> = s.seqs().filter(|q| q.tokens.len() >= q.max_len).map(|q| q.id).collect();
            for id in done { s.remove(id); }
        }
        prop_assert!(s.is_idle(), "work left after 2000 steps");
        assert_drained(s);
    });
}

#[test]
fn a_long_sequence_holds_only_its_window_on_local_layers() {
    use crate::engine::kv_cache::RELEASED;
    let lim = Limits {
        max_batch_tokens: 16,
        prefix_cache: false,
        ..limits()
    };
    let w = LayerWindows::new(24, &[true, false]).unwrap();
    let mut s: Scheduler<()> =
        Scheduler::new(lim, BlockAllocator::new(64, BS, KvLayout::new(2, &w)));
    s.add(1, prompt(200, 1), 8, 1, ()).unwrap();
    while s.seq(1).unwrap().computed() < 200 {
        step(&mut s);
    }
    step(&mut s);
    let t = s.seq(1).unwrap().table();
    let local = t.group(1).iter().filter(|&&id| id != RELEASED).count();
    // 200 positions: 13 global pages; the local group keeps the blocks of the last window
    // (positions 177.. of the next query at 201: blocks 11..=12).
    assert_eq!(t.group(0).len(), 13);
    assert!(local <= 3, "{local} local pages held");
    assert_eq!(s.kv_blocks().0, 13 + local);
    assert_drained(s);
}

#[test]
fn prompt_rows_are_clipped_per_step_and_skip_the_prefix_cache() {
    let mut s = sched(limits(), 64);
    // A first request fills the prefix cache with the prompt both share.
    s.add(1, prompt(80, 1), 4, 1, ()).unwrap();
    while s.seq(1).is_some() {
        step(&mut s);
    }
    s.add(2, prompt(80, 1), 2, 1, ()).unwrap();
    s.want_prompt_rows(2);
    let mut covered = 0;
    while covered < 80 {
        let plan = step(&mut s);
        let it = plan.items.iter().find(|i| i.seq == 2).unwrap();
        assert!(
            it.rows && it.start == covered,
            "every position has a row, none cached"
        );
        assert!(it.len <= PROMPT_LOGIT_ROWS && it.logit_rows() == it.len);
        covered += it.len;
        assert_eq!(
            it.logits,
            covered == 80,
            "the last prompt row is also sampled from"
        );
    }
    assert_eq!(s.seq(2).unwrap().cached_tokens, 0);
    // Decoding after the prompt: one row, not a prompt row.
    let plan = step(&mut s);
    assert!(plan.items.iter().all(|i| !i.rows && i.logit_rows() == 1));
    assert_drained(s);
}

#[test]
fn a_prompt_scored_without_generation_asks_for_no_next_token() {
    let mut s = sched(limits(), 64);
    s.add(1, prompt(20, 2), 0, 1, ()).unwrap();
    s.want_prompt_rows(1);
    let plan = step(&mut s);
    assert_eq!(lens(&plan), vec![(1, 20)]);
    assert!(plan.items[0].rows && !plan.items[0].logits);
    assert_eq!(plan.items[0].logit_rows(), 20);
    assert_drained(s);
}
