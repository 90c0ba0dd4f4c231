//! The recurrent mixers' kernels, one row per instruction set: Mamba2's selective scan
//! ([`ScanFn`]) and the Gated DeltaNet's delta rule ([`DeltaFn`]). Rows start from the scalar twins (`scalar::recurrent`); each ISA's installer
//! replaces what it has a vector version of, bit-identical to the scalar one (the same f32
//! operations in the same order: `kernels::tests::recurrent`).
//!
//! The scan's dot `y[i] = sum_k S[i][k] C[k]` (and each of the delta rule's dots) is summed as [`SCAN_LANES`] partial sums (value
//! `k` into lane `k % 16`) combined by halves (lane `j` + lane `j + 8`, then `j + 4`, `j + 2`,
//! `j + 1`), then the last `d_state % 16` values added in order: the order a 16-lane register
//! gives, and two 8-lane or four 4-lane registers give as well.

use std::sync::LazyLock;

use super::isa::{isa, supported, Isa};
pub use super::recurrent_scan::{
    check_delta, check_scan, DeltaFn, RecurrentKernels, ScanFn, SCAN_LANES,
};

static ROWS: LazyLock<[RecurrentKernels; Isa::ALL.len()]> = LazyLock::new(|| Isa::ALL.map(build));

/// The recurrent kernels of the selected ISA ([`isa()`]).
pub fn recurrent() -> &'static RecurrentKernels {
    recurrent_for(isa())
}

/// The recurrent kernels of `isa`: the scalar twins for an ISA this CPU lacks (never an
/// unsafe function pointer).
pub fn recurrent_for(isa: Isa) -> &'static RecurrentKernels {
    &ROWS[isa as usize]
}

fn build(isa: Isa) -> RecurrentKernels {
    let mut r = RecurrentKernels {
        ssm_scan: super::scalar::recurrent::ssm_scan,
        delta_rule: super::scalar::recurrent::delta_rule,
    };
    if supported(isa) {
        install_simd(isa, &mut r);
    }
    r
}

#[cfg(target_arch = "x86_64")]
fn install_simd(isa: Isa, r: &mut RecurrentKernels) {
    use super::x86;
    match isa {
        // SAFETY: `build` calls this only when `supported(isa)`: AVX2 and FMA for both.
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::avx2::recurrent::install(r) },
        // SAFETY: `supported(Avx512)` includes AVX-512 F.
        Isa::Avx512 => unsafe { x86::avx512::recurrent::install(r) },
        Isa::Scalar | Isa::Neon => {}
    }
}

#[cfg(target_arch = "aarch64")]
fn install_simd(isa: Isa, r: &mut RecurrentKernels) {
    if isa == Isa::Neon {
        // SAFETY: `build` calls this only when `supported(Neon)`.
        unsafe { super::aarch64::neon::recurrent::install(r) }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn install_simd(_isa: Isa, _r: &mut RecurrentKernels) {}
