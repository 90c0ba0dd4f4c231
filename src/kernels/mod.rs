//! Compute kernels: quantized block layouts, scalar references and SIMD versions.
//!
//! It depends on nothing else in kiln but the element-type table ([`crate::gguf::dtype`],
//! re-exported here) and on no async or serde crates.
//! Entry points: [`kernels`] / [`kernels_for`] (the dispatch table) and [`isa`](fn@isa).

pub mod blocks;
pub mod ceiling;
pub mod cells;
pub mod isa;
mod legacy_kind;
pub mod packed;
pub mod prefetch;
pub mod recurrent;
pub mod recurrent_scan;
pub mod row;
pub mod scalar;
pub mod shape;
pub mod table;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
#[cfg(target_arch = "x86_64")]
pub mod x86;

// The element types belong to the file format; kernel code names them through here.
pub use crate::gguf::dtype::{DType, DTypeInfo, DTYPES};
pub use isa::{isa, Isa, IsaError};
pub use table::{kernels, kernels_for, KernelError, TypeKernels};

#[cfg(test)]
mod tests;
