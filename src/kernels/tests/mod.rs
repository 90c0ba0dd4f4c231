//! Kernel tests: accuracy against f32 (llama.cpp's test-quantize-fns limits), SIMD == scalar,
//! gemm == loop of vec_dot. Every ISA this CPU supports is exercised via `kernels_for`,
//! whatever `KILN_ISA` says.

mod accuracy;
mod kquants;
#[cfg(target_arch = "aarch64")]
mod kquants_neon;
mod nonlinear;
mod packed;
mod packed_k;
#[cfg(target_arch = "aarch64")]
mod packed_neon;
mod recurrent;
mod simd;
mod util;
