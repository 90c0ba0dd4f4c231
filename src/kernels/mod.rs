//! Compute kernels: quantized block layouts, scalar references and SIMD versions.
//!
//! A leaf module: it depends on nothing else in kiln and on no async or serde crates.

pub mod dtype;

pub use dtype::{DType, DTypeInfo, DTYPES};
