//! x86-64 SIMD kernels: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, VNNI).

pub mod avx2;
pub mod avx512;

use crate::kernels::packed::PanelLayout;

/// Prefetches the quants and scales of the K-quant block [`PF_BLOCKS`] ahead of the one at
/// `q` / `sc` (past a panel's last block: the next panel's first quants, and the scale area's
/// tail); the AVX-512 and AVX2 decode-sized tiles call it once per block. Without it the
/// unpacking and the memory stream barely overlap (single-threaded Q4_K 19 GB/s where a plain
/// read of the same panels runs at 33 GB/s; with it 25 GB/s; Q6_K 13.5 -> 21 GB/s).
#[inline(always)]
pub(crate) fn prefetch_k_block(l: &PanelLayout, q: *const u8, sc: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let p = q.wrapping_add(PF_BLOCKS * l.quant_bytes);
    for c in (0..l.quant_bytes).step_by(64) {
        // SAFETY: a prefetch is only a hint (SSE, baseline x86-64): it never faults, whatever
        // the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(c) as *const i8) };
    }
    let p = sc.wrapping_add(PF_BLOCKS * l.scale_bytes);
    for c in (0..l.scale_bytes).step_by(64) {
        // SAFETY: as above.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(c) as *const i8) };
    }
}

/// How many blocks ahead decode-sized K-quant tiles prefetch (2: 4-6 KiB, ~150 ns of the
/// stream).
const PF_BLOCKS: usize = 2;
