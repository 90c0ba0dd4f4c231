use super::*;
use proptest::prelude::*;

const BS: usize = 4;

fn alloc(n: u32) -> BlockAllocator {
    use crate::engine::kv_cache::{KvLayout, LayerWindows};
    crate::engine::kv_cache::BlockAllocator::new(n, BS, KvLayout::new(1, &LayerWindows::NONE))
}

/// A lookup in a cache without a RAM tier (so nothing to restore); the tokens reused.
fn look(cache: &mut PrefixCache, tokens: &[u32], table: &mut BlockTable) -> usize {
    let mut restores = Vec::new();
    let hit = cache.lookup(ROOT, tokens, table, &mut restores);
    assert!(restores.is_empty());
    assert_eq!(hit.tokens, hit.pool_tokens);
    hit.tokens
}

/// A prompt's blocks computed into `table` and inserted, as the scheduler does after each step.
fn compute_and_insert(cache: &mut PrefixCache, table: &mut BlockTable, tokens: &[u32]) {
    table.reserve(tokens.len()).unwrap();
    let mut parent = ROOT;
    for (i, chunk) in tokens.chunks_exact(BS).enumerate() {
        parent = cache
            .insert(ROOT, parent, chunk, &table.block_pages(i))
            .unwrap();
    }
}

#[test]
fn shared_prefix_is_reused_and_leaves_the_last_token() {
    let a = alloc(16);
    let mut cache = PrefixCache::new(a.clone());
    let prompt: Vec<u32> = (0..10).collect();
    let mut t1 = BlockTable::new(&a);
    compute_and_insert(&mut cache, &mut t1, &prompt);
    drop(t1);
    assert_eq!(cache.len(), 2);
    assert_eq!(a.free_blocks(), 14, "the cache keeps its two blocks");

    // Same first 8 tokens, different tail: both blocks reused.
    let mut p2 = prompt[..8].to_vec();
    p2.extend([99, 98]);
    let mut t2 = BlockTable::new(&a);
    assert_eq!(look(&mut cache, &p2, &mut t2), 8);
    // Exactly 8 tokens: only one block, so the last token is computed.
    let mut t3 = BlockTable::new(&a);
    assert_eq!(look(&mut cache, &prompt[..8], &mut t3), 4);
    // A different first token: nothing.
    let mut t4 = BlockTable::new(&a);
    assert_eq!(look(&mut cache, &[7, 1, 2, 3, 4, 5], &mut t4), 0);
    assert_eq!(
        cache.stats(),
        PrefixStats {
            queries: 3,
            hits: 2,
            hit_tokens: 12,
            pool_hits: 2,
            ..PrefixStats::default()
        }
    );
    cache.check_invariants().unwrap();
}

#[test]
fn eviction_frees_only_blocks_nobody_uses_lru_first() {
    let a = alloc(8);
    let mut cache = PrefixCache::new(a.clone());
    let mut t1 = BlockTable::new(&a);
    compute_and_insert(&mut cache, &mut t1, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(cache.evictable(), 0, "the sequence still holds both blocks");
    assert_eq!(cache.evict(8), 0);
    drop(t1);
    assert_eq!(cache.evictable(), 2);
    // The deeper block goes first, so the shorter prefix stays usable.
    assert_eq!(cache.evict(1), 1);
    let mut t2 = BlockTable::new(&a);
    assert_eq!(look(&mut cache, &[1, 2, 3, 4, 5, 6, 7, 8, 9], &mut t2), 4);
    drop(t2);
    assert_eq!(cache.evict(8), 1);
    assert_eq!(a.free_blocks(), 8);
    cache.check_invariants().unwrap();
}

#[test]
fn colliding_content_is_never_aliased() {
    let a = alloc(8);
    let mut cache = PrefixCache::new(a.clone());
    let mut t = BlockTable::new(&a);
    compute_and_insert(&mut cache, &mut t, &[1, 2, 3, 4]);
    // The same block of tokens after a different parent is a different key.
    let mut t2 = BlockTable::new(&a);
    t2.reserve(8).unwrap();
    let k1 = cache
        .insert(ROOT, ROOT, &[9, 9, 9, 9], &t2.block_pages(0))
        .unwrap();
    cache
        .insert(ROOT, k1, &[1, 2, 3, 4], &t2.block_pages(1))
        .unwrap();
    let mut t3 = BlockTable::new(&a);
    assert_eq!(look(&mut cache, &[1, 2, 3, 4, 0], &mut t3), 4);
    assert_eq!(t3.blocks(), &t.blocks()[..1]);
}

/// One simulated operation on the cache.
#[derive(Debug, Clone)]
enum Op {
    /// Start a sequence in slot `s` with a prompt over a tiny alphabet (so prefixes repeat).
    Start(usize, Vec<u32>),
    /// Compute the next block of slot `s` (reserve, write, insert when full).
    Compute(usize),
    /// Drop slot `s` (finished, aborted or preempted).
    Drop(usize),
    Evict(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, proptest::collection::vec(0u32..2, 1..14)).prop_map(|(s, p)| Op::Start(s, p)),
        (0..4usize).prop_map(Op::Compute),
        (0..4usize).prop_map(Op::Compute),
        (0..4usize).prop_map(Op::Drop),
        (0..6usize).prop_map(Op::Evict),
    ]
}

struct SimSeq {
    tokens: Vec<u32>,
    table: BlockTable,
    computed: usize,
    parent: u64,
}

proptest! {
    /// Random starts, block computations, drops and evictions. After every operation: the
    /// cache's invariants hold, every block a lookup hands out holds exactly the KV of the
    /// prefix it was looked up for (the simulated contents say which tokens were written), and
    /// the pool's accounting balances. At the end every block is free again.
    #[test]
    fn cache_never_hands_out_wrong_or_uncomputed_kv(ops in proptest::collection::vec(op(), 1..80)) {
        let n_blocks = 12u32;
        let a = alloc(n_blocks);
        let mut cache = PrefixCache::new(a.clone());
        // What each physical block's KV holds: the whole prefix up to its end (KV depends on it).
        let mut content: Vec<Option<Vec<u32>>> = vec![None; n_blocks as usize];
        let mut slots: Vec<Option<SimSeq>> = (0..4).map(|_| None).collect();
        for op in ops {
            match op {
                Op::Start(s, tokens) => {
                    let mut table = BlockTable::new(&a);
                    let hit = look(&mut cache, &tokens, &mut table);
                    prop_assert!(hit < tokens.len());
                    for (i, &id) in table.blocks().iter().enumerate() {
                        let want = &tokens[..(i + 1) * BS];
                        prop_assert_eq!(content[id as usize].as_deref(), Some(want));
                    }
                    let mut parent = ROOT;
                    for chunk in tokens[..hit].chunks_exact(BS) {
                        parent = block_key(parent, chunk);
                    }
                    slots[s] = Some(SimSeq { tokens, table, computed: hit, parent });
                }
                Op::Compute(s) => {
                    let Some(q) = slots[s].as_mut() else { continue };
                    if q.computed >= q.tokens.len() { continue; }
                    let end = (q.computed / BS + 1) * BS;
                    let end = end.min(q.tokens.len());
                    if a.free_blocks() == 0 {
                        cache.evict(1);
                    }
                    if q.table.reserve(end).is_err() { continue; }
                    let b = q.computed / BS;
                    let id = q.table.blocks()[b];
                    prop_assert_eq!(a.refcount(id), 1, "writing a shared block");
                    content[id as usize] = Some(q.tokens[..end].to_vec());
                    q.computed = end;
                    if end % BS == 0 {
                        q.parent = cache.insert(ROOT, q.parent, &q.tokens[end - BS..end], &[id]).unwrap();
                    }
                }
                Op::Drop(s) => slots[s] = None,
                Op::Evict(n) => { cache.evict(n); }
            }
            cache.check_invariants().map_err(TestCaseError::fail)?;
            // Held blocks: the sequences' and the cache's, counted once each.
            let mut held: Vec<u32> = slots.iter().flatten().flat_map(|q| q.table.blocks().to_vec()).collect();
            held.extend(cache.entries.values().map(|e| e.holder.blocks()[0]));
            held.sort_unstable();
            held.dedup();
            prop_assert_eq!(a.free_blocks() + held.len(), n_blocks as usize);
        }
        drop(slots);
        cache.clear();
        prop_assert_eq!(a.free_blocks(), n_blocks as usize);
    }
}

/// A pool of `n` pages for two layers: layer 0 local with a window of `WINDOW` positions,
/// layer 1 global, so one page holds one layer and a block has a page in each of two groups
/// (group 0 global, group 1 local).
fn windowed_alloc(n: u32) -> BlockAllocator {
    use crate::engine::kv_cache::{KvLayout, LayerWindows};
    let w = LayerWindows::new(WINDOW, &[true, false]).unwrap();
    crate::engine::kv_cache::BlockAllocator::new(n, BS, KvLayout::new(2, &w))
}

const WINDOW: usize = 6;

proptest! {
    /// The same random workload as above with a sliding window: sequences release their local
    /// pages as they move on and the cache strips local pages under eviction. After every
    /// operation: every page a lookup hands out holds exactly its prefix's KV for its group,
    /// the local pages a continuing sequence's next query can see are all there, a computing
    /// sequence holds the pages its queries' windows cover, and the pool balances.
    #[test]
    fn windowed_cache_never_hands_out_wrong_or_missing_kv(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        let n_pages = 16u32;
        let a = windowed_alloc(n_pages);
        let layout = a.layout().clone();
        let mut cache = PrefixCache::new(a.clone());
        // What each page holds: (group, the prefix up to its block's end).
        let mut content: Vec<Option<(usize, Vec<u32>)>> = vec![None; n_pages as usize];
        let mut slots: Vec<Option<SimSeq>> = (0..4).map(|_| None).collect();
        let visible = |table: &BlockTable, from: usize, to_block: usize| -> bool {
            (0..layout.n_groups()).all(|g| {
                let first = layout.first_kept_block(g, from, BS);
                !table.group(g)[first..to_block].contains(&RELEASED)
            })
        };
        for op in ops {
            match op {
                Op::Start(s, tokens) => {
                    let mut table = BlockTable::new(&a);
                    let hit = look(&mut cache, &tokens, &mut table);
                    prop_assert!(hit < tokens.len());
                    prop_assert_eq!(table.n_blocks() * BS, hit);
                    for b in 0..table.n_blocks() {
                        for (g, &id) in table.block_pages(b).iter().enumerate() {
                            if id == RELEASED { continue; }
                            let want = (g, tokens[..(b + 1) * BS].to_vec());
                            prop_assert_eq!(content[id as usize].as_ref(), Some(&want));
                        }
                    }
                    prop_assert!(visible(&table, hit, table.n_blocks()), "unusable hit");
                    let mut parent = ROOT;
                    for chunk in tokens[..hit].chunks_exact(BS) {
                        parent = block_key(parent, chunk);
                    }
                    slots[s] = Some(SimSeq { tokens, table, computed: hit, parent });
                }
                Op::Compute(s) => {
                    let Some(q) = slots[s].as_mut() else { continue };
                    if q.computed >= q.tokens.len() { continue; }
                    let end = ((q.computed / BS + 1) * BS).min(q.tokens.len());
                    q.table.forget_before(q.computed);
                    let need = q.table.pages_to_reserve(end);
                    if a.free_blocks() < need {
                        cache.evict(need - a.free_blocks());
                    }
                    if q.table.reserve(end).is_err() { continue; }
                    let b = q.computed / BS;
                    // The queries at computed..end see their windows: all there.
                    prop_assert!(visible(&q.table, q.computed, b + 1), "window not held");
                    for (g, &id) in q.table.block_pages(b).iter().enumerate() {
                        prop_assert_eq!(a.refcount(id), 1, "writing a shared page");
                        content[id as usize] = Some((g, q.tokens[..end].to_vec()));
                    }
                    q.computed = end;
                    if end % BS == 0 {
                        let pages = q.table.block_pages(b);
                        q.parent = cache.insert(ROOT, q.parent, &q.tokens[end - BS..end], &pages).unwrap();
                    }
                }
                Op::Drop(s) => slots[s] = None,
                Op::Evict(n) => { cache.evict(n); }
            }
            cache.check_invariants().map_err(TestCaseError::fail)?;
            let mut held: Vec<u32> = slots
                .iter()
                .flatten()
                .flat_map(|q| (0..q.table.n_blocks()).flat_map(|b| q.table.block_pages(b)))
                .chain(cache.entries.values().flat_map(|e| e.holder.block_pages(0)))
                .filter(|&id| id != RELEASED)
                .collect();
            held.sort_unstable();
            held.dedup();
            prop_assert_eq!(a.free_blocks() + held.len(), n_pages as usize);
        }
        drop(slots);
        cache.clear();
        prop_assert_eq!(a.free_blocks(), n_pages as usize);
    }
}

#[test]
fn sequences_keep_only_their_window_on_local_layers() {
    let a = windowed_alloc(64);
    let mut t = BlockTable::new(&a);
    // 40 positions in blocks of 4: 10 global pages, local pages only for the last window.
    for pos in (0..40).step_by(BS) {
        t.forget_before(pos);
        t.reserve(pos + BS).unwrap();
    }
    t.forget_before(40);
    let local = t.group(1).iter().filter(|&&id| id != RELEASED).count();
    assert_eq!(t.group(0).len(), 10);
    assert!(!t.group(0).contains(&RELEASED));
    // Position 40's window starts at 35: blocks 8 and 9 (positions 32..40) stay.
    assert_eq!(local, 2);
    assert_eq!(a.free_blocks(), 64 - 12);
    drop(t);
    assert_eq!(a.free_blocks(), 64);
}
