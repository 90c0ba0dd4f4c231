use super::*;
use proptest::prelude::*;

const BS: usize = 4;

fn alloc(n: u32) -> BlockAllocator {
    crate::engine::kv_cache::BlockAllocator::new(n, BS)
}

/// A prompt's blocks computed into `table` and inserted, as the scheduler does after each step.
fn compute_and_insert(cache: &mut PrefixCache, table: &mut BlockTable, tokens: &[u32]) {
    table.reserve(tokens.len()).unwrap();
    let mut parent = ROOT;
    for (i, chunk) in tokens.chunks_exact(BS).enumerate() {
        parent = cache.insert(parent, chunk, table.blocks()[i]).unwrap();
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
    assert_eq!(cache.lookup(&p2, &mut t2), 8);
    // Exactly 8 tokens: only one block, so the last token is computed.
    let mut t3 = BlockTable::new(&a);
    assert_eq!(cache.lookup(&prompt[..8], &mut t3), 4);
    // A different first token: nothing.
    let mut t4 = BlockTable::new(&a);
    assert_eq!(cache.lookup(&[7, 1, 2, 3, 4, 5], &mut t4), 0);
    assert_eq!(
        cache.stats(),
        PrefixStats {
            queries: 3,
            hits: 2,
            hit_tokens: 12
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
    assert_eq!(cache.lookup(&[1, 2, 3, 4, 5, 6, 7, 8, 9], &mut t2), 4);
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
    let k1 = cache.insert(ROOT, &[9, 9, 9, 9], t2.blocks()[0]).unwrap();
    cache.insert(k1, &[1, 2, 3, 4], t2.blocks()[1]).unwrap();
    let mut t3 = BlockTable::new(&a);
    assert_eq!(cache.lookup(&[1, 2, 3, 4, 0], &mut t3), 4);
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
                    let hit = cache.lookup(&tokens, &mut table);
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
                        q.parent = cache.insert(q.parent, &q.tokens[end - BS..end], id).unwrap();
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
