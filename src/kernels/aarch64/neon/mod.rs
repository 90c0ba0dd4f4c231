//! NEON kernels.

mod asm;
pub mod kquants;
pub mod legacy;
pub mod nonlinear;
pub(crate) mod packed;
mod packed_k;
pub mod recurrent;

use crate::kernels::cells::OutCells;
use crate::kernels::legacy_kind::{Q4_0, Q4_1, Q8_0};
use crate::kernels::row::{PackedGemmFn, PackedKernels, Table};
use crate::kernels::DType;

/// Whether the CPU has the dot-product extension (`sdot`), which the panel GEMMs need.
pub fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// Whether the CPU has the int8 matrix-multiply extension (`smmla`) on top of dotprod.
pub fn has_i8mm() -> bool {
    has_dotprod() && std::arch::is_aarch64_feature_detected!("i8mm")
}

/// A safe packed GEMM `$name` calling `$gemm`, whose CPU features the code that hands `$name`
/// out has detected (`packed_gemms`, `install_packed`).
macro_rules! packed_fn {
    ($name:ident, $($gemm:tt)+) => {
        fn $name(k: usize, p: &[u8], n: usize, a: &[u8], nt: usize, o: OutCells<'_>, os: usize) {
            // SAFETY: only handed out by `packed_gemms` / `install_packed` after they detected
            // the features `$gemm` needs (dotprod; i8mm too for `gemm_i8mm`).
            unsafe { $($gemm)+(k, p, n, a, nt, o, os) }
        }
    };
}
packed_fn!(q4_0_dotprod, packed::gemm_dotprod::<Q4_0>);
packed_fn!(q4_1_dotprod, packed::gemm_dotprod::<Q4_1>);
packed_fn!(q8_0_dotprod, packed::gemm_dotprod::<Q8_0>);
packed_fn!(q4_0_i8mm, packed::gemm_i8mm::<Q4_0>);
packed_fn!(q8_0_i8mm, packed::gemm_i8mm::<Q8_0>);

/// The panel GEMMs for Q4_0, Q4_1 and Q8_0 this CPU can run (`smmla` where it has i8mm, else
/// `sdot`; Q4_1 and Q8_0, in llama.cpp's order, always `sdot`), or `None` without dotprod (the row kernels then serve the
/// GGUF layout).
pub fn packed_gemms() -> Option<[(DType, PackedGemmFn); 3]> {
    let q4_1 = (DType::Q4_1, q4_1_dotprod as PackedGemmFn);
    if has_i8mm() {
        Some([(DType::Q4_0, q4_0_i8mm), q4_1, (DType::Q8_0, q8_0_i8mm)])
    } else if has_dotprod() {
        Some([
            (DType::Q4_0, q4_0_dotprod),
            q4_1,
            (DType::Q8_0, q8_0_dotprod),
        ])
    } else {
        None
    }
}

packed_fn!(q4_k_dotprod, packed_k::gemm_q4_k_dotprod);

/// Installs [`packed_gemms`] as the `packed` kernels of their rows, and with dotprod the Q4_K
/// `sdot` panel GEMM.
fn install_packed(t: &mut Table) {
    for (dt, gemm) in packed_gemms().into_iter().flatten() {
        if let Some(row) = t[dt as usize].as_mut() {
            row.packed = Some(PackedKernels { gemm });
        }
    }
    if has_dotprod() {
        if let Some(row) = t[DType::Q4_K as usize].as_mut() {
            row.packed = Some(PackedKernels { gemm: q4_k_dotprod });
        }
    }
}

macro_rules! install_fns {
    ($t:ident, $($dt:ident: $vd:ident, $gm:ident;)*) => {
        install_fns!($t, legacy, $($dt: $vd, $gm;)*);
    };
    ($t:ident, $m:ident, $($dt:ident: $vd:ident, $gm:ident;)*) => {$(
        {
            fn vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: only installed by `install`, whose caller verified NEON.
                unsafe { $m::$vd(n, w, a) }
            }
            fn gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
                // SAFETY: only installed by `install`, whose caller verified NEON.
                unsafe { $m::$gm(k, w, n_rows, a, n_tok, out, os) }
            }
            if let Some(row) = $t[DType::$dt as usize].as_mut() {
                row.vec_dot = vd;
                row.gemm = gm;
            }
        }
    )*};
}

/// Replaces the scalar functions in `t` with the NEON ones this module has.
///
/// # Safety
/// The CPU must support NEON (`isa::supported(Isa::Neon)`): the installed
/// safe wrappers call `#[target_feature]` functions without re-checking.
pub unsafe fn install(t: &mut Table) {
    // SAFETY: this function's own contract (the CPU has this module's features).
    unsafe { kquants::install(t) };
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
    install_packed(t);
}
