//! KV cache tests: storage layout, named errors, shared (forked) blocks, capacity. Attention
//! over the cache is tested in `engine::attention`.

use super::*;

fn cfg(n_head_kv: usize, head_dim: usize, block_size: usize, n_blocks: usize) -> KvCacheConfig {
    KvCacheConfig {
        n_layer: 2,
        n_head_kv,
        head_dim,
        block_size,
        n_blocks,
        windows: LayerWindows::NONE,
        kv_type: KvType::F16,
    }
}

/// The f16 K and V values of `layer` (an f16 cache).
fn f16_kv(cache: &KvCache, layer: usize) -> (&[f16], &[f16]) {
    match cache.layer_kv(layer) {
        LayerKv::F16 { k, v } => (k, v),
        LayerKv::Q8 { .. } => panic!("an f16 cache"),
    }
}

/// The Q8_0 values and scales of `layer`: (K, V, K scales, V scales).
fn q8_kv(cache: &KvCache, layer: usize) -> (&[i8], &[i8], &[f16], &[f16]) {
    match cache.layer_kv(layer) {
        LayerKv::Q8 {
            k,
            v,
            k_scale,
            v_scale,
        } => (k, v, k_scale, v_scale),
        LayerKv::F16 { .. } => panic!("a q8_0 cache"),
    }
}

#[test]
fn write_stores_rounded_values() {
    let c = cfg(2, 4, 4, 4);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(6).unwrap();
    let k: Vec<f32> = (0..8).map(|i| i as f32 + 0.1).collect();
    let v: Vec<f32> = (0..8).map(|i| -(i as f32)).collect();
    cache.write(1, &t, 5, &k, &v).unwrap();
    let block = t.blocks()[1] as usize;
    let (d, bs, hk) = (4, 4, 2);
    for h in 0..hk {
        let tile = (block * hk + h) * bs * d;
        for i in 0..d {
            let kk = f16_kv(&cache, 1).0[tile + i * bs + 1];
            let vv = f16_kv(&cache, 1).1[tile + d + i];
            assert_eq!(kk, f16::from_f32(k[h * d + i]));
            assert_eq!(vv, f16::from_f32(v[h * d + i]));
        }
    }
    assert!(f16_kv(&cache, 0).0.iter().all(|x| *x == f16::ZERO));
}

#[test]
fn q8_0_write_stores_values_and_scales_in_the_tile_layouts() {
    let (hk, d, bs) = (2, 64, 4);
    let c = cfg(hk, d, bs, 4).with_kv_type(KvType::Q8_0);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(6).unwrap();
    let k: Vec<f32> = (0..hk * d).map(|i| (i as f32 - 50.0) * 0.03).collect();
    let v: Vec<f32> = (0..hk * d).map(|i| (i as f32).sin()).collect();
    cache.write(1, &t, 5, &k, &v).unwrap();
    let block = t.blocks()[1] as usize;
    let (kq, vq, ks, vs) = q8_kv(&cache, 1);
    for h in 0..hk {
        let tile = (block * hk + h) * bs * d;
        let (mut q, mut sc) = (vec![0i8; d], vec![f16::ZERO; d / QK]);
        quantize_row(&k[h * d..][..d], &mut q, &mut sc);
        for i in 0..d {
            assert_eq!(kq[tile + i * bs + 1], q[i]);
            assert_eq!(ks[tile / QK + (i / QK) * bs + 1], sc[i / QK]);
        }
        quantize_row(&v[h * d..][..d], &mut q, &mut sc);
        assert_eq!(&vq[tile + d..][..d], &q[..]);
        assert_eq!(&vs[(tile + d) / QK..][..d / QK], &sc[..]);
    }
    assert!(q8_kv(&cache, 0).0.iter().all(|&x| x == 0));
    // A head size Q8_0 cannot split into blocks of 32 is a named config error.
    assert!(matches!(
        KvCache::new(cfg(2, 4, 4, 4).with_kv_type(KvType::Q8_0)),
        Err(KvCacheError::InvalidConfig(m)) if m.contains("q8_0")
    ));
}

#[test]
fn bad_writes_are_named_errors() {
    let c = cfg(3, 64, 16, 4);
    let mut cache = KvCache::new(c).unwrap();
    let mut t = cache.new_table();
    t.reserve(16).unwrap();
    let row = vec![0.0; 192];
    assert!(matches!(
        cache.write(2, &t, 0, &row, &row),
        Err(KvCacheError::Layer { .. })
    ));
    assert!(matches!(
        cache.write(0, &t, 16, &row, &row),
        Err(KvCacheError::Position {
            pos: 16,
            capacity: 16
        })
    ));
    assert!(matches!(
        cache.write(0, &t, 0, &row[..10], &row),
        Err(KvCacheError::Shape { .. })
    ));
    let other = KvCache::new(c).unwrap();
    let mut foreign = other.new_table();
    foreign.reserve(1).unwrap();
    assert_eq!(
        cache.write(0, &foreign, 0, &row, &row),
        Err(KvCacheError::ForeignTable)
    );
    cache.write(0, &t, 15, &row, &row).unwrap();
}

#[test]
fn shared_blocks_are_read_only() {
    let mut cache = KvCache::new(cfg(1, 8, 4, 5)).unwrap();
    let mut a = cache.new_table();
    a.reserve(6).unwrap();
    let row = vec![1.0; 8];
    cache.write(0, &a, 5, &row, &row).unwrap();
    let mut b = a.fork();
    assert!(matches!(
        cache.write(0, &b, 6, &row, &row),
        Err(KvCacheError::SharedBlock { refs: 2, .. })
    ));
    // A block only the fork holds is writable.
    b.reserve(9).unwrap();
    cache.write(0, &b, 8, &row, &row).unwrap();
    drop(a);
    cache.write(0, &b, 6, &row, &row).unwrap();
}

#[test]
fn out_of_blocks_leaks_nothing() {
    let cache = KvCache::new(cfg(1, 8, 4, 5)).unwrap();
    let mut a = cache.new_table();
    a.reserve(12).unwrap();
    let mut b = a.fork();
    assert_eq!(cache.free_blocks(), 2);
    assert!(matches!(
        b.reserve(40),
        Err(KvCacheError::OutOfBlocks { needed: 7, free: 2 })
    ));
    assert_eq!(cache.free_blocks(), 2);
    assert_eq!(b.capacity(), 12);
    drop(a);
    assert_eq!(cache.free_blocks(), 2);
    drop(b);
    assert_eq!(cache.free_blocks(), cache.total_blocks());
}

#[test]
fn config_sizes() {
    // The default model: 30 layers, 3 KV heads of 64: 22.5 KiB per position.
    let c = KvCacheConfig::from_bytes(30, 3, 64, 16, 1 << 30);
    assert_eq!(c.bytes_per_block(), 16 * 23040);
    assert_eq!(c.n_blocks, (1 << 30) / (16 * 23040));
    assert!(c.bytes() <= 1 << 30);
    assert!(matches!(
        KvCache::new(KvCacheConfig::from_bytes(30, 3, 64, 16, 1000)),
        Err(KvCacheError::InvalidConfig(_))
    ));
    assert!(KvCache::new(cfg(0, 64, 16, 4)).is_err());
    assert!(KvCache::new(cfg(1, 64, 0, 4)).is_err());
    assert!(KvCache::new(cfg(1, 4096, 16, 4)).is_err());
    // Q8_0: 34 bytes per 32 values instead of 64.
    let q8 = c.with_kv_type(KvType::Q8_0);
    assert_eq!(q8.bytes_per_block() * 64, c.bytes_per_block() * 34);
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<KvCache>();
    check::<BlockTable>();
    check::<BlockAllocator>();
}

#[test]
fn copy_on_write_gives_a_fork_its_own_copy() {
    let c = cfg(2, 4, 4, 6);
    let mut cache = KvCache::new(c).unwrap();
    let mut a = cache.new_table();
    a.reserve(6).unwrap();
    let row = |x: f32| -> Vec<f32> { (0..8).map(|i| x + i as f32).collect() };
    for layer in 0..2 {
        for pos in 0..6 {
            let x = (layer * 100 + pos * 10) as f32;
            cache.write(layer, &a, pos, &row(x), &row(-x)).unwrap();
        }
    }
    let mut b = a.fork();
    // Shared: neither may write the partly filled block 1.
    assert!(matches!(
        cache.write(0, &b, 6, &row(0.0), &row(0.0)),
        Err(KvCacheError::SharedBlock { .. })
    ));
    let (old, new) = b.unshare(1).unwrap()[0];
    assert_eq!(old, a.blocks()[1]);
    assert_eq!(b.blocks()[0], a.blocks()[0], "block 0 still shared");
    cache.copy_block(old, new).unwrap();
    let span = 2 * 4 * 4;
    for layer in 0..2 {
        let (k, v) = f16_kv(&cache, layer);
        let (o, n) = (old as usize * span, new as usize * span);
        assert_eq!(k[o..o + span], k[n..n + span]);
        assert_eq!(v[o..o + span], v[n..n + span]);
    }
    // Now both write position 6 independently.
    cache.write(0, &b, 6, &row(1.0), &row(1.0)).unwrap();
    assert_eq!(a.unshare(1).unwrap(), vec![], "a holds block 1 alone now");
    cache.write(0, &a, 6, &row(2.0), &row(2.0)).unwrap();
    assert!(cache.copy_block(99, new).is_err());
    drop((a, b));
    assert_eq!(cache.free_blocks(), 6);
}

#[test]
fn q8_0_copy_on_write_copies_values_and_scales() {
    let (hk, d, bs) = (2, 32, 4);
    let mut cache = KvCache::new(cfg(hk, d, bs, 6).with_kv_type(KvType::Q8_0)).unwrap();
    let mut a = cache.new_table();
    a.reserve(6).unwrap();
    let row = |x: f32| -> Vec<f32> { (0..hk * d).map(|i| x + i as f32).collect() };
    for layer in 0..2 {
        for pos in 0..6 {
            let x = (layer * 100 + pos * 10) as f32;
            cache.write(layer, &a, pos, &row(x), &row(-x)).unwrap();
        }
    }
    let mut b = a.fork();
    let (old, new) = b.unshare(1).unwrap()[0];
    cache.copy_block(old, new).unwrap();
    let span = hk * bs * d;
    for layer in 0..2 {
        let (k, v, ks, vs) = q8_kv(&cache, layer);
        let (o, n) = (old as usize * span, new as usize * span);
        assert_eq!(k[o..o + span], k[n..n + span]);
        assert_eq!(v[o..o + span], v[n..n + span]);
        assert_eq!(ks[o / QK..(o + span) / QK], ks[n / QK..(n + span) / QK]);
        assert_eq!(vs[o / QK..(o + span) / QK], vs[n / QK..(n + span) / QK]);
        assert!(ks[n / QK..(n + span) / QK].iter().any(|s| *s != f16::ZERO));
    }
}

#[test]
fn push_shared_keeps_the_counts() {
    let cache = KvCache::new(cfg(1, 4, 4, 4)).unwrap();
    let mut a = cache.new_table();
    a.reserve(8).unwrap();
    let mut b = cache.new_table();
    b.push_shared(a.blocks()[0]).unwrap();
    assert_eq!(cache.allocator().refcount(a.blocks()[0]), 2);
    assert!(b.push_shared(3).is_err(), "a free block cannot be shared");
    drop(a);
    assert_eq!(cache.free_blocks(), 3, "b still holds block 0");
    drop(b);
    assert_eq!(cache.free_blocks(), 4);
}

#[test]
fn checkpoints_copy_a_state_out_and_back_and_free_their_slots() {
    let shape = StateShape {
        floats_per_seq: 3,
        n_slots: 2,
    };
    let mut kv = KvCache::with_state_checkpoints(cfg(1, 4, 4, 8), shape, 2).unwrap();
    let a = kv.allocator().clone();
    assert_eq!(a.checkpoint_slots(), Some((2, 2)));
    let mut t = kv.new_table();
    // No slot before the first reserve: a named error, nothing copied.
    assert_eq!(kv.save_state(&t, 2), Err(KvCacheError::NoStateSlot));
    t.reserve(8).unwrap();
    let s = t.state_slot().unwrap();
    kv.state_mut(s).copy_from_slice(&[1.0, 2.0, 3.0]);
    t.set_state_covered(8);
    let c = a.take_checkpoint().expect("a free checkpoint");
    assert!(
        c.slot() >= 2,
        "checkpoints are numbered after the sequences' slots"
    );
    // A sequence's slot is not a checkpoint.
    assert_eq!(
        kv.save_state(&t, s),
        Err(KvCacheError::NotACheckpoint { slot: s })
    );
    assert_eq!(kv.save_state(&t, c.slot()), Ok(8));
    // Another sequence resumes from it: same values, covering the same positions.
    let mut u = kv.new_table();
    u.reserve(12).unwrap();
    let us = u.state_slot().unwrap();
    kv.state_mut(us).fill(9.0);
    kv.restore_state(&u, c.slot(), 8).unwrap();
    assert_eq!(kv.state(us), &[1.0, 2.0, 3.0]);
    assert_eq!(u.state_covered(), Some(8));
    assert_eq!(a.checkpoint_slots(), Some((1, 2)));
    drop(c);
    assert_eq!(a.checkpoint_slots(), Some((2, 2)));
    let held: Vec<_> = (0..3).map(|_| a.take_checkpoint()).collect();
    assert!(held[2].is_none(), "only two checkpoint slots");
}

#[test]
fn a_cache_without_state_has_no_checkpoints() {
    let kv = KvCache::with_state_checkpoints(cfg(1, 4, 4, 8), StateShape::NONE, 4).unwrap();
    assert_eq!(kv.allocator().checkpoint_slots(), None);
    assert!(kv.allocator().take_checkpoint().is_none());
}
