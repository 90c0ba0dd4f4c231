//! Recurrent state beside the pages: the fixed-size state a sequence's recurrent layers carry
//! from one position to the next (LFM2's short-convolution window; gated DeltaNet's and
//! Mamba2's state matrices belong here too), one slot per sequence.
//!
//! # Ownership
//!
//! A slot belongs to a [`super::BlockTable`] exactly as its pages do: the table takes one from
//! the pool on its first [`super::BlockTable::reserve`] (so a sequence holding pages always
//! holds its state) and gives it back in `Drop` (a finished, cancelled or preempted sequence
//! frees it). The values live in the [`super::KvCache`] (`state`, `state_mut`), which the
//! forward pass borrows mutably anyway; the table only names its slot and how many positions
//! the state covers.
//!
//! # Positions
//!
//! The state of a sequence stands for all its positions `0..covered`. A forward call starting
//! at position 0 clears it; one starting at `p > 0` needs `covered == p` exactly (checked
//! before anything is computed): a state cannot be rolled back, nor resumed from pages shared
//! by a prefix cache or a fork, so those paths are refused loudly instead of computing on a
//! stale state, except from a checkpoint (below).
//!
//! # Checkpoints
//!
//! A checkpoint is a further slot, outside the sequences' pool, holding a copy of a
//! sequence's state at a block boundary (taken by the prefix cache after a prefill chunk that
//! ends there, see `scheduler::prefix_cache`). A sequence whose prompt starts with a cached
//! prefix resumes from the checkpoint at the prefix's end: its own slot gets the copy and
//! covers exactly those positions ([`super::KvCache::restore_state`]). A [`Checkpoint`] owns
//! its slot and gives it back in `Drop`.
//!
//! # Layout
//!
//! One `f32` array, `[slot][floats_per_seq]`; a model lays its recurrent layers' states one
//! after another inside a slot (`ModelDesc::state_floats`, each layer's offset in its
//! `MixerKind`). f32 as llama.cpp keeps its recurrent states (`type_r`, `type_s`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// How much recurrent state a cache holds: `n_slots` sequences of `floats_per_seq` f32 each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateShape {
    pub floats_per_seq: usize,
    pub n_slots: usize,
}

impl StateShape {
    /// No recurrent state (a model of attention layers only).
    pub const NONE: StateShape = StateShape {
        floats_per_seq: 0,
        n_slots: 0,
    };

    /// True when sequences carry a state.
    pub fn is_some(&self) -> bool {
        self.floats_per_seq > 0
    }

    /// Bytes of one sequence's state.
    pub fn bytes_per_seq(&self) -> usize {
        self.floats_per_seq.saturating_mul(4)
    }

    /// Bytes of every slot.
    pub fn bytes(&self) -> usize {
        self.bytes_per_seq().saturating_mul(self.n_slots)
    }
}

/// A table's state slot and how many of the sequence's positions it covers.
#[derive(Debug)]
pub(crate) struct StateSlot {
    pub(crate) id: u32,
    /// Atomic so the forward pass can advance it through the `&BlockTable` a batch holds.
    covered: AtomicUsize,
}

impl StateSlot {
    pub(crate) fn new(id: u32) -> StateSlot {
        StateSlot {
            id,
            covered: AtomicUsize::new(0),
        }
    }

    pub(crate) fn covered(&self) -> usize {
        self.covered.load(Ordering::Relaxed)
    }

    pub(crate) fn set_covered(&self, n: usize) {
        self.covered.store(n, Ordering::Relaxed);
    }
}

/// The free slots of a pool (a stack: the most recently freed is reused first).
#[derive(Debug)]
pub(crate) struct SlotList {
    free: Vec<u32>,
    total: usize,
}

impl SlotList {
    pub(crate) fn new(n: usize) -> SlotList {
        SlotList::range(0, n)
    }

    /// The `n` slots `first..first + n`.
    pub(crate) fn range(first: usize, n: usize) -> SlotList {
        SlotList {
            free: (first as u32..(first + n) as u32).rev().collect(),
            total: n,
        }
    }

    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    pub(crate) fn give_back(&mut self, id: u32) {
        invariant!(!self.free.contains(&id), "state slot {id} freed twice");
        self.free.push(id);
    }

    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// The checkpoint slots of a pool (shared by the allocator and every [`Checkpoint`]).
#[derive(Debug, Clone)]
pub(crate) struct CheckpointSlots {
    list: Arc<Mutex<SlotList>>,
    first: u32,
}

impl CheckpointSlots {
    /// Slots `first..first + n` of the state array.
    pub(crate) fn new(first: usize, n: usize) -> CheckpointSlots {
        CheckpointSlots {
            list: Arc::new(Mutex::new(SlotList::range(first, n))),
            first: first as u32,
        }
    }

    /// The free list (a panic cannot leave it half-updated, so poisoning is harmless).
    fn lock(&self) -> MutexGuard<'_, SlotList> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free checkpoint slot, `None` when every one is held.
    pub(crate) fn take(&self) -> Option<Checkpoint> {
        let id = self.lock().take()?;
        Some(Checkpoint {
            id,
            slots: self.clone(),
        })
    }

    /// `(free, total)`.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let l = self.lock();
        (l.free_count(), l.total())
    }

    /// Whether `slot` is one of these checkpoint slots.
    pub(crate) fn contains(&self, slot: u32) -> bool {
        slot >= self.first && ((slot - self.first) as usize) < self.lock().total()
    }
}

/// One checkpoint slot, held until dropped (see the module docs).
#[derive(Debug)]
pub struct Checkpoint {
    id: u32,
    slots: CheckpointSlots,
}

impl Checkpoint {
    /// The slot's index in the cache's state array (for [`super::KvCache::save_state`] and
    /// [`super::KvCache::restore_state`]).
    pub fn slot(&self) -> u32 {
        self.id
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        self.slots.lock().give_back(self.id);
    }
}
