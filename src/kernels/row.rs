//! The types of the dispatch table's rows: kernel function signatures, [`TypeKernels`] and
//! [`Table`]. Their own file so the per-ISA installers (`x86::*`, `aarch64::neon`), which fill
//! rows, and `table.rs`, which calls the installers, do not import each other.

use super::{DType, DTYPES};

/// Dequantize `dst.len()` values (a whole number of blocks) from `src`.
pub type ToF32Fn = fn(src: &[u8], dst: &mut [f32]);
/// Quantize `src.len()` values (a whole number of blocks) into `dst`.
pub type FromF32Fn = fn(src: &[f32], dst: &mut [u8]);
/// Dot product of `n` values: weights in `dtype`, activations in `vec_dot_type`.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;
/// `out[t * out_stride + r] = dot(w row r, a row t)`; see [`TypeKernels::gemm`].
pub type GemmFn = fn(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
);

/// `out[t * out_stride + r] = dot(row r, activation row t)` over weights repacked into panels
/// ([`super::packed`]): `packed` starts at a panel (64-byte aligned) and holds the panels of
/// rows `0..n_rows`; otherwise the [`GemmFn`] contract. `out` is an extent of cells
/// ([`super::cells::OutCells`]) of which it writes only those cells, so a team's threads can
/// write their row ranges of the same token rows side by side.
pub type PackedGemmFn = fn(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: super::cells::OutCells<'_>,
    out_stride: usize,
);

/// The panel-layout GEMM of an ISA that has one for a dtype. Its results are bit-identical to
/// the same row's [`TypeKernels::gemm`] on that ISA, so using it is invisible in the output.
#[derive(Clone, Copy, Debug)]
pub struct PackedKernels {
    pub gemm: PackedGemmFn,
}

/// Everything kiln can do with one weight dtype on one instruction set.
///
/// All slices are bytes in the GGUF row layout. Lengths are checked with `assert!`
/// (a wrong length is a caller bug); no function allocates.
#[derive(Clone, Copy, Debug)]
pub struct TypeKernels {
    pub dtype: DType,
    /// Activation format `vec_dot`/`gemm` take: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
    /// Q4_1/Q5_1/Q8_1, Q8_K for K-quants, F32 for F32/F16/BF16 weights.
    pub vec_dot_type: DType,
    /// Dequantize `dst.len()` values (a whole number of blocks) from `src`.
    pub to_f32: ToF32Fn,
    /// Quantize `src.len()` values into `dst` (reference rounding, as ggml's `_ref`
    /// quantizers; used for weights and, for the Q8 types, activations). `None` if kiln
    /// can't produce this type.
    pub from_f32: Option<FromF32Fn>,
    /// Dot product of `n` values: `w` in `dtype`, `a` in `vec_dot_type`.
    pub vec_dot: VecDotFn,
    /// `out[t * out_stride + r] = dot(w row r, a row t)` for `r < n_rows`, `t < n_tok`.
    /// Rows are `k` values long; `w` rows are `dtype` row-bytes apart, `a` rows
    /// `vec_dot_type` row-bytes apart. Register-tiled where the ISA allows (each weight
    /// block is loaded once per tile of tokens). Only the listed `out` cells are written.
    pub gemm: GemmFn,
    /// A GEMM over weights repacked at load ([`super::packed::pack`]), where this ISA has one
    /// (AVX2, AVX-VNNI, AVX-512 VNNI, and NEON with dotprod: Q4_0, Q4_1, Q8_0; AVX-512 VNNI
    /// and AVX2: Q4_K, Q5_K, Q6_K; AVX-512 VNNI: Q5_0, Q5_1); `None` means multiply the GGUF
    /// rows with `gemm`.
    pub packed: Option<PackedKernels>,
}

/// One row per dtype, indexed by `DType as usize`.
pub type Table = [Option<TypeKernels>; DTYPES.len()];
