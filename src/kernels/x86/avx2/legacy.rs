//! AVX2 (+FMA, F16C) kernels for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights.
//!
//! Same scheme as the AVX-512 microkernel, one 32-value block per ymm step: each weight
//! block of an RM-row tile is unpacked once and dotted against RN tokens with
//! `vpmaddubsw` + `vpmaddwd`. Q4/Q5 weights stay unsigned and the `_0` offset is removed
//! exactly as `-offset * sum(a)`; Q8_0 uses the sign trick (`|w| * sign(a, w)`) because
//! unsigned Q8 would saturate `vpmaddubsw`.
//!
//! Float order: Q4_1, Q5_0 and Q8_0 keep eight lane sums (lane `i` = values `4i..4i+4`, exact
//! in i32) and one fma per lane and block, plus Q4_1's separate `m * s` sum: llama.cpp's
//! order (`legacy_kind::ggml_lanes`). Q4_0 and Q5_1 sum each block exactly in i32 and do one
//! fma per block (Q5_1 then a second fma, `m * s`, into the same sum). These are the scalar
//! and panel twins' orders (`scalar/legacy.rs`, `scalar/packed.rs`), so the row kernels equal
//! the AVX2 and AVX-512 panel GEMMs bit for bit.

use std::arch::x86_64::*;

use crate::kernels::legacy_kind::*;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::x86::legacy_tiles::{legacy_entry_points, tile_sizes, Gemm};

const fn offset(t: u8) -> i16 {
    match t {
        Q4_0 => 8,
        Q5_0 => 16,
        _ => 0,
    }
}

const ROWS_PER_PANEL: usize = 64;
const RM: usize = 3;
const RN: usize = 2;

/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline(always)]
unsafe fn rd16(p: *const u8) -> u16 {
    // SAFETY: the caller guarantees 2 readable bytes at `p`.
    unsafe { (p as *const u16).read_unaligned() }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn h2f(h: u16) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))
}

/// One weight block: 32 bytes (unsigned except Q8_0), d broadcast, m in lane 0 only.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_w<const T: u8>(p: *const u8) -> (__m256i, __m256, __m256) {
    // SAFETY: (loads) `p` points at one whole block in the ggml layout (blocks/legacy.rs).
    let q = unsafe {
        if T == Q8_0 {
            _mm256_loadu_si256(p.add(2) as *const __m256i)
        } else {
            let qoff = match T {
                Q4_0 => 2,
                Q4_1 => 4,
                Q5_0 => 6,
                _ => 8,
            };
            let x = _mm_loadu_si128(p.add(qoff) as *const __m128i);
            let v = _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(x, 4), x),
                _mm256_set1_epi8(0x0F),
            );
            if T == Q5_0 || T == Q5_1 {
                let hoff = if T == Q5_0 { 2 } else { 4 };
                let qh = (p.add(hoff) as *const i32).read_unaligned();
                // Byte j takes qh byte j / 8, then tests its bit j % 8.
                let idx = _mm256_set_epi64x(
                    0x0303_0303_0303_0303,
                    0x0202_0202_0202_0202,
                    0x0101_0101_0101_0101,
                    0,
                );
                let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), idx);
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
                _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
            } else {
                v
            }
        }
    };
    // SAFETY: d is the block's first f16.
    let d = _mm256_broadcastss_ps(h2f(unsafe { rd16(p) }));
    let m = if has_min(T) {
        // SAFETY: m is the block's second f16 (Q4_1/Q5_1), at byte 2.
        _mm256_zextps128_ps256(h2f(unsafe { rd16(p.add(2)) }))
    } else {
        _mm256_setzero_ps()
    };
    (q, d, m)
}

/// One activation block: 32 signed bytes, d, s (Q8_1) and the integer start: lane `i` holds
/// `-offset` times the sum of values `4i..4i+4` (so the eight lanes add up to `-offset*sum(a)`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_a<const T: u8>(p: *const u8) -> (__m256i, __m256, __m256, __m256i) {
    let qoff = if has_min(T) { 4 } else { 2 };
    // SAFETY: `p` points at one whole activation block.
    let q = unsafe { _mm256_loadu_si256(p.add(qoff) as *const __m256i) };
    // SAFETY: d is the block's first f16.
    let d = _mm256_broadcastss_ps(h2f(unsafe { rd16(p) }));
    let s = if has_min(T) {
        // SAFETY: s is the block's second f16 (Q8_1), at byte 2.
        _mm256_broadcastss_ps(h2f(unsafe { rd16(p.add(2)) }))
    } else {
        _mm256_setzero_ps()
    };
    let start = if offset(T) != 0 {
        let ones16 = _mm256_set1_epi16(1);
        let sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), ones16);
        _mm256_mullo_epi32(sum, _mm256_set1_epi32(-(offset(T) as i32)))
    } else {
        _mm256_setzero_si256()
    };
    (q, d, s, start)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_i32<const T: u8>(w: __m256i, a: __m256i) -> __m256i {
    let ones16 = _mm256_set1_epi16(1);
    if T == Q8_0 {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
        _mm256_madd_epi16(p, ones16)
    } else {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), ones16)
    }
}

/// Exact sum of the 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32(v: __m256i) -> i32 {
    let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<1>(x));
    _mm_cvtsi128_si32(x)
}

/// llama.cpp's `hsum_float_8` order: `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_add_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
#[allow(clippy::needless_range_loop)] // indices address the register tile
unsafe fn tile<const T: u8, const M: usize, const N: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let (bw, ab) = (wdt(T).block_bytes(), adt(T).block_bytes());
    // Q4_0 / Q5_1: exact i32 block sums, one f32 fma per block (`exact`; Q5_1 adds `m * s`
    // with a second fma). The llama.cpp-order kinds keep eight lane sums (`start` holds each
    // lane's own offset term), Q4_1 its minimum term in `summs`.
    let exact = !ggml_lanes(T);
    let mut acc = [[_mm256_setzero_ps(); N]; M];
    let mut acc1 = [[0f32; N]; M];
    let mut summs = [[0f32; N]; M];
    for b in 0..nb {
        let mut wq = [_mm256_setzero_si256(); M];
        let mut wd = [_mm256_setzero_ps(); M];
        let mut wm = [_mm256_setzero_ps(); M];
        for r in 0..M {
            // SAFETY: block b of row r is in bounds (caller contract).
            (wq[r], wd[r], wm[r]) = unsafe { load_w::<T>(w.add(r * wr + b * bw)) };
        }
        for t in 0..N {
            // SAFETY: block b of token t is in bounds (caller contract).
            let (aq, ad, as_, start) = unsafe { load_a::<T>(a.add(t * ar + b * ab)) };
            for r in 0..M {
                let sumi = _mm256_add_epi32(dot_i32::<T>(wq[r], aq), start);
                if exact {
                    let d = _mm256_cvtss_f32(wd[r]) * _mm256_cvtss_f32(ad);
                    acc1[r][t] = (hsum_i32(sumi) as f32).mul_add(d, acc1[r][t]);
                    if has_min(T) {
                        let (m, s) = (_mm256_cvtss_f32(wm[r]), _mm256_cvtss_f32(as_));
                        acc1[r][t] = m.mul_add(s, acc1[r][t]);
                    }
                    continue;
                }
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(sumi),
                    _mm256_mul_ps(wd[r], ad),
                    acc[r][t],
                );
                if has_min(T) {
                    let (m, s) = (_mm256_cvtss_f32(wm[r]), _mm256_cvtss_f32(as_));
                    summs[r][t] = m.mul_add(s, summs[r][t]);
                }
            }
        }
    }
    for r in 0..M {
        for t in 0..N {
            let v = if exact {
                acc1[r][t]
            } else if has_min(T) {
                hsum(acc[r][t]) + summs[r][t]
            } else {
                hsum(acc[r][t])
            };
            // SAFETY: the caller guarantees the M x N output cells are in bounds.
            unsafe { *out.add(t * out_stride + r) = v };
        }
    }
}

/// The checked GEMM: panels of `ROWS_PER_PANEL` rows, tiles of up to `RM` rows x `RN` tokens.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm<const T: u8>(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let g = Gemm::new::<T>(k, w, n_rows, a, n_tok, out, out_stride);
    g.tiles::<RM, RN>(n_rows, n_tok, ROWS_PER_PANEL, |g, rm, rn| {
        let Gemm {
            nb,
            w,
            wr,
            a,
            ar,
            out,
            os,
        } = *g;
        // SAFETY: `Gemm::new` checked the rows and output cells; `tiles` passes a tile of
        // rm <= RM rows and rn <= RN tokens inside them.
        unsafe {
            tile_sizes!(
                tile::<T>(nb, w, wr, a, ar, out, os),
                (rm, rn),
                [(3, 2)(3, 1)(2, 2)(2, 1)(1, 2)]
            )
        }
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot<const T: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(T), w.len(), adt(T), a.len());
    let mut out = 0f32;
    // SAFETY: lengths checked; one output cell.
    unsafe { tile::<T, 1, 1>(n / 32, w.as_ptr(), 0, a.as_ptr(), 0, &mut out, 0) };
    out
}

legacy_entry_points!("AVX2", "avx2,fma,f16c", "AVX2, FMA and F16C");
