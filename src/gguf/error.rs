//! The loader's one error type. Every variant that comes from file contents names the field
//! and the byte offset where it was read, so a malformed file can be located with a hex dump.

use std::path::PathBuf;

/// Why a GGUF file could not be opened, parsed or queried.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("not a GGUF file: magic at offset 0 is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: Vec<u8> },

    #[error("unsupported GGUF version {version} at offset 4 ({why})")]
    UnsupportedVersion { version: u32, why: &'static str },

    #[error("truncated file: {field} at offset {offset} needs {needed} bytes, {available} left")]
    Truncated {
        field: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("{field} at offset {offset} is {value}, above the limit {limit}")]
    TooLarge {
        field: String,
        offset: u64,
        value: u64,
        limit: u64,
    },

    #[error("{field} at offset {offset}: arithmetic overflow ({what})")]
    Overflow {
        field: String,
        offset: u64,
        what: String,
    },

    #[error("{field} at offset {offset} is not valid UTF-8")]
    BadUtf8 { field: String, offset: u64 },

    #[error("{field} at offset {offset}: unknown metadata value type {type_id}")]
    UnknownValueType {
        field: String,
        offset: u64,
        type_id: u32,
    },

    #[error("{field} at offset {offset}: arrays nested deeper than {limit}")]
    ArrayTooDeep {
        field: String,
        offset: u64,
        limit: usize,
    },

    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey { key: String, offset: u64 },

    #[error("metadata key {key:?} (offset {offset}) has type {found}, expected {expected}")]
    WrongType {
        key: String,
        offset: u64,
        expected: &'static str,
        found: String,
    },

    #[error("general.alignment at offset {offset} is {value}: must be a non-zero power of two")]
    BadAlignment { offset: u64, value: u64 },

    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor { name: String, offset: u64 },

    #[error("tensor {tensor:?} (info at offset {offset}): unsupported tensor type {type_name}")]
    UnsupportedDType {
        tensor: String,
        offset: u64,
        type_id: u32,
        type_name: String,
    },

    #[error("tensor {tensor:?} (info at offset {offset}): bad shape: {why}")]
    BadShape {
        tensor: String,
        offset: u64,
        why: String,
    },

    #[error(
        "tensor {tensor:?} (info at offset {offset}): data offset {data_offset} is not a multiple \
         of the alignment {alignment}"
    )]
    Misaligned {
        tensor: String,
        offset: u64,
        data_offset: u64,
        alignment: u64,
    },

    #[error(
        "tensor {tensor:?} (info at offset {offset}): data bytes {start}..{end} lie outside the \
         file ({file_len} bytes)"
    )]
    OutOfBounds {
        tensor: String,
        offset: u64,
        start: u64,
        end: u64,
        file_len: u64,
    },

    #[error("tensor data of {first:?} and {second:?} overlap at file offset {at}")]
    Overlap {
        first: String,
        second: String,
        at: u64,
    },
}

impl GgufError {
    pub(crate) fn truncated(field: &str, offset: u64, needed: u64, available: u64) -> Self {
        GgufError::Truncated {
            field: field.to_string(),
            offset,
            needed,
            available,
        }
    }

    pub(crate) fn too_large(field: &str, offset: u64, value: u64, limit: u64) -> Self {
        GgufError::TooLarge {
            field: field.to_string(),
            offset,
            value,
            limit,
        }
    }

    pub(crate) fn overflow(field: &str, offset: u64, what: impl Into<String>) -> Self {
        GgufError::Overflow {
            field: field.to_string(),
            offset,
            what: what.into(),
        }
    }
}
