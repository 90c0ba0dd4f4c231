//! AVX2 + FMA + F16C kernels.

use crate::kernels::table::Table;

/// Replaces the scalar functions in `t` with the AVX2 ones this module has.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (`isa::supported(Isa::Avx2)`): the installed
/// safe wrappers call `#[target_feature]` functions without re-checking.
pub unsafe fn install(t: &mut Table) {
    let _ = t;
}
