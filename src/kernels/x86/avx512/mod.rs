//! AVX-512 (F, BW, VL) kernels using VNNI `vpdpbusd`.

pub mod float;
mod ggml_order;
pub mod kquants;
mod lanes;
pub mod legacy;
pub mod nonlinear;
mod nonlinear_panel;
mod packed;
pub(crate) mod packed_k;
pub mod recurrent;

use crate::kernels::row::{PackedKernels, Table};
use crate::kernels::DType;

macro_rules! install_fns {
    ($t:ident, $($dt:ident: $vd:ident, $gm:ident;)*) => {
        install_fns!($t, legacy, $($dt: $vd, $gm;)*);
    };
    ($t:ident, $m:ident, $($dt:ident: $vd:ident, $gm:ident;)*) => {$(
        {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: only installed by `install`, whose caller verified the CPU features.
                unsafe { $m::$vd(n, w, a) }
            }
            fn gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                // SAFETY: only installed by `install`, whose caller verified the CPU features.
                unsafe { $m::$gm(k, w, n_rows, a, n_tok, out, os) }
            }
            if let Some(row) = $t[DType::$dt as usize].as_mut() {
                row.vec_dot = vd;
                row.gemm = gm;
            }
        }
    )*};
}

/// The float rows' six-token `gemm` ([`float`]); their `vec_dot` stays the AVX2 one, which
/// every cell of it equals bit for bit.
fn install_float_gemms(t: &mut Table) {
    macro_rules! gemms {
        ($($dt:ident: $gm:ident;)*) => {$(
            {
                fn gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                    // SAFETY: only installed by `install`, whose caller verified AVX-512 F/VL
                    // with AVX2, FMA and F16C.
                    unsafe { float::$gm(k, w, n_rows, a, n_tok, out, os) }
                }
                if let Some(row) = t[DType::$dt as usize].as_mut() {
                    row.gemm = gm;
                }
            }
        )*};
    }
    gemms! {
        F32: gemm_f32;
        F16: gemm_f16;
        BF16: gemm_bf16;
    }
}

/// Replaces functions in `t` (already holding the AVX2 ones) with the AVX-512 VNNI versions
/// when the CPU has VNNI; without VNNI the AVX2 kernels stay.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL plus AVX2/FMA/F16C (`isa::supported(Isa::Avx512)`).
pub unsafe fn install(t: &mut Table) {
    // SAFETY: this function's own contract (the CPU has this module's features); the
    // K-quant kernels have AVX-512 BW versions for CPUs without VNNI.
    unsafe { kquants::install(t) };
    // SAFETY: as above; it checks VNNI itself.
    unsafe { packed_k::install(t) };
    install_float_gemms(t);
    if !crate::kernels::isa::has_avx512_vnni() {
        return;
    }
    install_fns! { t,
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
    macro_rules! install_packed {
        ($($dt:ident),*) => {$(
            {
                fn gp(k: usize, p: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: crate::kernels::cells::OutCells<'_>, os: usize) {
                    // SAFETY: only installed by `install`, whose caller verified the CPU features.
                    unsafe { packed::gemm_packed::<{ crate::kernels::legacy_kind::$dt }>(k, p, n_rows, a, n_tok, out, os) }
                }
                if let Some(row) = t[DType::$dt as usize].as_mut() {
                    row.packed = Some(PackedKernels { gemm: gp });
                }
            }
        )*};
    }
    install_packed!(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
    fn q8_0(x: &[f32], y: &mut [u8]) {
        // SAFETY: only installed by `install`, whose caller verified the CPU features.
        unsafe { legacy::quantize_q8_0(x, y) }
    }
    fn q8_1(x: &[f32], y: &mut [u8]) {
        // SAFETY: only installed by `install`, whose caller verified the CPU features.
        unsafe { legacy::quantize_q8_1(x, y) }
    }
    if let Some(row) = t[DType::Q8_0 as usize].as_mut() {
        row.from_f32 = Some(q8_0);
    }
    if let Some(row) = t[DType::Q8_1 as usize].as_mut() {
        row.from_f32 = Some(q8_1);
    }
}
