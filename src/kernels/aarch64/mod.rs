//! aarch64 SIMD kernels.

pub mod neon;
