//! Compute kernels: quantized block layouts, scalar references and SIMD versions.
//!
//! A leaf module: it depends on nothing else in kiln and on no async or serde crates.
//! Entry points: [`kernels`] / [`kernels_for`] (the dispatch table) and [`isa`].

pub mod blocks;
pub mod ceiling;
pub mod dtype;
pub mod isa;
mod legacy_kind;
pub mod packed;
pub mod scalar;
pub mod shape;
pub mod table;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use dtype::{DType, DTypeInfo, DTYPES};
pub use isa::{isa, Isa, IsaError};
pub use table::{kernels, kernels_for, KernelError, TypeKernels};

#[cfg(test)]
mod tests;
