//! A block's K/V as bytes, for the prefix cache's RAM and disk tiers: [`KvCache::export_block`]
//! copies the pages of one block (one page per layer group) out of the pool exactly as stored,
//! and [`KvCache::import_block`] writes such bytes into fresh pages, so a block that left the
//! pool comes back bit for bit.
//!
//! # Format
//!
//! For each layer group in order (the block's page in that group), for each slot of the page
//! (a layer's place in it), the slot's span of each stored array, little-endian:
//! f16: K values then V values; Q8_0: K values, V values (i8), then K scales, V scales (f16).
//! The length is [`KvCache::block_bytes`]; nothing else (the tiers keep the key, tokens,
//! model identity and checksum beside it).

use super::kv_type::QK;
use super::{KvCache, KvCacheError, KvType, RELEASED};
use half::f16;

impl KvCache {
    /// Bytes of one exported block: every group's page (see the module docs).
    pub fn block_bytes(&self) -> usize {
        self.alloc.layout().n_groups() * self.cfg.bytes_per_block()
    }

    /// Values of one slot of one page in each value array.
    fn span(&self) -> usize {
        self.cfg.n_head_kv * self.cfg.block_size * self.cfg.head_dim
    }

    /// Checks that `pages` names one page of this pool per layer group (none released), and
    /// when `live`, that each is held by some table.
    fn check_block_pages(&self, pages: &[u32], live: bool) -> Result<(), KvCacheError> {
        let groups = self.alloc.layout().n_groups();
        if pages.len() != groups {
            return Err(KvCacheError::Shape {
                what: "block pages",
                expected: groups,
                got: pages.len(),
            });
        }
        for &id in pages {
            let dead = live && self.alloc.refcount(id) == 0;
            if id == RELEASED || id as usize >= self.cfg.n_blocks || dead {
                return Err(KvCacheError::BadBlock { id });
            }
        }
        Ok(())
    }

    /// Appends to `out` the K/V of the block made of `pages` (one page per group), as stored
    /// ([`Self::block_bytes`] bytes, see the module docs). The pages may be free already (a
    /// block the prefix cache just evicted): the caller guarantees nothing wrote them since.
    pub fn export_block(&self, pages: &[u32], out: &mut Vec<u8>) -> Result<(), KvCacheError> {
        self.check_block_pages(pages, false)?;
        out.reserve(self.block_bytes());
        let span = self.span();
        for &page in pages {
            for slot in 0..self.alloc.layout().layers_per_page() {
                let at = slot * self.layer_len + page as usize * span;
                match self.cfg.kv_type {
                    KvType::F16 => {
                        for a in [&self.k, &self.v] {
                            push_f16(out, &a[at..at + span]);
                        }
                    }
                    KvType::Q8_0 => {
                        for a in [&self.kq, &self.vq] {
                            out.extend(a[at..at + span].iter().map(|&x| x as u8));
                        }
                        for a in [&self.k, &self.v] {
                            push_f16(out, &a[at / QK..(at + span) / QK]);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes `bytes` (an [`Self::export_block`] of a cache of the same shape and KV type)
    /// into the block made of `pages`, which this caller alone holds (a shared page is
    /// read-only: [`KvCacheError::SharedBlock`]).
    pub fn import_block(&mut self, pages: &[u32], bytes: &[u8]) -> Result<(), KvCacheError> {
        self.check_block_pages(pages, true)?;
        if bytes.len() != self.block_bytes() {
            return Err(KvCacheError::Shape {
                what: "block bytes",
                expected: self.block_bytes(),
                got: bytes.len(),
            });
        }
        for &id in pages {
            let refs = self.alloc.refcount(id);
            if refs != 1 {
                return Err(KvCacheError::SharedBlock { id, refs });
            }
        }
        let span = self.span();
        let mut rest = bytes;
        for &page in pages {
            for slot in 0..self.alloc.layout().layers_per_page() {
                let at = slot * self.layer_len + page as usize * span;
                match self.cfg.kv_type {
                    KvType::F16 => {
                        for a in [&mut self.k, &mut self.v] {
                            rest = take_f16(rest, &mut a[at..at + span]);
                        }
                    }
                    KvType::Q8_0 => {
                        for a in [&mut self.kq, &mut self.vq] {
                            let (head, tail) = rest.split_at(span);
                            for (d, &s) in a[at..at + span].iter_mut().zip(head) {
                                *d = s as i8;
                            }
                            rest = tail;
                        }
                        for a in [&mut self.k, &mut self.v] {
                            rest = take_f16(rest, &mut a[at / QK..(at + span) / QK]);
                        }
                    }
                }
            }
        }
        invariant!(rest.is_empty());
        Ok(())
    }
}

/// Appends `xs` as little-endian bytes (one copy of memory on a little-endian machine).
fn push_f16(out: &mut Vec<u8>, xs: &[f16]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: f16 is a plain 2-byte value with no padding and no invalid bit patterns, so
        // its slice is readable as `2 * len` bytes, which on a little-endian machine are its
        // little-endian encoding; the byte slice borrows `xs` and lives no longer.
        let bytes = unsafe { std::slice::from_raw_parts(xs.as_ptr().cast::<u8>(), xs.len() * 2) };
        out.extend_from_slice(bytes);
    }
    #[cfg(not(target_endian = "little"))]
    out.extend(xs.iter().flat_map(|x| x.to_bits().to_le_bytes()));
}

/// Fills `dst` from the front of `bytes` (little-endian f16s); returns the rest.
fn take_f16<'a>(bytes: &'a [u8], dst: &mut [f16]) -> &'a [u8] {
    let (head, tail) = bytes.split_at(dst.len() * 2);
    #[cfg(target_endian = "little")]
    {
        // SAFETY: as in `push_f16`: every 2-byte pattern is a valid f16, `dst` is exclusively
        // borrowed and exactly `head.len()` bytes long, and the two slices cannot overlap
        // (`bytes` is shared while `dst` is unique).
        let d =
            unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), head.len()) };
        d.copy_from_slice(head);
    }
    #[cfg(not(target_endian = "little"))]
    for (d, b) in dst.iter_mut().zip(head.chunks_exact(2)) {
        *d = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::super::{KvCacheConfig, LayerWindows};
    use super::*;

    fn cache(kv_type: KvType, windows: LayerWindows) -> KvCache {
        KvCache::new(KvCacheConfig {
            n_layer: 2,
            n_head_kv: 2,
            head_dim: 32,
            block_size: 4,
            n_blocks: 8,
            windows,
            kv_type,
        })
        .unwrap()
    }

    /// Every layer's K/V at every position of the table's first block, read back through
    /// the attention's view.
    fn fill(kv: &mut KvCache, table: &super::super::BlockTable, seed: f32) {
        for layer in 0..2 {
            for pos in 0..4 {
                let k: Vec<f32> = (0..64)
                    .map(|i| (i as f32 + seed) * 0.1 - pos as f32)
                    .collect();
                let v: Vec<f32> = (0..64)
                    .map(|i| (i as f32 - seed) * 0.07 + layer as f32)
                    .collect();
                kv.write(layer, table, pos, &k, &v).unwrap();
            }
        }
    }

    #[test]
    fn a_block_round_trips_bit_for_bit_in_every_kv_type_and_layout() {
        let w = LayerWindows::new(4, &[true, false]).unwrap();
        for (t, windows) in [
            (KvType::F16, LayerWindows::NONE),
            (KvType::Q8_0, LayerWindows::NONE),
            (KvType::F16, w),
            (KvType::Q8_0, w),
        ] {
            let mut kv = cache(t, windows);
            let mut a = kv.new_table();
            a.reserve(4).unwrap();
            fill(&mut kv, &a, 3.0);
            let mut bytes = Vec::new();
            kv.export_block(&a.block_pages(0), &mut bytes).unwrap();
            assert_eq!(bytes.len(), kv.block_bytes());
            let mut b = kv.new_table();
            b.reserve(4).unwrap();
            fill(&mut kv, &b, 9.0);
            kv.import_block(&b.block_pages(0), &bytes).unwrap();
            let mut again = Vec::new();
            kv.export_block(&b.block_pages(0), &mut again).unwrap();
            assert_eq!(bytes, again, "{t:?}");
            // Wrong length, wrong page count, a shared page: refused, nothing written.
            assert!(kv.import_block(&b.block_pages(0), &bytes[1..]).is_err());
            assert!(kv.import_block(&[b.blocks()[0]; 3], &bytes).is_err());
            let fork = b.fork();
            assert!(matches!(
                kv.import_block(&fork.block_pages(0), &bytes),
                Err(KvCacheError::SharedBlock { .. })
            ));
        }
    }
}
