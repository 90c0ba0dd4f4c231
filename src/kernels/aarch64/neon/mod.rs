//! NEON kernels (using the `sdot` dot-product extension where present).

use crate::kernels::table::Table;

/// Replaces the scalar functions in `t` with the NEON ones this module has.
///
/// # Safety
/// The CPU must support NEON (`isa::supported(Isa::Neon)`).
pub unsafe fn install(t: &mut Table) {
    let _ = t;
}
