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
    use std::arch::x86_64::*;
    use std::sync::atomic::Ordering::Relaxed;
    let d = PF_KNOB[0].load(Relaxed);
    let hint = PF_KNOB[1].load(Relaxed);
    let p = q.wrapping_add(d * l.quant_bytes);
    let s = sc.wrapping_add(d * l.scale_bytes);
    macro_rules! go {
        ($h:ident) => {{
            for c in (0..l.quant_bytes).step_by(64) {
                unsafe { _mm_prefetch::<$h>(p.wrapping_add(c) as *const i8) };
            }
            for c in (0..l.scale_bytes).step_by(64) {
                unsafe { _mm_prefetch::<$h>(s.wrapping_add(c) as *const i8) };
            }
        }};
    }
    match hint {
        0 => go!(_MM_HINT_T0),
        1 => go!(_MM_HINT_T1),
        2 => go!(_MM_HINT_T2),
        3 => go!(_MM_HINT_NTA),
        _ => {}
    }
}

/// TEMPORARY experiment knob: [blocks ahead, hint].
#[doc(hidden)]
pub static PF_KNOB: [std::sync::atomic::AtomicUsize; 3] = [
    std::sync::atomic::AtomicUsize::new(PF_BLOCKS),
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// TEMPORARY: the spread-prefetch pointer for the block at `q` (null unless knob 2 is 1),
/// after prefetching the scale lines in a burst.
#[inline(always)]
pub(crate) fn spread_pf(l: &PanelLayout, q: *const u8, sc: *const u8) -> *const u8 {
    use std::arch::x86_64::*;
    use std::sync::atomic::Ordering::Relaxed;
    if PF_KNOB[2].load(Relaxed) != 1 {
        prefetch_k_block(l, q, sc);
        return std::ptr::null();
    }
    let d = PF_KNOB[0].load(Relaxed);
    let s = sc.wrapping_add(d * l.scale_bytes);
    for c in (0..l.scale_bytes).step_by(64) {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(c) as *const i8) };
    }
    q.wrapping_add(d * l.quant_bytes)
}

/// TEMPORARY: prefetch line `c` of `pf` unless null.
#[inline(always)]
pub(crate) fn pf_line(pf: *const u8, c: usize) {
    use std::arch::x86_64::*;
    if !pf.is_null() {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64 * c) as *const i8) };
    }
}

/// How many blocks ahead decode-sized K-quant tiles prefetch (2: 4-6 KiB, ~150 ns of the
/// stream).
const PF_BLOCKS: usize = 2;
