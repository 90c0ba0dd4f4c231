//! NEON kernels (using the `sdot` dot-product extension where present).

pub mod kquants;

use crate::kernels::table::Table;

/// Replaces the scalar functions in `t` with the NEON ones this module has.
///
/// # Safety
/// The CPU must support NEON (`isa::supported(Isa::Neon)`).
pub unsafe fn install(t: &mut Table) {
    // SAFETY: this function's own contract (the CPU has this module's features).
    unsafe { kquants::install(t) };
}
