//! The KV cache's steady-state decode step allocates nothing: a counting global allocator
//! (per thread, so other tests running in parallel do not interfere) watches 100 decode steps
//! of the default model's shape.

use kiln::engine::attention::{attend, AttnScratch};
use kiln::engine::kv_cache::{BlockTable, KvCache, KvCacheConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to the system allocator, counting allocations made by the current thread.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call forwards unchanged to `System`, which upholds the GlobalAlloc contract;
// the counter is a const-initialized thread-local, so counting never allocates or recurses.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as this method.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as this method.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn counter_sees_allocations() {
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(allocations() > before && v.len() == 10);
}

#[test]
fn decode_step_does_not_allocate() {
    let (n_layer, n_head, n_head_kv, d) = (30, 9, 3, 64);
    let cfg = KvCacheConfig::from_bytes(n_layer, n_head_kv, d, 16, 64 << 20);
    let mut cache = KvCache::new(cfg).unwrap();
    let mut table = BlockTable::with_capacity(cache.allocator(), 1024);
    let mut scratch = AttnScratch::new(&cfg);
    let k = vec![0.25f32; n_head_kv * d];
    let q = vec![0.5f32; n_head * d];
    let mut out = vec![0.0f32; n_head * d];
    let mut step = |cache: &mut KvCache, table: &mut BlockTable, pos: usize| {
        table.reserve(pos + 1).unwrap();
        for layer in 0..n_layer {
            cache.write(layer, table, pos, &k, &k).unwrap();
            attend(cache, layer, table, pos, &q, &mut out, &mut scratch).unwrap();
        }
    };
    // Prefill (allowed to allocate), then decode.
    for pos in 0..20 {
        step(&mut cache, &mut table, pos);
    }
    let before = allocations();
    for pos in 20..120 {
        step(&mut cache, &mut table, pos);
    }
    assert_eq!(allocations() - before, 0, "decode steps allocated");
    assert!((out[0] - 0.25).abs() < 1e-3);
}
