//! AVX2 + FMA + F16C kernels.

pub mod float;
pub mod kquants;
pub mod legacy;
pub mod nonlinear;
mod packed;
pub(crate) mod packed_k;
mod quant;
pub mod recurrent;

use crate::kernels::row::{PackedKernels, Table};
use crate::kernels::DType;

macro_rules! install_fns {
    ($t:ident, $m:ident, $($dt:ident: $vd:ident, $gm:ident;)*) => {$(
        {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: only installed by `install`, whose caller verified AVX2/FMA/F16C.
                unsafe { $m::$vd(n, w, a) }
            }
            fn gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                // SAFETY: only installed by `install`, whose caller verified AVX2/FMA/F16C.
                unsafe { $m::$gm(k, w, n_rows, a, n_tok, out, os) }
            }
            if let Some(row) = $t[DType::$dt as usize].as_mut() {
                row.vec_dot = vd;
                row.gemm = gm;
            }
        }
    )*};
}

/// Replaces the scalar functions in `t` with the AVX2 ones this module has.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (`isa::supported(Isa::Avx2)`): the installed
/// safe wrappers call `#[target_feature]` functions without re-checking.
pub unsafe fn install(t: &mut Table) {
    // SAFETY: this function's own contract (the CPU has this module's features).
    unsafe { kquants::install(t) };
    // SAFETY: as above.
    unsafe { packed_k::install(t) };
    install_fns! { t, float,
        F32: vec_dot_f32, gemm_f32;
        F16: vec_dot_f16, gemm_f16;
        BF16: vec_dot_bf16, gemm_bf16;
    }
    install_fns! { t, legacy,
        Q4_0: vec_dot_q4_0, gemm_q4_0;
        Q4_1: vec_dot_q4_1, gemm_q4_1;
        Q5_0: vec_dot_q5_0, gemm_q5_0;
        Q5_1: vec_dot_q5_1, gemm_q5_1;
        Q8_0: vec_dot_q8_0, gemm_q8_0;
    }
    install_fns! { t, nonlinear,
        IQ4_NL: vec_dot_iq4_nl, gemm_iq4_nl;
        MXFP4: vec_dot_mxfp4, gemm_mxfp4;
        IQ4_XS: vec_dot_iq4_xs, gemm_iq4_xs;
    }
    install_packed! { t, gemm_packed, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 }
    fn q8_0(x: &[f32], y: &mut [u8]) {
        // SAFETY: only installed by `install`, whose caller verified AVX2/FMA/F16C.
        unsafe { quant::quantize_q8_0(x, y) }
    }
    fn q8_1(x: &[f32], y: &mut [u8]) {
        // SAFETY: only installed by `install`, whose caller verified AVX2/FMA/F16C.
        unsafe { quant::quantize_q8_1(x, y) }
    }
    if let Some(row) = t[DType::Q8_0 as usize].as_mut() {
        row.from_f32 = Some(q8_0);
    }
    if let Some(row) = t[DType::Q8_1 as usize].as_mut() {
        row.from_f32 = Some(q8_1);
    }
}

/// Installs the panel GEMMs as [`packed`] kernels: `$f` one of its entry points.
macro_rules! install_packed {
    ($t:ident, $f:ident, $($dt:ident),*) => {$(
        {
            fn gp(k: usize, p: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: crate::kernels::cells::OutCells<'_>, os: usize) {
                // SAFETY: only installed by `install` / `install_vnni`, whose callers verified
                // the CPU features `$f` needs.
                unsafe { packed::$f::<{ crate::kernels::legacy_kind::$dt }>(k, p, n_rows, a, n_tok, out, os) }
            }
            if let Some(row) = $t[DType::$dt as usize].as_mut() {
                row.packed = Some(PackedKernels { gemm: gp });
            }
        }
    )*};
}
use install_packed;

/// Replaces the panel GEMMs of [`install`] with their AVX-VNNI versions (same results).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI (`isa::supported(Isa::AvxVnni)`).
pub unsafe fn install_vnni(t: &mut Table) {
    install_packed! { t, gemm_packed_vnni, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 }
}
