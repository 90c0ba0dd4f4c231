//! Kernel tests: accuracy against f32 (llama.cpp's test-quantize-fns limits), SIMD == scalar,
//! gemm == loop of vec_dot. Every ISA this CPU supports is exercised via `kernels_for`,
//! whatever `KILN_ISA` says.

mod accuracy;
mod kquants;
mod packed;
mod packed_k;
mod simd;
mod util;
