//! x86-64 SIMD kernels: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, VNNI).

pub mod avx2;
pub mod avx512;
