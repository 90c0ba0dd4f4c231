//! Idle-time prefetch: bytes each thread of the team pulls into its caches while it waits.
//!
//! A single-sequence decode step streams every weight matrix from memory once, and the memory
//! bus idles whenever no matrix is being multiplied: during attention, the norms, RoPE and
//! activation quantization on the calling thread, and while the first thread done with a
//! matmul waits for the other. Each thread of the team has one slot naming the bytes it will
//! read first in the next matmul (its share of the next matrix's first panels); while it
//! waits (a worker between regions, the caller at a join) it prefetches them a few lines at a
//! time, checking between chunks whether its wait is over. The prefetches are hints only: they
//! never fault and never change a result.
//!
//! A slot is one `AtomicU64`: the first line's address over 64 in the high 42 bits (user-space
//! addresses fit in 48 bits), the lines still to fetch in the low 22 (at most 256 MiB). Only
//! its thread advances it (compare-and-swap, so a slot set meanwhile is never overwritten);
//! any thread may set it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Low bits of a slot: lines left.
const LEN_BITS: u32 = 22;
const LEN_MASK: u64 = (1 << LEN_BITS) - 1;
/// Lines prefetched per step of a wait loop (1 KiB: a few tens of nanoseconds when the
/// core's miss buffers are full, so a waiter notices the end of its wait at once).
const CHUNK: u64 = 16;

/// One slot per thread of a team.
#[derive(Debug)]
pub struct WarmSlots {
    slots: Box<[AtomicU64]>,
}

impl WarmSlots {
    /// Empty slots for `threads` threads.
    pub fn new(threads: usize) -> WarmSlots {
        WarmSlots {
            slots: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Thread `thread` is to prefetch `bytes` (from their first whole line on, the last
    /// partial line included) when idle, instead of what it was given before. Out-of-range
    /// threads and empty or unrepresentable ranges clear the slot or are ignored.
    pub fn set(&self, thread: usize, bytes: &[u8]) {
        let Some(slot) = self.slots.get(thread) else {
            return;
        };
        let start = bytes.as_ptr() as u64 >> 6;
        let end = (bytes.as_ptr() as u64 + bytes.len() as u64).div_ceil(64);
        let lines = end - start;
        let v = if bytes.is_empty() || start >> (64 - LEN_BITS) != 0 {
            0
        } else {
            start << LEN_BITS | lines.min(LEN_MASK)
        };
        slot.store(v, Ordering::Relaxed);
    }

    /// Empties every slot.
    pub fn clear(&self) {
        for s in self.slots.iter() {
            s.store(0, Ordering::Relaxed);
        }
    }

    /// Prefetches the next chunk of thread `thread`'s slot; false when it had nothing left.
    #[inline]
    pub fn step(&self, thread: usize) -> bool {
        let Some(slot) = self.slots.get(thread) else {
            return false;
        };
        let v = slot.load(Ordering::Relaxed);
        let left = v & LEN_MASK;
        if left == 0 {
            return false;
        }
        let line = v >> LEN_BITS;
        let n = left.min(CHUNK);
        for i in 0..n {
            prefetch(((line + i) << 6) as usize);
        }
        // A slot set meanwhile wins: then this chunk was a hint wasted, nothing more.
        let _ = slot.compare_exchange(
            v,
            (line + n) << LEN_BITS | (left - n),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        true
    }
}

/// Starts pulling the line at `addr` into this core's L2.
#[inline(always)]
fn prefetch(addr: usize) {
    crate::kernels::prefetch::to_l2(addr as *const u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_consumed_chunk_by_chunk_and_a_new_range_replaces_it() {
        let w = WarmSlots::new(2);
        let buf = vec![0u8; 64 * 40 + 10];
        assert!(!w.step(0));
        w.set(0, &buf);
        let lines =
            (buf.as_ptr() as u64 + buf.len() as u64).div_ceil(64) - (buf.as_ptr() as u64 >> 6);
        let mut steps = 0;
        while w.step(0) {
            steps += 1;
        }
        assert_eq!(steps, lines.div_ceil(CHUNK));
        assert!(!w.step(1), "the other thread's slot stays empty");
        w.set(1, &buf[..64]);
        w.set(1, &[]);
        assert!(!w.step(1), "an empty range clears the slot");
        w.set(0, &buf);
        w.clear();
        assert!(!w.step(0));
        w.set(5, &buf); // no such thread: ignored
    }
}
