//! Tensor descriptions and zero-copy views of their data.
//!
//! The file's bytes live in one [`Backing`] (a read-only memory map, or an owned buffer for
//! tests) shared through an `Arc`; a [`TensorData`] is that `Arc` plus a byte range, so weights
//! are never read or copied at load and a view keeps the map alive for as long as it is used.

use crate::gguf::dtype::DType;
use memmap2::Mmap;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Where the file's bytes live.
pub(crate) enum Backing {
    Mmap(Mmap),
    /// Owned bytes kept in `u64` words so views are 8-byte aligned like a page-aligned map.
    Owned {
        words: Vec<u64>,
        len: usize,
    },
}

impl Backing {
    pub fn owned(bytes: &[u8]) -> Backing {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            // Native order: the words are only ever viewed back as the same bytes.
            *w = u64::from_ne_bytes(b);
        }
        Backing::Owned {
            words,
            len: bytes.len(),
        }
    }

    /// Lets the OS drop the resident pages of `range` of a mapped file (a no-op for owned
    /// bytes): later reads fault the same file bytes back in. Best effort.
    fn release(&self, range: Range<usize>) {
        #[cfg(unix)]
        if let Backing::Mmap(m) = self {
            // SAFETY: `Mmap` is a read-only private map that kiln never writes, so discarding
            // its pages loses nothing: a later read re-faults the file's bytes unchanged, and
            // no reference can observe a difference. The range lies inside the map.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    range.start,
                    range.len(),
                )
            };
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned { words, len } => {
                // SAFETY: `words` holds `words.len() * 8 >= len` initialized bytes; u8 has no
                // alignment or validity requirements, and the slice borrows `self`.
                unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), *len) }
            }
        }
    }
}

/// One tensor's description from the header, already validated: the shape's element count
/// is a whole number of blocks and `offset .. offset + n_bytes` lies inside the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// ggml order: `shape[0]` is the row length (contiguous), then rows, then matrices...
    /// 1 to 4 dimensions, each >= 1.
    pub shape: Vec<u64>,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Data size in bytes.
    pub n_bytes: u64,
    /// Byte offset of this tensor's info record in the header (for error messages).
    pub info_offset: u64,
}

/// True when two ggml shapes are the same up to trailing dimensions of 1: ggml writes a
/// tensor with `ggml_n_dims` dimensions (trailing ones dropped), so llama-quantize turns a
/// `[3072, 1]` tensor of a converted file (Granite 4.0-H's grouped norm with one group) into
/// `[3072]`; both describe the same values.
pub fn same_dims(a: &[u64], b: &[u64]) -> bool {
    fn trim(s: &[u64]) -> &[u64] {
        let n = s.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        &s[..n]
    }
    trim(a) == trim(b)
}

impl TensorInfo {
    /// Total number of values (product of the shape; checked at parse time not to overflow,
    /// saturating for hand-built infos).
    pub fn n_elems(&self) -> u64 {
        product(&self.shape)
    }

    /// Row length `shape[0]` (0 for a hand-built info without dimensions).
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Number of rows: the product of `shape[1..]`.
    pub fn n_rows(&self) -> u64 {
        product(self.shape.get(1..).unwrap_or(&[]))
    }

    /// The file byte range of the data.
    pub fn byte_range(&self) -> Range<usize> {
        // For parsed infos both ends are <= the file length, which fits in usize; saturation
        // only matters for hand-built infos, whose ranges are then checked by the caller.
        let end = self.offset.saturating_add(self.n_bytes);
        usize::try_from(self.offset).unwrap_or(usize::MAX)
            ..usize::try_from(end).unwrap_or(usize::MAX)
    }
}

fn product(dims: &[u64]) -> u64 {
    dims.iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .unwrap_or(u64::MAX)
}

/// An owned, cheap-to-clone view of one tensor's bytes: keeps the file mapped while alive.
/// Derefs to the raw bytes in the file's layout (little-endian, ggml block format).
#[derive(Clone)]
pub struct TensorData {
    backing: Arc<Backing>,
    range: Range<usize>,
    dtype: DType,
    shape: Vec<u64>,
}

impl TensorData {
    pub(crate) fn new(backing: Arc<Backing>, info: &TensorInfo) -> TensorData {
        TensorData {
            backing,
            range: info.byte_range(),
            dtype: info.dtype,
            shape: info.shape.clone(),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// ggml order, `shape()[0]` = row length.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    pub fn bytes(&self) -> &[u8] {
        &self.backing.bytes()[self.range.clone()]
    }

    /// Tells the OS this tensor's mapped pages are not needed for now (after a load-time
    /// copy, e.g. repacked weights), so they stop counting as resident memory. The bytes stay
    /// readable through [`TensorData::bytes`]; pages come back on access.
    pub fn release_pages(&self) {
        self.backing.release(self.range.clone());
    }

    /// The data as `f32` values when the dtype is F32 and the bytes are 4-byte aligned
    /// (always true for files whose alignment is a multiple of 4, i.e. all real ones);
    /// `None` otherwise. Assumes a little-endian host, like the rest of kiln.
    pub fn as_f32(&self) -> Option<&[f32]> {
        if self.dtype != DType::F32 {
            return None;
        }
        let b = self.bytes();
        // SAFETY: every bit pattern is a valid f32; `align_to` only puts correctly aligned
        // whole values in the middle slice, and we accept only the case where it is all of it.
        let (pre, mid, post) = unsafe { b.align_to::<f32>() };
        (pre.is_empty() && post.is_empty()).then_some(mid)
    }

    /// Bytes of one row (`shape[0]` values, a whole number of blocks).
    pub fn row_bytes(&self) -> usize {
        let row_len = self.shape.first().copied().unwrap_or(0);
        // The whole tensor's size fits in the file, so one row's size fits in usize.
        self.dtype.bytes_for(row_len).unwrap_or(0) as usize
    }

    /// Number of rows (product of `shape[1..]`).
    pub fn n_rows(&self) -> usize {
        match self.row_bytes() {
            0 => 0,
            rb => self.len() / rb,
        }
    }

    /// A view of rows `r0..r1` of a 2-D tensor (shape `[row_len, r1 - r0]`), sharing the same
    /// bytes (no copy): how a fused matrix (phi3's `attn_qkv`, gate+up `ffn_up`) is split into
    /// its parts. `None` unless the tensor is 2-D and `r0 <= r1 <= rows`.
    pub fn rows(&self, r0: usize, r1: usize) -> Option<TensorData> {
        if self.shape.len() != 2 || r0 > r1 || r1 > self.n_rows() {
            return None;
        }
        let rb = self.row_bytes();
        let start = self.range.start + r0 * rb;
        Some(TensorData {
            backing: Arc::clone(&self.backing),
            range: start..start + (r1 - r0) * rb,
            dtype: self.dtype,
            shape: vec![self.shape[0], (r1 - r0) as u64],
        })
    }

    /// The `i`-th 2-D matrix of a 3-D tensor (shape `[row_len, n_rows, n]` -> `[row_len,
    /// n_rows]`; a mixture's expert `i`), sharing the same bytes. `None` unless the tensor is
    /// 3-D and `i < n`.
    pub fn matrix(&self, i: usize) -> Option<TensorData> {
        let [row_len, rows, n] = *self.shape.as_slice() else {
            return None;
        };
        if i as u64 >= n {
            return None;
        }
        let rows = usize::try_from(rows).ok()?;
        let bytes = self.row_bytes().checked_mul(rows)?;
        let start = self.range.start.checked_add(i.checked_mul(bytes)?)?;
        if start.checked_add(bytes)? > self.range.end {
            return None;
        }
        Some(TensorData {
            backing: Arc::clone(&self.backing),
            range: start..start + bytes,
            dtype: self.dtype,
            shape: vec![row_len, rows as u64],
        })
    }

    /// The bytes of row `i` (e.g. one token's embedding), `None` past the last row.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        let rb = self.row_bytes();
        let start = i.checked_mul(rb)?;
        self.bytes().get(start..start.checked_add(rb)?)
    }
}

impl Deref for TensorData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorData")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("range", &self.range)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::same_dims;

    #[test]
    fn shapes_match_up_to_trailing_ones() {
        assert!(same_dims(&[3072], &[3072, 1]));
        assert!(same_dims(&[3072, 1, 1], &[3072]));
        assert!(same_dims(&[1], &[1, 1]));
        assert!(!same_dims(&[1, 48], &[48]));
        assert!(!same_dims(&[3072, 2], &[3072]));
    }

    use crate::gguf::dtype::DType;
    use crate::gguf::{GgufFile, GgufWriter};

    #[test]
    fn typed_views_and_rows() {
        let mut w = GgufWriter::new();
        let halfs: Vec<u8> = (0..6u16)
            .flat_map(|i| half::f16::from_f32(f32::from(i)).to_le_bytes())
            .collect();
        w.add_tensor("h", DType::F16, &[3, 2], halfs).unwrap();
        w.add_tensor("q", DType::Q8_0, &[32, 3], (0..102).collect())
            .unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let h = f.tensor_data("h").unwrap();
        assert_eq!(
            h.row(1).unwrap()[2..4],
            half::f16::from_f32(4.0).to_le_bytes()
        );
        assert!(h.as_f32().is_none());
        assert_eq!((h.row_bytes(), h.n_rows()), (6, 2));
        let q = f.tensor_data("q").unwrap();
        assert_eq!((q.row_bytes(), q.n_rows()), (34, 3));
        assert_eq!(q.row(2).unwrap()[0], 68);
        assert!(q.row(3).is_none());
        assert!(q.row(usize::MAX).is_none());
        let part = q.rows(1, 3).unwrap();
        assert_eq!(part.shape(), &[32, 2]);
        assert_eq!(part.bytes(), &q.bytes()[34..102]);
        assert_eq!(part.row(0).unwrap(), q.row(1).unwrap());
        assert!(q.rows(2, 4).is_none() && q.rows(2, 1).is_none() && h.rows(0, 1).is_some());
    }

    #[test]
    fn matrices_of_a_3d_tensor_are_views() {
        let mut w = GgufWriter::new();
        // 3 experts of 2 rows of one Q8_0 block each.
        w.add_tensor("e", DType::Q8_0, &[32, 2, 3], (0..204).collect())
            .unwrap();
        w.add_tensor("m", DType::Q8_0, &[32, 2], (0..68).collect())
            .unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let e = f.tensor_data("e").unwrap();
        let x = e.matrix(2).unwrap();
        assert_eq!(x.shape(), &[32, 2]);
        assert_eq!(x.bytes(), &e.bytes()[136..204]);
        assert!(e.matrix(3).is_none());
        assert!(f.tensor_data("m").unwrap().matrix(0).is_none());
    }
}
