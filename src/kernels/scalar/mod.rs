//! Portable reference kernels: the ground truth every SIMD version is tested against.

pub mod float;
pub mod kquants;
pub mod legacy;
pub mod nonlinear;
pub mod nonlinear_quant;
pub mod packed;
pub mod packed_k;
pub mod recurrent;

use super::shape::check_gemm;
use super::DType;

/// The `gemm` contract computed as one `vec_dot` per (row, token): the reference the tiled
/// SIMD versions are tested against, and the fallback for types without a tiled kernel.
#[allow(clippy::too_many_arguments)]
pub fn gemm_by_vec_dot(
    vec_dot: fn(usize, &[u8], &[u8]) -> f32,
    wdt: DType,
    adt: DType,
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let (wr, ar) = check_gemm(
        k,
        wdt,
        w.len(),
        n_rows,
        adt,
        a.len(),
        n_tok,
        out.len(),
        out_stride,
    );
    for t in 0..n_tok {
        let at = &a[t * ar..(t + 1) * ar];
        for r in 0..n_rows {
            out[t * out_stride + r] = vec_dot(k, &w[r * wr..(r + 1) * wr], at);
        }
    }
}
