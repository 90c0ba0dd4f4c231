//! Copies of recurrent states between a sequence's slot, the checkpoint slots and bytes (the
//! prefix cache's tiers): the [`KvCache`] side of [`super::state`]'s checkpoints. Apart from
//! `state.rs` because these need the block table, which itself holds a state slot.

use super::{BlockTable, KvCache, KvCacheError};

impl KvCache {
    /// Copies the recurrent state of `table`'s slot into checkpoint slot `checkpoint`; returns
    /// the positions it covers (`0..n`).
    pub fn save_state(
        &mut self,
        table: &BlockTable,
        checkpoint: u32,
    ) -> Result<usize, KvCacheError> {
        let from = table.state_slot().ok_or(KvCacheError::NoStateSlot)?;
        if !self.alloc.is_checkpoint(checkpoint) {
            return Err(KvCacheError::NotACheckpoint { slot: checkpoint });
        }
        let n = self.state_shape.floats_per_seq;
        self.state.copy_within(
            from as usize * n..(from as usize + 1) * n,
            checkpoint as usize * n,
        );
        Ok(table.state_covered().unwrap_or(0))
    }

    /// Replaces the recurrent state of `table`'s slot with checkpoint slot `checkpoint`'s, which
    /// stands for positions `0..covered` of the same tokens (the caller's contract: the prefix
    /// cache keys checkpoints by the tokens they cover).
    pub fn restore_state(
        &mut self,
        table: &BlockTable,
        checkpoint: u32,
        covered: usize,
    ) -> Result<(), KvCacheError> {
        let to = table.state_slot().ok_or(KvCacheError::NoStateSlot)?;
        if !self.alloc.is_checkpoint(checkpoint) {
            return Err(KvCacheError::NotACheckpoint { slot: checkpoint });
        }
        let n = self.state_shape.floats_per_seq;
        self.state.copy_within(
            checkpoint as usize * n..(checkpoint as usize + 1) * n,
            to as usize * n,
        );
        table.set_state_covered(covered);
        Ok(())
    }

    /// Bytes of one checkpoint as [`Self::export_checkpoint`] writes them (its f32 values,
    /// little-endian); 0 for a model without state.
    pub fn checkpoint_bytes(&self) -> usize {
        self.state_shape.bytes_per_seq()
    }

    /// Appends checkpoint slot `slot`'s state to `out` as little-endian f32 (for the prefix
    /// cache's RAM and disk tiers).
    pub fn export_checkpoint(&self, slot: u32, out: &mut Vec<u8>) -> Result<(), KvCacheError> {
        if !self.alloc.is_checkpoint(slot) {
            return Err(KvCacheError::NotACheckpoint { slot });
        }
        out.extend(self.state(slot).iter().flat_map(|v| v.to_le_bytes()));
        Ok(())
    }

    /// Replaces the recurrent state of `table`'s slot with `bytes` (as
    /// [`Self::export_checkpoint`] made them, bit-identical values), standing for positions
    /// `0..covered` of the same tokens (the caller's contract, as for
    /// [`Self::restore_state`]).
    pub fn load_state(
        &mut self,
        table: &BlockTable,
        bytes: &[u8],
        covered: usize,
    ) -> Result<(), KvCacheError> {
        let slot = table.state_slot().ok_or(KvCacheError::NoStateSlot)?;
        let want = self.checkpoint_bytes();
        if bytes.len() != want {
            return Err(KvCacheError::Shape {
                what: "checkpoint bytes",
                expected: want,
                got: bytes.len(),
            });
        }
        for (v, b) in self.state_mut(slot).iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        table.set_state_covered(covered);
        Ok(())
    }
}
