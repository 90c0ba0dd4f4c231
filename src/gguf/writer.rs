//! Writing GGUF v3 files: metadata, tensor infos and aligned data (used by `kiln quantize`
//! and to build test files). The output always parses back with [`GgufFile`](super::GgufFile).

use super::limits::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN};
use super::value::{MetaArray, MetaValue};
use crate::gguf::dtype::DType;
use std::io::{self, Write};

/// Why a writer refused a tensor or could not write.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("tensor {name:?}: {why}")]
    BadTensor { name: String, why: String },
    #[error("duplicate {what} {name:?}")]
    Duplicate { what: &'static str, name: String },
    #[error("general.alignment must be a u32 power of two")]
    BadAlignment,
    #[error("writing GGUF: {0}")]
    Io(#[from] io::Error),
}

struct PendingTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes a GGUF v3 file in one pass.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Adds a metadata entry (file order = call order). `general.alignment` sets the data
    /// alignment and must be a `U32` power of two.
    pub fn add_meta(&mut self, key: &str, value: MetaValue) -> Result<(), WriteError> {
        if self.metadata.iter().any(|(k, _)| k == key) {
            return Err(WriteError::Duplicate {
                what: "metadata key",
                name: key.to_string(),
            });
        }
        if key == ALIGNMENT_KEY && !matches!(value, MetaValue::U32(a) if a.is_power_of_two()) {
            return Err(WriteError::BadAlignment);
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Adds a tensor: `shape` in ggml order (row length first), `data` exactly
    /// `dtype.bytes_for(product of shape)` bytes.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<(), WriteError> {
        let bad = |why: String| WriteError::BadTensor {
            name: name.to_string(),
            why,
        };
        if name.len() as u64 > MAX_TENSOR_NAME_LEN {
            return Err(bad(format!("name longer than {MAX_TENSOR_NAME_LEN} bytes")));
        }
        if shape.is_empty() || shape.len() > MAX_DIMS || shape.contains(&0) {
            return Err(bad(format!(
                "shape {shape:?} must have 1..=4 dimensions >= 1"
            )));
        }
        let n = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("element count overflows".into()))?;
        let block = dtype.block_elems() as u64;
        if !shape[0].is_multiple_of(block) {
            return Err(bad(format!("row length not a multiple of {block}")));
        }
        let want = dtype
            .bytes_for(n)
            .ok_or_else(|| bad("size overflows".into()))?;
        if data.len() as u64 != want {
            return Err(bad(format!(
                "{} data bytes, {dtype} {shape:?} needs {want}",
                data.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(WriteError::Duplicate {
                what: "tensor",
                name: name.to_string(),
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            data,
        });
        Ok(())
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find_map(|(k, v)| match (k.as_str(), v) {
                (ALIGNMENT_KEY, MetaValue::U32(a)) => Some(u64::from(*a)),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Writes the whole file to `w`.
    pub fn write_to(&self, mut w: impl Write) -> Result<(), WriteError> {
        let align = self.alignment();
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        put_u32(&mut head, 3);
        put_u64(&mut head, self.tensors.len() as u64);
        put_u64(&mut head, self.metadata.len() as u64);
        for (k, v) in &self.metadata {
            put_str(&mut head, k);
            put_u32(&mut head, v.meta_type().id());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut head, &t.name);
            put_u32(&mut head, t.shape.len() as u32);
            for &d in &t.shape {
                put_u64(&mut head, d);
            }
            put_u32(&mut head, t.dtype.ggml_id());
            put_u64(&mut head, offset);
            offset = pad_to(offset + t.data.len() as u64, align);
        }
        let pad = pad_to(head.len() as u64, align) - head.len() as u64;
        head.resize(head.len() + pad as usize, 0);
        w.write_all(&head)?;
        for t in &self.tensors {
            w.write_all(&t.data)?;
            let len = t.data.len() as u64;
            let pad = (pad_to(len, align) - len) as usize;
            w.write_all(&vec![0u8; pad])?;
        }
        w.flush()?;
        Ok(())
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }
}

fn pad_to(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Little-endian encoders, public so tests can hand-craft (malformed) files.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A GGUF string: u64 length then the bytes.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A value's payload (without its type id).
pub fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(a) => put_array(out, a),
    }
}

/// An array value's payload: element type, length, elements.
pub fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    put_u32(out, a.elem_type().id());
    put_u64(out, a.len() as u64);
    match a {
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        a => (0..a.len())
            .filter_map(|i| a.get(i))
            .for_each(|x| put_value(out, &x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    #[test]
    fn round_trips_every_value_type_and_tensors() {
        let mut w = GgufWriter::new();
        let vals = [
            MetaValue::U8(7),
            MetaValue::I8(-7),
            MetaValue::U16(700),
            MetaValue::I16(-700),
            MetaValue::U32(70_000),
            MetaValue::I32(-70_000),
            MetaValue::U64(1 << 40),
            MetaValue::I64(-(1 << 40)),
            MetaValue::F32(1.5),
            MetaValue::F64(-2.25),
            MetaValue::Bool(true),
            MetaValue::String("héllo".into()),
            MetaValue::Array(MetaArray::String(["a", ""].into_iter().collect())),
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::I32(vec![1, 2]),
                MetaArray::F64(vec![]),
            ])),
        ];
        for (i, v) in vals.iter().enumerate() {
            w.add_meta(&format!("k{i}"), v.clone()).unwrap();
        }
        w.add_meta(ALIGNMENT_KEY, MetaValue::U32(64)).unwrap();
        w.add_tensor("a", DType::F32, &[3], vec![1; 12]).unwrap();
        w.add_tensor("b", DType::Q4_1, &[32, 2], vec![2; 40])
            .unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 64);
        for (i, v) in vals.iter().enumerate() {
            assert_eq!(f.get(&format!("k{i}")), Some(v));
        }
        let a = f.tensor_data("a").unwrap();
        assert_eq!(&a[..], &[1; 12]);
        assert_eq!(a.as_f32().unwrap().len(), 3);
        let b = f.tensor("b").unwrap();
        assert_eq!(b.offset % 64, 0);
        assert_eq!(f.tensor_bytes(b), &[2; 40]);
    }

    #[test]
    fn refuses_bad_tensors() {
        let mut w = GgufWriter::new();
        assert!(w.add_tensor("x", DType::Q4_0, &[16], vec![0; 9]).is_err());
        assert!(w.add_tensor("x", DType::F32, &[2], vec![0; 7]).is_err());
        assert!(w.add_tensor("x", DType::F32, &[], vec![]).is_err());
        assert!(w.add_meta(ALIGNMENT_KEY, MetaValue::U32(3)).is_err());
        w.add_tensor("x", DType::F32, &[2], vec![0; 8]).unwrap();
        assert!(w.add_tensor("x", DType::F32, &[2], vec![0; 8]).is_err());
    }
}
