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
    let t0 = Instant::now();
    while t.stats().written.load(Ordering::Relaxed) < 3 {
        assert!(t0.elapsed() < Duration::from_secs(10), "writes");
        std::thread::sleep(Duration::from_millis(2));
    }
    let read = |t: &mut DiskTier, id| {
        assert!(t.request(ReadRequest {
            id,
            blocks: wanted.clone(),
            budget: 1 << 20,
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
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}
