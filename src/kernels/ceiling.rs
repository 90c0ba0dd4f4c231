//! Loops that measure this machine's ceilings (`kiln bench --ceilings`): how fast one thread
//! reads memory, and how many int8 multiply-adds per second the selected instruction set's
//! dot-product instruction sustains. Speed figures are stated as shares of these.
//!
//! No kernel uses this: it is a measurement tool, so it has no scalar twin.

use super::isa::Isa;

/// Sums `buf` as u64 words (the caller times it: bytes read / seconds = bandwidth). The sum
/// keeps the loads from being optimized away.
pub fn read_sum(buf: &[u64]) -> u64 {
    // Eight independent sums let the loads run ahead of the adds.
    let mut s = [0u64; 8];
    let mut chunks = buf.chunks_exact(8);
    for c in &mut chunks {
        for i in 0..8 {
            s[i] = s[i].wrapping_add(c[i]);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |a, &x| a.wrapping_add(x));
    s.iter().fold(tail, |a, &x| a.wrapping_add(x))
}

/// Runs `iters` rounds of the int8 dot-product instruction of `isa` on 12 independent register
/// accumulators; returns the multiply-adds done (0 when `isa` has no such instruction on this
/// CPU, e.g. scalar) and a checksum the caller should consume.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub fn int8_macs(isa: Isa, iters: usize) -> (u64, i64) {
    if !super::isa::supported(isa) {
        return (0, 0);
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported(Avx512)` checked above; VNNI is checked inside.
        Isa::Avx512 if super::isa::has_avx512_vnni() => unsafe { x86::vnni512(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported(AvxVnni)` checked above.
        Isa::AvxVnni => unsafe { x86::vnni256(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported(Avx2)` checked above (the AVX-512 set implies it).
        Isa::Avx2 | Isa::Avx512 => unsafe { x86::maddubs256(iters) },
        _ => (0, 0),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    const ACC: usize = 12;

    /// # Safety
    /// CPU with AVX-512 F/BW and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn vnni512(iters: usize) -> (u64, i64) {
        let w = std::hint::black_box(_mm512_set1_epi8(3));
        let x = _mm512_set1_epi8(-2);
        let mut acc = [_mm512_setzero_si512(); ACC];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_dpbusd_epi32(*a, w, x);
            }
        }
        let s = acc
            .iter()
            .fold(0i64, |t, a| t + _mm512_reduce_add_epi32(*a) as i64);
        ((iters * ACC * 64) as u64, s)
    }

    /// # Safety
    /// CPU with AVX2 and AVX-VNNI.
    #[target_feature(enable = "avx2,avxvnni")]
    pub unsafe fn vnni256(iters: usize) -> (u64, i64) {
        let w = std::hint::black_box(_mm256_set1_epi8(3));
        let x = _mm256_set1_epi8(-2);
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_dpbusd_avx_epi32(*a, w, x);
            }
        }
        let s = acc.iter().fold(0i64, |t, a| {
            let mut v = [0i32; 8];
            // SAFETY: `v` is 8 i32, the 32 bytes the store writes.
            unsafe { _mm256_storeu_si256(v.as_mut_ptr() as *mut __m256i, *a) };
            t + v.iter().map(|&x| x as i64).sum::<i64>()
        });
        ((iters * ACC * 32) as u64, s)
    }

    /// `vpmaddubsw` + `vpmaddwd` (the AVX2 int8 dot product): 32 multiply-adds per pair.
    ///
    /// # Safety
    /// CPU with AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn maddubs256(iters: usize) -> (u64, i64) {
        let w = std::hint::black_box(_mm256_set1_epi8(3));
        let x = _mm256_set1_epi8(-2);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
                *a = _mm256_add_epi32(*a, p);
            }
        }
        let s = acc.iter().fold(0i64, |t, a| {
            let mut v = [0i32; 8];
            // SAFETY: `v` is 8 i32, the 32 bytes the store writes.
            unsafe { _mm256_storeu_si256(v.as_mut_ptr() as *mut __m256i, *a) };
            t + v.iter().map(|&x| x as i64).sum::<i64>()
        });
        ((iters * ACC * 32) as u64, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_count_what_they_do() {
        assert_eq!(read_sum(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), 55);
        for isa in Isa::all_supported() {
            let (macs, sum) = int8_macs(isa, 10);
            if macs > 0 {
                // Every multiply-add is 3 * -2.
                assert_eq!(sum, -6 * macs as i64, "{isa}");
            }
        }
    }
}
