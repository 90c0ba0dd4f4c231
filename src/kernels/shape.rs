//! Length checks shared by every kernel's safe entry point.
//!
//! A wrong length is a programming error in the caller (the engine sizes every buffer from
//! the GGUF shapes it validated), so these `assert!` instead of returning errors. They run
//! once per call, outside the hot loops.

use super::DType;

/// Bytes of one row of `n` values of `dt`; panics if `n` is not a whole number of blocks.
#[inline]
pub fn row_bytes(dt: DType, n: usize) -> usize {
    assert!(
        n.is_multiple_of(dt.block_elems()),
        "{n} values is not a whole number of {dt} blocks"
    );
    n / dt.block_elems() * dt.block_bytes()
}

/// Checks a dequantize/quantize pair: `n_vals` values in `bytes` of `dt`.
#[inline]
pub fn check_convert(dt: DType, bytes: usize, n_vals: usize) {
    let need = row_bytes(dt, n_vals);
    assert!(
        bytes >= need,
        "{dt}: {n_vals} values need {need} bytes, got {bytes}"
    );
}

/// Checks a `vec_dot` call: `n` values of `wdt` in `w` and of `adt` in `a`.
#[inline]
pub fn check_vec_dot(n: usize, wdt: DType, w: usize, adt: DType, a: usize) {
    check_convert(wdt, w, n);
    check_convert(adt, a, n);
}

/// Checks a `gemm` call (see `TypeKernels::gemm`); returns (weight row bytes, activation row bytes).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn check_gemm(
    k: usize,
    wdt: DType,
    w: usize,
    n_rows: usize,
    adt: DType,
    a: usize,
    n_tok: usize,
    out: usize,
    out_stride: usize,
) -> (usize, usize) {
    let wr = row_bytes(wdt, k);
    let ar = row_bytes(adt, k);
    if n_rows == 0 || n_tok == 0 {
        return (wr, ar);
    }
    assert!(
        w >= n_rows * wr,
        "gemm: {n_rows} {wdt} rows of {k} need {} bytes, got {w}",
        n_rows * wr
    );
    assert!(
        a >= n_tok * ar,
        "gemm: {n_tok} {adt} rows of {k} need {} bytes, got {a}",
        n_tok * ar
    );
    assert!(
        n_tok == 1 || out_stride >= n_rows,
        "gemm: out_stride {out_stride} < n_rows {n_rows}"
    );
    let need = (n_tok - 1) * out_stride + n_rows;
    assert!(out >= need, "gemm: out needs {need} floats, got {out}");
    (wr, ar)
}
