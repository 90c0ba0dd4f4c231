//! Q4_1 x Q8_1 dot products in llama.cpp's x86 order (`ggml_vec_dot_q4_1_q8_1`, AVX2 path,
//! which its AVX-512 builds use too), so kiln's results are bit-identical to the reference's.
//!
//! Per output: eight f32 lanes, lane `i` holding the integer sum of values `4i..4i+4` of each
//! block; block after block, `acc = fma(d_w * d_a, f32(sum_i), acc)`; the weight minimum
//! terms are summed apart, `summs = fma(m_w, s_a, summs)`; the result is the horizontal sum of
//! `acc` (halves, then pairs) plus `summs`. The summation order is what matters: SmolLM2's
//! activations are quantized to 8 bits after most matmuls, so one-ulp differences flip quants
//! and grow along the layers. Register tiling (rows x tokens) does not change any output's
//! order.

use std::arch::x86_64::*;

/// Q4_1 block: f16 d, f16 m, 16 bytes of nibbles.
const WB: usize = 20;
/// Q8_1 block: f16 d, f16 s, 32 signed bytes.
const AB: usize = 36;

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

/// The 32 weights of a Q4_1 block as unsigned bytes in value order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller passes a whole block; the quants start at byte 4.
    let x = unsafe { _mm_loadu_si128(p.add(4) as *const __m128i) };
    let lo = _mm_and_si128(x, _mm_set1_epi8(0x0F));
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(x), _mm_set1_epi8(0x0F));
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
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
/// CPU features as enabled; RM rows of `nb` Q4_1 blocks, RN tokens of `nb` Q8_1 blocks and
/// the RM x RN output cells must be in bounds.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
unsafe fn tile<const RM: usize, const RN: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    let mut summs = [[0f32; RN]; RM];
    for b in 0..nb {
        let mut wq = [_mm256_setzero_si256(); RM];
        let mut wdm = [(0f32, 0f32); RM];
        for r in 0..RM {
            // SAFETY: block b of row r is in bounds (caller contract).
            let p = unsafe { w.add(r * wr + b * WB) };
            // SAFETY: `p` is a whole Q4_1 block (20 bytes: d, m, 16 quant bytes) and this
            // function's features cover `nibbles`'.
            wq[r] = unsafe { nibbles(p) };
            // SAFETY: d and m are the block's first 4 bytes.
            wdm[r] = unsafe { f16_pair(p) };
        }
        for t in 0..RN {
            // SAFETY: block b of token t is in bounds (caller contract).
            let p = unsafe { a.add(t * ar + b * AB) };
            // SAFETY: a Q8_1 block holds d, s and then its 32 quants at bytes 4..36.
            let aq = unsafe { _mm256_loadu_si256(p.add(4) as *const __m256i) };
            // SAFETY: d and s are the block's first 4 bytes.
            let (ad, as_) = unsafe { f16_pair(p) };
            for r in 0..RM {
                let (wd, wm) = wdm[r];
                summs[r][t] = wm.mul_add(as_, summs[r][t]);
                let xy = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wq[r], aq));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * ad), xy, acc[r][t]);
            }
        }
    }
    for r in 0..RM {
        for t in 0..RN {
            // SAFETY: the output cell is in bounds (caller contract).
            unsafe { *out.add(t * os + r) = hsum8(acc[r][t]) + summs[r][t] };
        }
    }
}

const RM: usize = 4;
const RN: usize = 2;

/// `out[t * out_stride + r] = dot(row r of w, token t of a)` for Q4_1 rows and Q8_1 tokens
/// of `nb` blocks each, rows `wr` and tokens `ar` bytes apart.
///
/// # Safety
/// CPU features as enabled; `w` holds `n_rows` rows, `a` `n_tok` tokens, `out` every cell
/// (the caller checked the lengths).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
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
    for t0 in (0..n_tok).step_by(RN) {
        let rn = RN.min(n_tok - t0);
        for r0 in (0..n_rows).step_by(RM) {
            let rm = RM.min(n_rows - r0);
            // SAFETY: r0 + rm <= n_rows and t0 + rn <= n_tok (caller contract for bounds).
            unsafe {
                let (w, a, o) = (w.add(r0 * wr), a.add(t0 * ar), out.add(t0 * os + r0));
                match (rm, rn) {
                    (4, 2) => tile::<4, 2>(nb, w, wr, a, ar, o, os),
                    (4, 1) => tile::<4, 1>(nb, w, wr, a, ar, o, os),
                    _ => {
                        for r in 0..rm {
                            for t in 0..rn {
                                tile::<1, 1>(
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
