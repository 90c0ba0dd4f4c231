//! The recurrent mixers' kernels, one row per instruction set: Mamba2's selective scan
//! ([`ScanFn`]). Rows start from the scalar twins (`scalar::recurrent`); each ISA's installer
//! replaces what it has a vector version of, bit-identical to the scalar one (the same f32
//! operations in the same order: `kernels::tests::recurrent`).
//!
//! The scan's dot `y[i] = sum_k S[i][k] C[k]` is summed as [`SCAN_LANES`] partial sums (value
//! `k` into lane `k % 16`) combined by halves (lane `j` + lane `j + 8`, then `j + 4`, `j + 2`,
//! `j + 1`), then the last `d_state % 16` values added in order: the order a 16-lane register
//! gives, and two 8-lane or four 4-lane registers give as well.

use std::sync::LazyLock;

use super::isa::{isa, supported, Isa};

/// How many partial sums the scan's dot keeps (value `k` goes to `k % SCAN_LANES`).
pub const SCAN_LANES: usize = 16;

/// One token of one Mamba-2 head's scan (ggml_ssm_scan_f32 with a scalar decay per head): for
/// each row `i` of `state` (`x.len()` rows of `d_state = b.len()` values),
/// `state[i][k] = state[i][k] * da + b[k] * (x[i] * dt_sp)` (two products, one sum, no fused
/// multiply-add) and `y[i] = sum_k state[i][k] * c[k]` in the order of the module doc.
/// Panics when the lengths disagree ([`check_scan`]).
pub type ScanFn =
    fn(state: &mut [f32], x: &[f32], dt_sp: f32, da: f32, b: &[f32], c: &[f32], y: &mut [f32]);

/// The recurrent kernels of one instruction set.
#[derive(Clone, Copy, Debug)]
pub struct RecurrentKernels {
    pub ssm_scan: ScanFn,
}

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

/// Checks a scan's slice lengths: `state` is `x.len() * b.len()`, `c` as long as `b`, `y` as
/// long as `x`. Returns `(rows, d_state)`.
pub fn check_scan(state: &[f32], x: &[f32], b: &[f32], c: &[f32], y: &[f32]) -> (usize, usize) {
    let (rows, ds) = (x.len(), b.len());
    assert!(
        state.len() == rows * ds && c.len() == ds && y.len() == rows,
        "ssm_scan lengths: state {} x {rows} b {ds} c {} y {}",
        state.len(),
        c.len(),
        y.len()
    );
    (rows, ds)
}

fn build(isa: Isa) -> RecurrentKernels {
    let mut r = RecurrentKernels {
        ssm_scan: super::scalar::recurrent::ssm_scan,
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
