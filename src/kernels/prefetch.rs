//! Software prefetch hints, one place for every architecture: a line to L1 for data a loop reads
//! within the next few hundred instructions (attention's next KV tile), a line to L2 for a
//! stream read further ahead (the weights of a decode GEMV, idle-time warming).
//!
//! Streamed weights go to L2, not L1: an L1 prefetch holds one of the core's few L1 miss
//! buffers until its line arrives from memory, so a stream prefetched far enough ahead to cover
//! memory latency stalls the kernel's own loads behind it, and one prefetched close enough to
//! fit the buffers cannot cover the latency. An L2 prefetch uses L2's larger miss queue; the
//! kernel's loads then hit L2 at a few nanoseconds each, which its out-of-order window hides.
//! Zen 4, one thread, Llama-3.2-1B layers from memory (`examples/gemv_bw`, 2026-11-27, against a
//! 27 GB/s plain read): Q4_K 14.5 -> 20.3 GB/s, Q5_K 10.8 -> 21.2, Q6_K 15.4 -> 21.9, AVX2 Q4_K
//! 14.7 -> 23.4 with L2 prefetches four blocks ahead instead of L1 ones two ahead.
//!
//! Every hint is only a hint: it never faults and never reads architecturally, whatever the
//! address (no bounds are needed), and off x86-64 and AArch64 it does nothing.

/// Starts fetching the cache line holding `p` into L1 (and L2).
#[inline(always)]
pub fn to_l1(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 (SSE, baseline x86-64) is only a hint: it never faults, whatever `p`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is only a hint: it never faults, whatever `p`.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Starts fetching the cache line holding `p` into L2 (not L1).
#[inline(always)]
pub fn to_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT1 (SSE, baseline x86-64) is only a hint: it never faults, whatever `p`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast::<i8>())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is only a hint: it never faults, whatever `p`.
    unsafe {
        std::arch::asm!("prfm pldl2keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// [`to_l1`] for each 64-byte line of the `bytes` at `p` (the first line is `p`'s).
#[inline(always)]
pub fn lines_to_l1(p: *const u8, bytes: usize) {
    for c in (0..bytes).step_by(64) {
        to_l1(p.wrapping_add(c));
    }
}

/// [`to_l2`] for each 64-byte line of the `bytes` at `p` (the first line is `p`'s).
#[inline(always)]
pub fn lines_to_l2(p: *const u8, bytes: usize) {
    for c in (0..bytes).step_by(64) {
        to_l2(p.wrapping_add(c));
    }
}
