//! Q4_1 x Q8_1, Q5_0 x Q8_0 and Q8_0 x Q8_0 dot products in llama.cpp's x86 order
//! (`ggml_vec_dot_q4_1_q8_1`, `_q5_0_q8_0`, `_q8_0_q8_0`, AVX2 path, which its AVX-512 builds
//! use too, and tinyBLAS's `tinyBLAS_Q0_AVX` for prompt batches), so kiln's results are
//! bit-identical to the reference's (see `legacy_kind::ggml_lanes`).
//!
//! Per output: eight f32 lanes, lane `i` holding the exact integer sum of the products of
//! values `4i..4i+4` of each block (weights unsigned, `vpdpbusd` starting from `-offset` times
//! the lane's activation sum); block after block, `acc = fma(d_w * d_a, f32(sum_i), acc)`; the
//! Q4_1 minimum terms are summed apart, `summs = fma(m_w, s_a, summs)`; the result is the
//! horizontal sum of `acc` (halves, then pairs) (+ `summs`). The summation order is what
//! matters: activations are quantized to 8 bits before every matmul, so one-ulp differences
//! flip quants and grow along the layers (gemma-3's residual outliers make that fast).
//! Register tiling (rows x tokens) does not change any output's order.

use std::arch::x86_64::*;

use crate::kernels::legacy_kind::*;

/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    // SAFETY: the caller passes a block start (4 header bytes).
    let h = unsafe { (p as *const u32).read_unaligned() };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(h as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The 32 weights of a block of kind `T` as unsigned bytes in value order (Q4_1 as stored,
/// Q5_0 as `q + 16`, Q8_0 as `q + 128`).
///
/// # Safety
/// CPU features as enabled; `p` is a whole weight block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn weights<const T: u8>(p: *const u8) -> __m256i {
    if T == Q8_0 {
        // SAFETY: the quants are bytes 2..34 of a Q8_0 block.
        let x = unsafe { _mm256_loadu_si256(p.add(2) as *const __m256i) };
        return _mm256_xor_si256(x, _mm256_set1_epi8(-128));
    }
    let qoff = if T == Q5_0 { 6 } else { 4 };
    // SAFETY: the nibbles are bytes 4..20 (Q4_1) or 6..22 (Q5_0) of the block.
    let x = unsafe { _mm_loadu_si128(p.add(qoff) as *const __m128i) };
    let lo = _mm_and_si128(x, _mm_set1_epi8(0x0F));
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(x), _mm_set1_epi8(0x0F));
    let v = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
    if T == Q5_0 {
        // SAFETY: a Q5_0 block's qh is its bytes 2..6; bit j is value j's fifth bit.
        let qh = unsafe { (p.add(2) as *const u32).read_unaligned() };
        return _mm256_or_si256(v, _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10)));
    }
    v
}

/// The unsigned offset of kind `T`'s weights as `vpdpbusd`'s byte (128 is 0x80).
const fn offset(t: u8) -> i8 {
    match t {
        Q5_0 => 16,
        Q8_0 => -128,
        _ => 0,
    }
}

/// `_mm256` horizontal sum in `hsum_float_8`'s order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn hsum8(x: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// An RM x RN tile of outputs over `nb` blocks: rows `wr` bytes apart at `w`, tokens `ar`
/// bytes apart at `a`, output cell (r, t) at `out[t * os + r]`.
///
/// # Safety
/// CPU features as enabled; RM rows of `nb` blocks of kind `T`, RN tokens of `nb` activation
/// blocks (`adt(T)`) and the RM x RN output cells must be in bounds.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
unsafe fn tile<const T: u8, const RM: usize, const RN: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
) {
    let (wb, ab) = (wdt(T).block_bytes(), adt(T).block_bytes());
    let qa = if has_min(T) { 4 } else { 2 };
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    let mut summs = [[0f32; RN]; RM];
    for b in 0..nb {
        let mut wq = [_mm256_setzero_si256(); RM];
        let mut wdm = [(0f32, 0f32); RM];
        for r in 0..RM {
            // SAFETY: block b of row r is in bounds (caller contract).
            let p = unsafe { w.add(r * wr + b * wb) };
            // SAFETY: `p` is a whole block of kind T and this function's features cover
            // `weights`'.
            wq[r] = unsafe { weights::<T>(p) };
            // SAFETY: d (and Q4_1's m) are the block's first bytes; every block has 4.
            wdm[r] = unsafe { f16_pair(p) };
        }
        for t in 0..RN {
            // SAFETY: block b of token t is in bounds (caller contract).
            let p = unsafe { a.add(t * ar + b * ab) };
            // SAFETY: the activation block's 32 quants follow its d (and Q8_1's s).
            let aq = unsafe { _mm256_loadu_si256(p.add(qa) as *const __m256i) };
            // SAFETY: d (and s) are the block's first bytes; every block has 4.
            let (ad, as_) = unsafe { f16_pair(p) };
            // Lane i starts at -offset * (sum of activation values 4i..4i+4): exact.
            let start = if offset(T) == 0 {
                _mm256_setzero_si256()
            } else {
                let o =
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(offset(T)), aq);
                _mm256_sub_epi32(_mm256_setzero_si256(), o)
            };
            for r in 0..RM {
                let (wd, wm) = wdm[r];
                if has_min(T) {
                    summs[r][t] = wm.mul_add(as_, summs[r][t]);
                }
                let xy = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(start, wq[r], aq));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * ad), xy, acc[r][t]);
            }
        }
    }
    for r in 0..RM {
        for t in 0..RN {
            let v = if has_min(T) {
                hsum8(acc[r][t]) + summs[r][t]
            } else {
                hsum8(acc[r][t])
            };
            // SAFETY: the output cell is in bounds (caller contract).
            unsafe { *out.add(t * os + r) = v };
        }
    }
}

const RM: usize = 4;
const RN: usize = 2;

/// `out[t * out_stride + r] = dot(row r of w, token t of a)` for rows of kind `T` (Q4_1, Q5_0
/// or Q8_0) and activation tokens of `nb` blocks each, rows `wr` and tokens `ar` bytes apart.
///
/// # Safety
/// CPU features as enabled; `w` holds `n_rows` rows, `a` `n_tok` tokens, `out` every cell
/// (the caller checked the lengths).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm<const T: u8>(
    nb: usize,
    w: *const u8,
    wr: usize,
    n_rows: usize,
    a: *const u8,
    ar: usize,
    n_tok: usize,
    out: *mut f32,
    os: usize,
) {
    invariant!(ggml_lanes(T), "llama.cpp-order kinds only");
    for t0 in (0..n_tok).step_by(RN) {
        let rn = RN.min(n_tok - t0);
        for r0 in (0..n_rows).step_by(RM) {
            let rm = RM.min(n_rows - r0);
            // SAFETY: r0 + rm <= n_rows and t0 + rn <= n_tok (caller contract for bounds).
            unsafe {
                let (w, a, o) = (w.add(r0 * wr), a.add(t0 * ar), out.add(t0 * os + r0));
                match (rm, rn) {
                    (4, 2) => tile::<T, 4, 2>(nb, w, wr, a, ar, o, os),
                    (4, 1) => tile::<T, 4, 1>(nb, w, wr, a, ar, o, os),
                    _ => {
                        for r in 0..rm {
                            for t in 0..rn {
                                tile::<T, 1, 1>(
                                    nb,
                                    w.add(r * wr),
                                    wr,
                                    a.add(t * ar),
                                    ar,
                                    o.add(t * os + r),
                                    os,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
