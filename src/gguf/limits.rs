//! The loader's limits: every count and length read from a file is checked against these
//! (and against the bytes left in the file) before anything is allocated.

/// Longest metadata string value (the largest real ones, chat templates, are ~10 KiB).
pub const MAX_STRING_LEN: u64 = 16 << 20;
/// Longest metadata key.
pub const MAX_KEY_LEN: u64 = 64 << 10;
/// Longest tensor name: ggml's `GGML_MAX_NAME` (the GGUF spec's "at most 64 bytes").
pub const MAX_TENSOR_NAME_LEN: u64 = 64;
/// Most elements in one metadata array (also capped by bytes left / element size).
pub const MAX_ARRAY_LEN: u64 = 1 << 28;
/// Deepest nesting of arrays inside arrays (1 = a plain array).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Most tensors in one file (also capped by the bytes left / the smallest tensor info).
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most dimensions of one tensor (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Smallest metadata entry in the file: empty key (8), type (4), one-byte value (1).
pub(crate) const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest tensor info: empty name (8), n_dims (4), one dimension (8), type (4), offset (8).
pub(crate) const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
