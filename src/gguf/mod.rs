//! GGUF v2/v3 files: a hardened header parser and zero-copy tensor views over a memory map.
//!
//! [`GgufFile::open`] maps the file read-only, parses the header (metadata and tensor infos)
//! and validates every tensor's byte range without reading any tensor data; tensors are then
//! borrowed slices ([`GgufFile::tensor_bytes`]) or `Arc`-owning views ([`TensorData`]) of the
//! map. Malformed files give a [`GgufError`] naming the field and byte offset, never a panic.

pub mod dtype;
mod error;
pub mod limits;
mod parse;
mod reader;
mod strings;
mod tensor;
mod value;
pub mod writer;

pub use dtype::{DType, DTypeInfo, DTYPES};
pub use error::GgufError;
pub use strings::StrArray;
pub use tensor::{same_dims, TensorData, TensorInfo};
pub use value::{MetaArray, MetaType, MetaValue};
pub use writer::{GgufWriter, WriteError};

use memmap2::Mmap;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use tensor::Backing;

/// An opened GGUF file: parsed header plus the mapped bytes.
pub struct GgufFile {
    backing: Arc<Backing>,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    meta_offsets: Vec<u64>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
}

impl GgufFile {
    /// Maps `path` read-only and parses its header. Tensor data is not read.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let backing = if len == 0 {
            Backing::owned(&[])
        } else {
            // SAFETY: the map is read-only and private to this process. Like every mmap-based
            // model loader, kiln requires that the model file is not truncated or rewritten
            // while it is being served; all reads are bounds-checked against the map length.
            let map = unsafe { Mmap::map(&file) }.map_err(io)?;
            Backing::Mmap(map)
        };
        GgufFile::from_backing(Arc::new(backing))
    }

    /// Parses a file held in memory (tests, fuzzing); the same parser as [`GgufFile::open`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::from_backing(Arc::new(Backing::owned(&bytes)))
    }

    fn from_backing(backing: Arc<Backing>) -> Result<GgufFile, GgufError> {
        let h = parse::parse(backing.bytes())?;
        let meta_index = h
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = h
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            backing,
            version: h.version,
            metadata: h.metadata,
            meta_offsets: h.meta_offsets,
            meta_index,
            tensors: h.tensors,
            tensor_index,
            alignment: h.alignment,
            data_start: h.data_start,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset where the data section starts.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// File size in bytes.
    pub fn file_len(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Byte offset of `key`'s entry in the file (for error messages).
    pub fn key_offset(&self, key: &str) -> Option<u64> {
        self.meta_index.get(key).map(|&i| self.meta_offsets[i])
    }

    fn wrong_type(&self, key: &str, expected: &'static str, v: &MetaValue) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            offset: self.key_offset(key).unwrap_or(0),
            expected,
            found: v.type_desc(),
        }
    }

    /// An integer of any of the eight integer types whose value fits in `T`.
    fn get_int<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<T>, GgufError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.as_i128().map(T::try_from) {
            Some(Ok(x)) => Ok(Some(x)),
            _ => Err(self.wrong_type(key, expected, v)),
        }
    }

    /// A string value; `Err` if `key` holds another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong_type(key, "string", v)),
        }
    }

    /// An integer value of any integer type that fits in `u32`; `Err` otherwise.
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get_int(key, "an integer in u32 range")
    }

    /// An integer value of any integer type that fits in `u64`; `Err` otherwise.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.get_int(key, "an integer in u64 range")
    }

    /// An integer value of any integer type that fits in `i64`; `Err` otherwise.
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.get_int(key, "an integer in i64 range")
    }

    /// An `f32` value (an `f64` is rounded to `f32`); `Err` for other types.
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) => Ok(Some(x as f32)),
                None => Err(self.wrong_type(key, "f32", v)),
            },
        }
    }

    /// A bool value; `Err` if `key` holds another type.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong_type(key, "bool", v)),
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<&StrArray>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(MetaArray::String(v))) => Ok(Some(v)),
            Some(v) => Err(self.wrong_type(key, "[string]", v)),
        }
    }

    /// An array of `f32` (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<Option<&[f32]>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(MetaArray::F32(v))) => Ok(Some(v)),
            Some(v) => Err(self.wrong_type(key, "[f32]", v)),
        }
    }

    /// An array of `i32` (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i32_array(&self, key: &str) -> Result<Option<&[i32]>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(MetaArray::I32(v))) => Ok(Some(v)),
            Some(v) => Err(self.wrong_type(key, "[i32]", v)),
        }
    }

    /// An array of `u32`.
    pub fn get_u32_array(&self, key: &str) -> Result<Option<&[u32]>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(MetaArray::U32(v))) => Ok(Some(v)),
            Some(v) => Err(self.wrong_type(key, "[u32]", v)),
        }
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of `t`, borrowed from the map (no copy). `t` must come from this file;
    /// a foreign `TensorInfo` whose range lies outside this file yields an empty slice.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        self.backing.bytes().get(t.byte_range()).unwrap_or(&[])
    }

    /// An owned view of the tensor named `name` that keeps the map alive (no copy).
    pub fn tensor_data(&self, name: &str) -> Option<TensorData> {
        let t = self.tensor(name)?;
        Some(TensorData::new(Arc::clone(&self.backing), t))
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("file_len", &self.file_len())
            .finish()
    }
}
