//! Per-(token, block) activation terms of the 32-value kinds' block-sum tiles (Q4_0 and
//! Q5_1 on x86: one exact i32 sum per block, one convert + fma): the activation scale `d_a`,
//! Q8_1's `s_a`, and the exact integer correction `-offset * sum(a)` for weights stored
//! unsigned. Computed once per token group ([`crate::kernels::packed::driver`]), read by every panel.

use super::driver::GroupTerms;
use crate::kernels::legacy_kind::{adt, has_min};

/// Terms of up to `N` (token, block) entries, for weight kind `T` (a `legacy_kind` constant)
/// whose stored weights are `q + offset`.
pub(crate) struct BlockTerms<const N: usize> {
    pub d: [f32; N],
    pub s: [f32; N],
    pub start: [i32; N],
    /// Activation block bytes; where its quants start; the weights' offset; whether it is
    /// Q8_1 (an `s` to read).
    ab: usize,
    qo: usize,
    offset: i32,
    min: bool,
}

impl<const N: usize> BlockTerms<N> {
    /// Zeroed terms for weight kind `t` with stored weights `q + offset` (`start` stays 0
    /// when `offset` is 0).
    #[inline(always)]
    pub fn new(t: u8, offset: i32) -> Self {
        let min = has_min(t);
        BlockTerms {
            d: [0.0; N],
            s: [0.0; N],
            start: [0; N],
            ab: adt(t).block_bytes(),
            qo: if min { 4 } else { 2 },
            offset,
            min,
        }
    }
}

impl<const N: usize> GroupTerms for BlockTerms<N> {
    #[inline(always)]
    fn capacity(&self, nb: usize) -> usize {
        N / nb
    }

    /// # Safety
    /// [`GroupTerms::fill`]'s contract.
    #[inline(always)]
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize) {
        assert!(n * nb <= N, "block terms of {N} entries");
        for t in 0..n {
            for b in 0..nb {
                // SAFETY: token t < n, block b < nb: `ab` bytes inside row t (caller contract).
                let blk =
                    unsafe { std::slice::from_raw_parts(a.add(t * ar + b * self.ab), self.ab) };
                let e = t * nb + b;
                let f16 = |at: usize| half::f16::from_le_bytes([blk[at], blk[at + 1]]).to_f32();
                self.d[e] = f16(0);
                if self.min {
                    self.s[e] = f16(2);
                }
                if self.offset != 0 {
                    let q = &blk[self.qo..self.qo + 32];
                    let sum: i32 = q.iter().map(|&x| x as i8 as i32).sum();
                    self.start[e] = -self.offset * sum;
                }
            }
        }
    }
}
