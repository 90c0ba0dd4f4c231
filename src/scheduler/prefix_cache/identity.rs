//! The model identity the disk tier keys its files by: everything that decides the K/V values
//! a block holds, so a file is only ever read by a server that would have computed the same
//! bytes. A cheap, stable stand-in for hashing the whole weights file: its length and 64
//! samples of 64 KiB spread over it (the GGUF header with its metadata among them), plus the
//! KV type, the block size, the kernels' instruction set (rounding differs between them) and
//! kiln's version (kernels change between releases).

use super::stable_hash::StableHasher;
use crate::engine::kv_cache::KvType;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bumped when the block file format or the meaning of its bytes changes.
pub const FORMAT_VERSION: u64 = 1;

const SAMPLES: u64 = 64;
const SAMPLE_BYTES: u64 = 64 << 10;

/// The identity of blocks computed from the model at `path` (see the module docs).
pub fn model_identity(
    path: &Path,
    kv_type: KvType,
    block_size: usize,
    isa: &str,
) -> std::io::Result<u64> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut h = StableHasher::new(FORMAT_VERSION);
    h.word(len);
    let mut buf = vec![0u8; SAMPLE_BYTES as usize];
    for i in 0..SAMPLES {
        let at = (len.saturating_sub(SAMPLE_BYTES)) / (SAMPLES - 1) * i;
        f.seek(SeekFrom::Start(at))?;
        let n = read_up_to(&mut f, &mut buf)?;
        h.bytes(&buf[..n]);
    }
    for s in [kv_type.name(), isa, env!("CARGO_PKG_VERSION")] {
        h.bytes(s.as_bytes());
    }
    h.word(block_size as u64);
    Ok(h.finish())
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_follows_content_kv_type_block_size_and_isa() {
        let dir = std::env::temp_dir().join(format!("kiln-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.gguf");
        let mut bytes = vec![1u8; 300_000];
        std::fs::write(&a, &bytes).unwrap();
        let id = |p: &Path, t, bs, isa| model_identity(p, t, bs, isa).unwrap();
        let base = id(&a, KvType::F16, 16, "avx2");
        assert_eq!(base, id(&a, KvType::F16, 16, "avx2"), "stable");
        assert_ne!(base, id(&a, KvType::Q8_0, 16, "avx2"));
        assert_ne!(base, id(&a, KvType::F16, 32, "avx2"));
        assert_ne!(base, id(&a, KvType::F16, 16, "avx512"));
        bytes[0] = 2;
        std::fs::write(&a, &bytes).unwrap();
        assert_ne!(base, id(&a, KvType::F16, 16, "avx2"), "content");
        assert!(model_identity(&dir.join("missing"), KvType::F16, 16, "avx2").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
