//! One block of the disk tier as a file: what it holds, and the checks a file must pass before
//! its bytes are used. A file that fails any check is never loaded.
//!
//! # Layout (little-endian)
//!
//! | field | bytes |
//! |---|---|
//! | magic `KILNKVB2` (the format's version) | 8 |
//! | kind (0: a KV block; other kinds, such as a recurrent-state checkpoint, are refused by this version) | 4 |
//! | token count `n` | 4 |
//! | model identity ([`super::identity`]) | 8 |
//! | key, parent key | 8 + 8 |
//! | tokens | 4 `n` |
//! | payload length `p` | 8 |
//! | payload (the KV pool's `export_block` bytes) | `p` |
//! | state length `s` (0, or a recurrent model's checkpoint size) | 8 |
//! | state: the recurrent state after the block (`export_checkpoint` bytes) | `s` |
//! | checksum: [`super::stable_hash`] of everything above | 8 |
//!
//! The key is checked against the parent and tokens (`block_key`), so a file renamed or
//! copied under another key is refused as well as a flipped bit. A file of an earlier version
//! (`KILNKVB1`: no state) is refused as such ([`BlockFileError::OldVersion`]), never misread.

use super::block_key;
use super::stable_hash::{hash_bytes, ByteStream};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KILNKVB2";
/// The magic of every earlier version (refused).
const OLD_MAGICS: [&[u8; 8]; 1] = [b"KILNKVB1"];
/// The kind of entry this version reads and writes: a block of K/V.
pub const KIND_KV_BLOCK: u32 = 0;
/// Seed of the checksum.
const SUM_SEED: u64 = 0x6b76_625f_7375_6d31;
/// Bytes before the tokens.
const HEAD: usize = 8 + 4 + 4 + 8 + 8 + 8;

/// A block as stored: its place in the prefix tree, its bytes and (a recurrent model's block
/// carrying a checkpoint) the recurrent state after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockFile {
    pub key: u64,
    pub parent: u64,
    pub tokens: Vec<u32>,
    pub payload: Vec<u8>,
    pub state: Option<Vec<u8>>,
}

/// Why a file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockFileError {
    #[error("truncated: {0} bytes")]
    Truncated(usize),
    #[error("not a kiln KV block file (bad magic or kind {0})")]
    NotABlock(u32),
    #[error("a block file of an earlier version of the format")]
    OldVersion,
    #[error("written for another model, KV type or build (identity {0:016x})")]
    Foreign(u64),
    #[error("checksum mismatch (corrupt)")]
    Checksum,
    #[error("key {key:016x} does not match its parent and tokens, or the file name")]
    Key { key: u64 },
    #[error("payload of {got} bytes, expected {expected}")]
    Payload { got: usize, expected: usize },
    #[error("recurrent state of {got} bytes, expected {expected}")]
    State { got: usize, expected: usize },
}

impl BlockFile {
    /// The file's bytes for a model of `identity` (what [`Self::write_to`] writes).
    pub fn encode(&self, identity: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.file_len());
        self.write_to(identity, &mut out)
            .expect("writing into a Vec cannot fail");
        out
    }

    /// The length of the file's bytes.
    pub fn file_len(&self) -> usize {
        let state = self.state.as_ref().map_or(0, Vec::len);
        HEAD + 4 * self.tokens.len() + 24 + self.payload.len() + state
    }

    /// Writes the file's bytes for a model of `identity` to `out` piece by piece, the
    /// checksum computed on the way: the payload and state are never copied into one buffer.
    /// Returns the bytes written.
    pub fn write_to(&self, identity: u64, out: &mut impl Write) -> std::io::Result<usize> {
        let state: &[u8] = self.state.as_deref().unwrap_or(&[]);
        let mut head = Vec::with_capacity(HEAD + 4 * self.tokens.len() + 8);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&KIND_KV_BLOCK.to_le_bytes());
        head.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        for w in [identity, self.key, self.parent] {
            head.extend_from_slice(&w.to_le_bytes());
        }
        head.extend(self.tokens.iter().flat_map(|t| t.to_le_bytes()));
        head.extend_from_slice(&(self.payload.len() as u64).to_le_bytes());
        let state_len = (state.len() as u64).to_le_bytes();
        let mut sum = ByteStream::new(SUM_SEED);
        let mut n = 0;
        for piece in [&head[..], &self.payload, &state_len, state] {
            sum.feed(piece);
            out.write_all(piece)?;
            n += piece.len();
        }
        out.write_all(&sum.finish().to_le_bytes())?;
        Ok(n + 8)
    }

    /// Reads `bytes` as the block `key` of a model of `identity` whose blocks export to
    /// `payload_len` bytes and whose states to `state_len` (0: a model without state); every
    /// check in the module docs must pass.
    pub fn decode(
        bytes: &[u8],
        identity: u64,
        key: u64,
        payload_len: usize,
        state_len: usize,
    ) -> Result<BlockFile, BlockFileError> {
        let truncated = || BlockFileError::Truncated(bytes.len());
        if bytes.len() >= 8 && OLD_MAGICS.iter().any(|m| &bytes[..8] == *m) {
            return Err(BlockFileError::OldVersion);
        }
        if bytes.len() < HEAD + 24 {
            return Err(truncated());
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let kind = u32_at(8);
        if &bytes[..8] != MAGIC || kind != KIND_KV_BLOCK {
            return Err(BlockFileError::NotABlock(kind));
        }
        let n = u32_at(12) as usize;
        let tokens_end = HEAD + 4 * n;
        let payload_at = tokens_end + 8;
        if bytes.len() < payload_at + 8 {
            return Err(truncated());
        }
        let p = usize::try_from(u64_at(tokens_end)).map_err(|_| truncated())?;
        let payload_end = payload_at.checked_add(p).ok_or_else(truncated)?;
        if bytes.len() < payload_end.saturating_add(16) {
            return Err(truncated());
        }
        let sl = usize::try_from(u64_at(payload_end)).map_err(|_| truncated())?;
        let state_at = payload_end + 8;
        let end = state_at.checked_add(sl).ok_or_else(truncated)?;
        if bytes.len() != end.saturating_add(8) {
            return Err(truncated());
        }
        if hash_bytes(SUM_SEED, &bytes[..end]) != u64_at(end) {
            return Err(BlockFileError::Checksum);
        }
        let id = u64_at(16);
        if id != identity {
            return Err(BlockFileError::Foreign(id));
        }
        let (file_key, parent) = (u64_at(24), u64_at(32));
        let tokens: Vec<u32> = (0..n).map(|i| u32_at(HEAD + 4 * i)).collect();
        if file_key != key || block_key(parent, &tokens) != key {
            return Err(BlockFileError::Key { key: file_key });
        }
        if p != payload_len {
            return Err(BlockFileError::Payload {
                got: p,
                expected: payload_len,
            });
        }
        if sl != 0 && sl != state_len {
            return Err(BlockFileError::State {
                got: sl,
                expected: state_len,
            });
        }
        Ok(BlockFile {
            key,
            parent,
            tokens,
            payload: bytes[payload_at..payload_end].to_vec(),
            state: (sl > 0).then(|| bytes[state_at..end].to_vec()),
        })
    }
}

/// The extension of a block's file.
pub(super) const EXT: &str = "kvb";

/// Where block `key`'s file lives in the tier's directory.
pub(super) fn file_path(dir: &Path, key: u64) -> PathBuf {
    dir.join(format!("{key:016x}.{EXT}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::prefix_cache::ROOT;

    fn block() -> BlockFile {
        let tokens = vec![5, 6, 7, 8];
        BlockFile {
            key: block_key(ROOT, &tokens),
            parent: ROOT,
            tokens,
            payload: (0..100u8).collect(),
            state: Some(vec![9; 12]),
        }
    }

    #[test]
    fn a_block_round_trips_and_every_damage_is_refused() {
        let b = block();
        let bytes = b.encode(42);
        assert_eq!(bytes.len(), b.file_len());
        assert_eq!(BlockFile::decode(&bytes, 42, b.key, 100, 12), Ok(b.clone()));
        // Another model (or KV type, or build): foreign.
        assert_eq!(
            BlockFile::decode(&bytes, 43, b.key, 100, 12),
            Err(BlockFileError::Foreign(42))
        );
        // Every single flipped bit is caught.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                BlockFile::decode(&bad, 42, b.key, 100, 12).is_err(),
                "byte {i}"
            );
        }
        // Every truncation too, and trailing garbage.
        for n in 0..bytes.len() {
            assert!(
                BlockFile::decode(&bytes[..n], 42, b.key, 100, 12).is_err(),
                "{n}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(BlockFile::decode(&long, 42, b.key, 100, 12).is_err());
        // Under another key (a renamed file), or a payload of another shape (a stale file).
        assert!(matches!(
            BlockFile::decode(&bytes, 42, b.key ^ 1, 100, 12),
            Err(BlockFileError::Key { .. })
        ));
        assert!(matches!(
            BlockFile::decode(&bytes, 42, b.key, 101, 12),
            Err(BlockFileError::Payload { .. })
        ));
        // A state of another size (another model's shape), refused; none at all is fine.
        assert!(matches!(
            BlockFile::decode(&bytes, 42, b.key, 100, 16),
            Err(BlockFileError::State { .. })
        ));
        let kv_only = BlockFile {
            state: None,
            ..b.clone()
        };
        let e = kv_only.encode(42);
        assert_eq!(BlockFile::decode(&e, 42, b.key, 100, 12), Ok(kv_only));
        // A file of the previous version (the same bytes under its magic): refused as such.
        let mut old = bytes.clone();
        old[..8].copy_from_slice(b"KILNKVB1");
        assert_eq!(
            BlockFile::decode(&old, 42, b.key, 100, 12),
            Err(BlockFileError::OldVersion)
        );
    }
}
