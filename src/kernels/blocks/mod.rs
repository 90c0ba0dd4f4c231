//! Quantized block layouts, byte-for-byte as in ggml (`ggml/src/ggml-common.h`).
//!
//! Kernels take rows as `&[u8]` in the GGUF layout (so mmap'd weights are used in place);
//! these structs document that layout, assert its size at compile time and give safe
//! `read`/`write` helpers for the scalar reference code. f16 fields are `half::f16`,
//! stored little-endian.

pub mod kquants;
pub mod legacy;
pub mod nonlinear;

pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK};

/// Reads a little-endian f16 at `b[off..off + 2]`.
#[inline(always)]
pub fn f16_at(b: &[u8], off: usize) -> half::f16 {
    half::f16::from_le_bytes([b[off], b[off + 1]])
}

/// Reads a little-endian f16 at `b[off..off + 2]` as f32.
#[inline(always)]
pub fn f16_to_f32_at(b: &[u8], off: usize) -> f32 {
    f16_at(b, off).to_f32()
}
