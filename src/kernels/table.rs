//! The dispatch table: one row of kernels per dtype and instruction set.
//!
//! Rows start from the scalar reference; each ISA's `install` then replaces the functions
//! it has a faster version of ("falls back to scalar per fn"). SIMD functions are only
//! installed for an ISA this CPU supports, so every function pointer in a row is safe to call.

use std::sync::LazyLock;

use super::isa::{isa, supported, Isa};
pub use super::row::{
    FromF32Fn, GemmFn, PackedGemmFn, PackedKernels, Table, ToF32Fn, TypeKernels, VecDotFn,
};
use super::scalar::{float, legacy};
use super::{DType, DTYPES};

/// A dtype kiln has no kernels for (on any ISA).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("kiln has no compute kernels for {0} tensors")]
    NoKernels(DType),
}

static TABLES: LazyLock<[Table; Isa::ALL.len()]> = LazyLock::new(|| Isa::ALL.map(build));

/// The kernels for `dtype` on the selected ISA ([`isa()`]).
pub fn kernels(dtype: DType) -> Result<&'static TypeKernels, KernelError> {
    kernels_for(dtype, isa())
}

/// The kernels for `dtype` on `isa`. An ISA this CPU does not support yields the scalar
/// kernels (never an unsafe function pointer); functions an ISA has no version of are scalar.
pub fn kernels_for(dtype: DType, isa: Isa) -> Result<&'static TypeKernels, KernelError> {
    TABLES[isa as usize][dtype as usize]
        .as_ref()
        .ok_or(KernelError::NoKernels(dtype))
}

fn build(isa: Isa) -> Table {
    let mut t: Table = [None; DTYPES.len()];
    for info in DTYPES {
        t[info.dtype as usize] = scalar_row(info.dtype);
    }
    if supported(isa) {
        install_simd(isa, &mut t);
    }
    t
}

#[cfg(target_arch = "x86_64")]
fn install_simd(isa: Isa, t: &mut Table) {
    use super::x86;
    match isa {
        // SAFETY: `build` only calls this when `supported(Avx2)`: AVX2, FMA and F16C are present.
        Isa::Avx2 => unsafe { x86::avx2::install(t) },
        // SAFETY: `supported(AvxVnni)` is the AVX2 set plus AVX-VNNI.
        Isa::AvxVnni => unsafe {
            x86::avx2::install(t);
            x86::avx2::install_vnni(t);
        },
        Isa::Avx512 => {
            // SAFETY: `supported(Avx512)` implies the AVX2 set (see `isa::has_avx512`), and
            // the AVX-512 F/BW/VL kernels are installed only after that check.
            unsafe {
                x86::avx2::install(t);
                x86::avx512::install(t);
            }
        }
        Isa::Scalar | Isa::Neon => {}
    }
}

#[cfg(target_arch = "aarch64")]
fn install_simd(isa: Isa, t: &mut Table) {
    if isa == Isa::Neon {
        // SAFETY: `build` only calls this when `supported(Neon)`.
        unsafe { super::aarch64::neon::install(t) }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn install_simd(_isa: Isa, _t: &mut Table) {}

/// The scalar row of dtype `d` (the reference every ISA's `install` starts from), `None` for
/// a dtype without kernels. One line a dtype: the dtype, its activation dtype, and the
/// module's dequantizer, quantizer, `vec_dot` and `gemm`.
fn scalar_row(d: DType) -> Option<TypeKernels> {
    use super::scalar::kquants as k;
    if let Some(row) = nonlinear_row(d) {
        return Some(row);
    }
    macro_rules! rows {
        ($($dt:ident / $act:ident: $m:ident::{$to:ident, $from:ident, $vd:ident, $gm:ident};)*) => {
            match d {
                $(DType::$dt => Some(TypeKernels {
                    dtype: DType::$dt,
                    vec_dot_type: DType::$act,
                    to_f32: $m::$to,
                    from_f32: Some($m::$from),
                    vec_dot: $m::$vd,
                    gemm: $m::$gm,
                    packed: None,
                }),)*
                #[allow(unreachable_patterns)] // every dtype has kernels today
                _ => None,
            }
        };
    }
    rows! {
        // Legacy and float rows [kern-legacy].
        F32 / F32: float::{dequantize_f32, quantize_f32, vec_dot_f32, gemm_f32};
        F16 / F32: float::{dequantize_f16, quantize_f16, vec_dot_f16, gemm_f16};
        BF16 / F32: float::{dequantize_bf16, quantize_bf16, vec_dot_bf16, gemm_bf16};
        Q4_0 / Q8_0: legacy::{dequantize_q4_0, quantize_q4_0, vec_dot_q4_0, gemm_q4_0};
        Q4_1 / Q8_1: legacy::{dequantize_q4_1, quantize_q4_1, vec_dot_q4_1, gemm_q4_1};
        Q5_0 / Q8_0: legacy::{dequantize_q5_0, quantize_q5_0, vec_dot_q5_0, gemm_q5_0};
        Q5_1 / Q8_1: legacy::{dequantize_q5_1, quantize_q5_1, vec_dot_q5_1, gemm_q5_1};
        Q8_0 / Q8_0: legacy::{dequantize_q8_0, quantize_q8_0, vec_dot_q8_0, gemm_q8_0};
        Q8_1 / Q8_1: legacy::{dequantize_q8_1, quantize_q8_1, vec_dot_q8_1, gemm_q8_1};
        // K-quant rows [kern-k]: Q2_K..Q6_K and Q8_K, all taking Q8_K activations; the SIMD
        // versions are installed by `kquants::install` from `x86::avx2`, `x86::avx512` and
        // `aarch64::neon`. Q8_K's quantizer is bit-exact with ggml's `quantize_row_q8_K_ref`;
        // the Q2_K..Q6_K weight quantizers are kiln's own (same format, error within
        // test-quantize-fns' limits).
        Q2_K / Q8_K: k::{dequantize_row_q2_k, quantize_row_q2_k, vec_dot_q2_k_q8_k, gemm_q2_k_q8_k};
        Q3_K / Q8_K: k::{dequantize_row_q3_k, quantize_row_q3_k, vec_dot_q3_k_q8_k, gemm_q3_k_q8_k};
        Q4_K / Q8_K: k::{dequantize_row_q4_k, quantize_row_q4_k, vec_dot_q4_k_q8_k, gemm_q4_k_q8_k};
        Q5_K / Q8_K: k::{dequantize_row_q5_k, quantize_row_q5_k, vec_dot_q5_k_q8_k, gemm_q5_k_q8_k};
        Q6_K / Q8_K: k::{dequantize_row_q6_k, quantize_row_q6_k, vec_dot_q6_k_q8_k, gemm_q6_k_q8_k};
        Q8_K / Q8_K: k::{dequantize_row_q8_k, quantize_row_q8_k, vec_dot_q8_k_q8_k, gemm_q8_k_q8_k};
    }
}

/// The scalar rows of the 4-bit non-linear formats: IQ4_NL and MXFP4 take Q8_0
/// activations, IQ4_XS Q8_K (ggml's pairings). The quantizers are kiln's own
/// (`scalar::nonlinear_quant`). SIMD versions: `x86::avx2`, `x86::avx512`, `aarch64::neon`.
fn nonlinear_row(d: DType) -> Option<TypeKernels> {
    use super::scalar::nonlinear as nl;
    use super::scalar::nonlinear_quant as nq;
    type Row = (DType, ToF32Fn, FromF32Fn, VecDotFn, GemmFn);
    let (vec_dot_type, to_f32, from_f32, vec_dot, gemm): Row = match d {
        DType::IQ4_NL => (
            DType::Q8_0,
            nl::dequantize_iq4_nl,
            nq::quantize_iq4_nl,
            nl::vec_dot_iq4_nl,
            nl::gemm_iq4_nl,
        ),
        DType::IQ4_XS => (
            DType::Q8_K,
            nl::dequantize_iq4_xs,
            nq::quantize_iq4_xs,
            nl::vec_dot_iq4_xs,
            nl::gemm_iq4_xs,
        ),
        DType::MXFP4 => (
            DType::Q8_0,
            nl::dequantize_mxfp4,
            nq::quantize_mxfp4,
            nl::vec_dot_mxfp4,
            nl::gemm_mxfp4,
        ),
        _ => return None,
    };
    Some(TypeKernels {
        dtype: d,
        vec_dot_type,
        to_f32,
        from_f32: Some(from_f32),
        vec_dot,
        gemm,
        packed: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_their_dtype() {
        for i in Isa::ALL {
            for info in DTYPES {
                if let Ok(k) = kernels_for(info.dtype, i) {
                    assert_eq!(k.dtype, info.dtype);
                }
            }
        }
        assert!(kernels(DType::Q4_1).is_ok());
        assert_eq!(
            kernels_for(DType::Q4_1, Isa::Scalar).unwrap().vec_dot_type,
            DType::Q8_1
        );
    }
}
