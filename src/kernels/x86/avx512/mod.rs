//! AVX-512 (F, BW, VL) kernels using VNNI `vpdpbusd`.

use crate::kernels::table::Table;

/// Replaces functions in `t` (already holding the AVX2 ones) with the AVX-512 VNNI versions.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL plus AVX2/FMA/F16C (`isa::supported(Isa::Avx512)`).
/// The VNNI kernels are only installed when `isa::has_avx512_vnni()`.
pub unsafe fn install(t: &mut Table) {
    let _ = t;
}
