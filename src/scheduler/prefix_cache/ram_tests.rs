//! The prefix cache with a RAM tier, the worker's copies simulated: every page's "K/V" is the
//! token prefix it was computed for, a spill copies that out as bytes and a restore writes
//! it back.

use super::*;
use proptest::prelude::*;
use std::sync::Arc;

const BS: usize = 4;

fn alloc(n: u32) -> BlockAllocator {
    use crate::engine::kv_cache::{KvLayout, LayerWindows};
    BlockAllocator::new(n, BS, KvLayout::new(1, &LayerWindows::NONE))
}

/// What each page holds: the whole prefix up to its block's end (K/V depends on all of it).
type Content = Vec<Option<Vec<u32>>>;

fn encode(prefix: &[u32]) -> Arc<[u8]> {
    prefix
        .iter()
        .flat_map(|t| t.to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

fn decode(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// The worker's part: spills copied out first (their pages are free but unwritten), then
/// restores written into their fresh pages.
fn run_copies(cache: &mut PrefixCache, content: &mut Content, restores: Vec<Restore>) {
    for sp in cache.take_spills() {
        let held = content[sp.pages[0] as usize]
            .clone()
            .expect("spilled page was computed");
        cache.store_spill(&sp, RamBlock::kv(encode(&held)));
    }
    for r in restores {
        content[r.pages[0] as usize] = Some(decode(&r.bytes));
    }
}

#[test]
fn an_evicted_prompt_comes_back_from_ram() {
    let a = alloc(4);
    let mut cache = PrefixCache::with_ram(a.clone(), 1 << 20);
    let mut content: Content = vec![None; 4];
    let prompt: Vec<u32> = (0..13).collect();
    let mut t = BlockTable::new(&a);
    t.reserve(12).unwrap();
    let mut parent = ROOT;
    for b in 0..3 {
        content[t.blocks()[b] as usize] = Some(prompt[..(b + 1) * BS].to_vec());
        parent = cache
            .insert(
                ROOT,
                parent,
                &prompt[b * BS..(b + 1) * BS],
                &t.block_pages(b),
            )
            .unwrap();
    }
    drop(t);
    // Another prompt takes the whole pool: the three cached blocks go to RAM.
    assert_eq!(cache.evict(4), 3);
    run_copies(&mut cache, &mut content, Vec::new());
    assert_eq!((cache.ram().len(), cache.stats().spilled), (3, 3));
    let mut other = BlockTable::new(&a);
    other.reserve(16).unwrap();
    for &id in other.blocks() {
        content[id as usize] = Some(vec![99]);
    }
    drop(other);
    let mut t = BlockTable::new(&a);
    let mut restores = Vec::new();
    let hit = cache.lookup(ROOT, &prompt, &mut t, &mut restores);
    assert_eq!((hit.tokens, hit.pool_tokens, restores.len()), (12, 0, 3));
    run_copies(&mut cache, &mut content, restores);
    for b in 0..3 {
        assert_eq!(
            content[t.blocks()[b] as usize].as_deref(),
            Some(&prompt[..(b + 1) * BS])
        );
    }
    assert_eq!(
        (cache.stats().ram_hits, cache.stats().ram_hit_tokens),
        (1, 12)
    );
}

#[test]
fn namespaces_never_share_a_block_in_the_pool_or_the_ram_tier() {
    let a = alloc(8);
    let mut cache = PrefixCache::with_ram(a.clone(), 1 << 20);
    let mut content: Content = vec![None; 8];
    let prompt: Vec<u32> = (0..9).collect();
    let (ra, rb) = (namespace_root(Some(1)), namespace_root(Some(2)));
    assert!(ra != rb && ra != ROOT && rb != ROOT);
    assert_eq!(ra, namespace_root(Some(1)), "stable");
    assert_eq!(namespace_root(None), ROOT);
    let mut t = BlockTable::new(&a);
    t.reserve(8).unwrap();
    let mut parent = ra;
    for b in 0..2 {
        content[t.blocks()[b] as usize] = Some(prompt[..(b + 1) * BS].to_vec());
        parent = cache
            .insert(ra, parent, &prompt[b * BS..(b + 1) * BS], &t.block_pages(b))
            .unwrap();
    }
    drop(t);
    cache.check_invariants().unwrap();
    let hit = |cache: &mut PrefixCache, root| {
        let mut t = BlockTable::new(&a);
        let mut restores = Vec::new();
        let h = cache.lookup(root, &prompt, &mut t, &mut restores);
        (h.tokens, h.pool_tokens)
    };
    // In the pool: the same prompt hits in its namespace only.
    assert_eq!(hit(&mut cache, rb), (0, 0));
    assert_eq!(hit(&mut cache, ROOT), (0, 0));
    assert_eq!(hit(&mut cache, ra), (8, 8));
    // In the RAM tier: the same.
    assert_eq!(cache.evict(8), 2);
    run_copies(&mut cache, &mut content, Vec::new());
    assert_eq!(cache.ram().len(), 2);
    assert_eq!(hit(&mut cache, rb), (0, 0));
    assert_eq!(hit(&mut cache, ra), (8, 0));
}

#[derive(Debug, Clone)]
enum Op {
    Start(usize, Vec<u32>),
    Compute(usize),
    Drop(usize),
    Evict(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, proptest::collection::vec(0u32..2, 1..14)).prop_map(|(s, p)| Op::Start(s, p)),
        (0..3usize).prop_map(Op::Compute),
        (0..3usize).prop_map(Op::Compute),
        (0..3usize).prop_map(Op::Drop),
        (0..6usize).prop_map(Op::Evict),
    ]
}

struct SimSeq {
    tokens: Vec<u32>,
    table: BlockTable,
    computed: usize,
    registered: usize,
    parent: u64,
}

proptest! {
    /// Random starts, computations, drops and evictions over a small pool and a RAM tier of
    /// a few blocks: every block a lookup hands out (from the pool or restored from RAM)
    /// holds exactly the K/V of its prefix, the pool balances, and at the end every page is
    /// free.
    #[test]
    fn ram_tier_never_hands_out_wrong_kv(
        ops in proptest::collection::vec(op(), 1..80),
        ram_blocks in 0usize..6,
    ) {
        let n = 8u32;
        let a = alloc(n);
        // A block's bytes are its prefix (at most 16 u32s): bound the tier in such blocks.
        let mut cache = PrefixCache::with_ram(a.clone(), ram_blocks * 64);
        let mut content: Content = vec![None; n as usize];
        let mut slots: Vec<Option<SimSeq>> = (0..3).map(|_| None).collect();
        for op in ops {
            match op {
                Op::Start(s, tokens) => {
                    slots[s] = None;
                    let mut table = BlockTable::new(&a);
                    let mut restores = Vec::new();
                    let hit = cache.lookup(ROOT, &tokens, &mut table, &mut restores);
                    run_copies(&mut cache, &mut content, restores);
                    prop_assert!(hit.tokens < tokens.len());
                    for (i, &id) in table.blocks().iter().enumerate() {
                        let want = &tokens[..(i + 1) * BS];
                        prop_assert_eq!(content[id as usize].as_deref(), Some(want));
                    }
                    let mut parent = ROOT;
                    for chunk in tokens[..hit.pool_tokens].chunks_exact(BS) {
                        parent = block_key(parent, chunk);
                    }
                    let registered = hit.pool_tokens / BS;
                    slots[s] = Some(SimSeq { tokens, table, computed: hit.tokens, registered, parent });
                }
                Op::Compute(s) => {
                    let Some(q) = slots[s].as_mut() else { continue };
                    // The blocks restored at the lookup enter the cache after their step.
                    while (q.registered + 1) * BS <= q.computed {
                        let b = q.registered;
                        let chunk = &q.tokens[b * BS..(b + 1) * BS];
                        q.parent = cache.insert(ROOT, q.parent, chunk, &q.table.block_pages(b)).unwrap();
                        q.registered += 1;
                    }
                    if q.computed >= q.tokens.len() { continue; }
                    let end = ((q.computed / BS + 1) * BS).min(q.tokens.len());
                    if a.free_blocks() == 0 {
                        cache.evict(1);
                    }
                    run_copies(&mut cache, &mut content, Vec::new());
                    if q.table.reserve(end).is_err() { continue; }
                    let id = q.table.blocks()[q.computed / BS];
                    prop_assert_eq!(a.refcount(id), 1, "writing a shared block");
                    content[id as usize] = Some(q.tokens[..end].to_vec());
                    q.computed = end;
                }
                Op::Drop(s) => slots[s] = None,
                Op::Evict(k) => {
                    cache.evict(k);
                    run_copies(&mut cache, &mut content, Vec::new());
                }
            }
            cache.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert!(cache.ram().bytes() <= ram_blocks * 64);
            let mut held: Vec<u32> = slots.iter().flatten().flat_map(|q| q.table.blocks().to_vec()).collect();
            held.extend(cache.entries.values().map(|e| e.holder.blocks()[0]));
            held.sort_unstable();
            held.dedup();
            prop_assert_eq!(a.free_blocks() + held.len(), n as usize);
        }
        drop(slots);
        cache.clear();
        prop_assert_eq!(a.free_blocks(), n as usize);
    }
}

#[test]
fn a_recurrent_models_checkpoint_spills_with_its_block_and_ends_a_ram_hit() {
    use crate::engine::kv_cache::{KvLayout, LayerWindows};
    let layout = KvLayout::new(1, &LayerWindows::NONE);
    let a = BlockAllocator::with_state_slots(4, BS, layout, Some(2), 2);
    let mut cache = PrefixCache::with_ram(a.clone(), 1 << 20);
    cache.keep_state_checkpoints();
    let mut content: Content = vec![None; 4];
    let prompt: Vec<u32> = (0..13).collect();
    let mut t = BlockTable::new(&a);
    t.reserve(12).unwrap();
    let mut parent = ROOT;
    for b in 0..3 {
        content[t.blocks()[b] as usize] = Some(prompt[..(b + 1) * BS].to_vec());
        parent = cache
            .insert(
                ROOT,
                parent,
                &prompt[b * BS..(b + 1) * BS],
                &t.block_pages(b),
            )
            .unwrap();
        if b == 1 {
            // The state after 8 tokens is kept; the one after 12 is not.
            assert!(cache.attach_checkpoint(parent, a.take_checkpoint().unwrap()));
        }
    }
    drop(t);
    assert_eq!(cache.evict(4), 3);
    let spills = cache.take_spills();
    let with_state: Vec<bool> = spills.iter().map(|s| s.state_slot.is_some()).collect();
    assert_eq!(with_state.iter().filter(|&&s| s).count(), 1);
    assert_eq!(
        a.checkpoint_slots(),
        Some((2, 2)),
        "the slot went with the block"
    );
    for sp in &spills {
        let held = content[sp.pages[0] as usize].clone().unwrap();
        let state = sp.state_slot.map(|_| encode(&[7, held.len() as u32]));
        let block = RamBlock {
            kv: encode(&held),
            state,
        };
        cache.store_spill(sp, block);
    }
    // The hit ends at the deepest block the RAM tier holds with a state, and names it.
    let mut t = BlockTable::new(&a);
    let mut restores = Vec::new();
    let hit = cache.lookup(ROOT, &prompt, &mut t, &mut restores);
    assert_eq!((hit.tokens, hit.pool_tokens, restores.len()), (8, 0, 2));
    assert_eq!(hit.state_from, None);
    assert_eq!(hit.state_bytes.as_deref(), Some(&encode(&[7, 8])[..]));
    assert_eq!(t.n_blocks(), 2);
    // No state at all in the RAM tier (a prompt of other tokens): no hit.
    let mut t2 = BlockTable::new(&a);
    let other: Vec<u32> = (100..113).collect();
    assert_eq!(
        cache.lookup(ROOT, &other, &mut t2, &mut Vec::new()).tokens,
        0
    );
}
