//! The disk tier's reader thread, through the tier ([`super::disk_read`]).

use super::disk_read::{ReadRequest, Wanted};
use crate::scheduler::observer::NoopObserver;
use crate::scheduler::prefix_cache::{block_key, DiskTier, ROOT};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Three blocks written, then the middle one's file removed (as the writer's LRU might,
/// or another replica's clear): a read of all three stops before it, without an error.
#[test]
fn a_read_stops_at_a_missing_file_and_answers_what_it_found() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-read-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut t = DiskTier::open(&dir, 7, (8, 4), 1 << 20, Arc::new(NoopObserver));
    let mut wanted = Vec::new();
    let mut parent = ROOT;
    for b in 0..3u32 {
        let tokens = vec![b, b + 1];
        let key = block_key(parent, &tokens);
        let state = (b == 2).then(|| vec![b as u8; 4]);
        t.write(key, parent, &tokens, vec![b as u8; 8], state);
        wanted.push(Wanted {
            key,
            parent,
            tokens,
        });
        parent = key;
    }
    // Once no write is pending, the writer's counters are final (an idle worker relies on it
    // to publish the last ones).
    let t0 = Instant::now();
    while t.writes_pending() {
        assert!(t0.elapsed() < Duration::from_secs(10), "writes");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(t.stats().written.load(Ordering::Relaxed), 3);
    assert_eq!(t.writes_handled(), 3);
    // A block known on disk is not queued again, so nothing is pending.
    t.write(wanted[0].key, ROOT, &wanted[0].tokens, vec![0; 8], None);
    assert!(!t.writes_pending());
    let read = |t: &mut DiskTier, id| {
        assert!(t.request(ReadRequest {
            id,
            blocks: wanted.clone(),
            budget: 1 << 20,
            epoch: 0,
        }));
        let t0 = Instant::now();
        loop {
            if let Some(d) = t.completed().pop() {
                assert_eq!(d.id, id);
                return d.blocks;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "read {id}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let all = read(&mut t, 1);
    assert_eq!(all.len(), 3);
    assert_eq!(all[2].state.as_deref(), Some(&[2u8; 4][..]));
    assert!(t.knows(all[2].key, true) && !t.knows(all[0].key, true));
    let sub = dir.join(format!("{:016x}", 7u64));
    std::fs::remove_file(sub.join(format!("{:016x}.kvb", wanted[1].key))).unwrap();
    let some = read(&mut t, 2);
    assert_eq!(some.len(), 1, "stops at the missing file");
    assert_eq!(t.stats().rejected.load(Ordering::Relaxed), 0);
    // The index learnt that the file is gone: a prompt of these blocks now asks only for the
    // first one.
    assert!(!t.knows(wanted[1].key, false));
    let mut w = wanted.clone();
    t.keep_known(&mut w);
    assert_eq!(w, wanted[..1]);
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tier on `dir` (emptied first) with `n` chained blocks written and on disk.
fn tier_with_blocks(dir: &std::path::Path, n: u32) -> (DiskTier, Vec<Wanted>) {
    tier_with_blocks_in(dir, n, true)
}

/// [`tier_with_blocks`], emptying `dir` first if `fresh`.
fn tier_with_blocks_in(dir: &std::path::Path, n: u32, fresh: bool) -> (DiskTier, Vec<Wanted>) {
    if fresh {
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut t = DiskTier::open(dir, 7, (8, 4), 1 << 20, Arc::new(NoopObserver));
    let mut wanted = Vec::new();
    let mut parent = ROOT;
    for b in 0..n {
        let tokens = vec![b, b + 1];
        let key = block_key(parent, &tokens);
        t.write(key, parent, &tokens, vec![b as u8; 8], None);
        wanted.push(Wanted {
            key,
            parent,
            tokens,
        });
        parent = key;
    }
    let t0 = Instant::now();
    while t.stats().written.load(Ordering::Relaxed) < u64::from(n) {
        assert!(t0.elapsed() < Duration::from_secs(10), "writes");
        std::thread::sleep(Duration::from_millis(2));
    }
    (t, wanted)
}

/// The index decides a miss without the reader: only blocks it holds are asked for, up to
/// the first it does not hold (a prompt never seen asks nothing). A restarted tier's index
/// holds what it found on disk, and the writer hands its buffers back for reuse.
#[test]
fn the_index_answers_misses_without_a_read_and_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-index-{}", std::process::id()));
    let (mut t, wanted) = tier_with_blocks(&dir, 2);
    let stranger = Wanted {
        key: block_key(ROOT, &[99, 98]),
        parent: ROOT,
        tokens: vec![99, 98],
    };
    let mut w = vec![wanted[0].clone(), stranger.clone(), wanted[1].clone()];
    t.keep_known(&mut w);
    assert_eq!(w, wanted[..1], "cut at the first unknown block");
    let mut w = vec![stranger.clone(), wanted[0].clone()];
    t.keep_known(&mut w);
    assert!(
        w.is_empty(),
        "a prompt starting with an unknown block asks nothing"
    );
    // A written block's buffer comes back empty, with its capacity.
    let t0 = Instant::now();
    loop {
        let b = t.buffer();
        assert!(b.is_empty());
        if b.capacity() >= 8 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no buffer handed back"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(t);
    let t = DiskTier::open(&dir, 7, (8, 4), 1 << 20, Arc::new(NoopObserver));
    let mut w = wanted.clone();
    t.keep_known(&mut w);
    assert_eq!(w, wanted, "found at start");
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clear while a read is in flight: its answer comes (the request it parked goes on) but
/// with no blocks, and the index does not take them back.
#[test]
fn a_clear_voids_the_reads_in_flight() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-clear-{}", std::process::id()));
    let (mut t, wanted) = tier_with_blocks(&dir, 2);
    assert!(t.request(ReadRequest {
        id: 5,
        blocks: wanted.clone(),
        budget: 1 << 20,
        epoch: 0,
    }));
    t.clear();
    let t0 = Instant::now();
    let d = loop {
        if let Some(d) = t.completed().pop() {
            break d;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "read");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(d.id, 5);
    assert!(d.blocks.is_empty(), "a cleared block came back");
    assert!(!t.knows(wanted[0].key, false));
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Another replica's tier on the same directory writes a block: this tier's index finds it
/// once its writer, idle, rescans; and drops it when the file goes.
#[test]
fn an_idle_rescan_finds_another_replicas_blocks_and_loses_removed_ones() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-rescan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let obs = || Arc::new(NoopObserver);
    let mut a = DiskTier::open_with(&dir, 7, (8, 4), 1 << 20, obs(), Duration::from_millis(20));
    // The directory's time must move past the one `a` saw (a coarse clock tick).
    std::thread::sleep(Duration::from_millis(20));
    let (b, wanted) = tier_with_blocks_in(&dir, 1, false);
    drop(b);
    let key = wanted[0].key;
    let until = |a: &mut DiskTier, on: bool| {
        let t0 = Instant::now();
        while a.knows(key, false) != on {
            a.completed();
            assert!(t0.elapsed() < Duration::from_secs(10), "rescan (want {on})");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    until(&mut a, true);
    std::thread::sleep(Duration::from_millis(20));
    let sub = dir.join(format!("{:016x}", 7u64));
    std::fs::remove_file(sub.join(format!("{key:016x}.kvb"))).unwrap();
    until(&mut a, false);
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}
