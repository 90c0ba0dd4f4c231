//! AVX-512 VNNI kernels for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights.
//!
//! One register-tiled microkernel serves `vec_dot` (a 1x1 tile) and `gemm` (RM rows x RN
//! tokens): each step unpacks two 32-value weight blocks of RM rows into zmm registers once
//! and dots them against RN tokens' Q8 blocks with `vpdpbusd` (u8 weights x i8 activations).
//! Weights are kept unsigned (Q4: q, Q5: q, Q8_0: q + 128); the offset of the `_0` types is
//! removed exactly in the integer domain by starting each block's sum at `-offset * sum(a)`.
//! Per block: `acc += f32(sum_i) * d_w * d_a` (+ `m_w * s_a` for Q5_1). Q4_1, Q5_0 and Q8_0
//! go to `ggml_order.rs` instead (llama.cpp's float order, `legacy_kind::ggml_lanes`), so this
//! microkernel serves Q4_0 and Q5_1.

use std::arch::x86_64::*;

use crate::kernels::legacy_kind::*;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::x86::legacy_tiles::{legacy_entry_points, tile_sizes, Gemm};
use crate::kernels::DType;

/// Activation dtype: Q8_1 for the types with a minimum, Q8_0 otherwise.
/// The unsigned offset removed from `_0` weights (q - OFF): 8, 16, 128; 0 for `_1` types.
const fn offset(t: u8) -> i8 {
    match t {
        Q4_0 => 8,
        Q5_0 => 16,
        Q8_0 => -128, // the byte 0x80 (128 as u8)
        _ => 0,
    }
}

const ROWS_PER_PANEL: usize = 64;
/// From this many tokens the row-lanes GEMM (lanes.rs) is used.
const LANES_MIN_TOK: usize = 1;

/// Reads an unaligned little-endian u32.
///
/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline(always)]
unsafe fn rd32(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees 4 readable bytes at `p`.
    unsafe { (p as *const u32).read_unaligned() }
}

/// The f16 pairs at `p0` and `p1` (or zero) as f32 lanes [lo0, hi0, lo1, hi1].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn header_pair<const TWO: bool>(p0: *const u8, p1: *const u8) -> __m512 {
    // SAFETY: every block starts with at least 4 header/data bytes; `p1` is read only when
    // TWO says it addresses a block.
    let h1 = if TWO { unsafe { rd32(p1) } } else { 0 };
    // SAFETY: as for `p1`: `p0` addresses a whole block.
    let h0 = unsafe { rd32(p0) };
    let v = _mm_set_epi32(0, 0, h1 as i32, h0 as i32);
    _mm512_castps128_ps512(_mm_cvtph_ps(v))
}

/// Two weight blocks (the second zero unless TWO) of one row: 64 unsigned bytes in value
/// order, the scale d broadcast over each block's 8 lanes, and the minimum m in lanes 0 and 8.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load_w<const T: u8, const TWO: bool>(p: *const u8) -> (__m512i, __m512, __m512) {
    let bw = wdt(T).block_bytes();
    let p1 = p.wrapping_add(bw);
    // SAFETY: (all loads below) `p` points at a whole block of the row and, when TWO, `p1`
    // at the next one; offsets stay inside the ggml block layout (blocks/legacy.rs).
    let q = unsafe {
        if T == Q8_0 {
            let lo = _mm256_loadu_si256(p.add(2) as *const __m256i);
            let hi = if TWO {
                _mm256_loadu_si256(p1.add(2) as *const __m256i)
            } else {
                _mm256_set1_epi8(-128)
            };
            let z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            _mm512_xor_si512(z, _mm512_set1_epi8(-128))
        } else {
            let qoff = match T {
                Q4_0 => 2,
                Q4_1 => 4,
                Q5_0 => 6,
                _ => 8,
            };
            let lo = _mm_loadu_si128(p.add(qoff) as *const __m128i);
            let hi = if TWO {
                _mm_loadu_si128(p1.add(qoff) as *const __m128i)
            } else {
                _mm_setzero_si128()
            };
            let x =
                _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
            // [qs0, qs0, qs1, qs1], then shift the 2nd and 4th 128-bit lanes right by 4.
            let z = _mm512_shuffle_i64x2(x, x, 0x50);
            let shifts = _mm512_set_epi64(
                0x0004_0004_0004_0004,
                0x0004_0004_0004_0004,
                0,
                0,
                0x0004_0004_0004_0004,
                0x0004_0004_0004_0004,
                0,
                0,
            );
            let mut v = _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0F));
            if T == Q5_0 || T == Q5_1 {
                let hoff = if T == Q5_0 { 2 } else { 4 };
                let h0 = rd32(p.add(hoff)) as u64;
                let h1 = if TWO { rd32(p1.add(hoff)) as u64 } else { 0 };
                let bits = _mm512_maskz_mov_epi8(h0 | (h1 << 32), _mm512_set1_epi8(0x10));
                v = _mm512_or_si512(v, bits);
            }
            v
        }
    };
    // SAFETY: headers are the first 4 bytes of each block.
    let hdr = unsafe { header_pair::<TWO>(p, p1) };
    let d = _mm512_permutexvar_ps(
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        hdr,
    );
    let m = if has_min(T) {
        _mm512_maskz_permutexvar_ps(
            0x0101,
            _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
            hdr,
        )
    } else {
        _mm512_setzero_ps()
    };
    (q, d, m)
}

/// Two activation blocks (Q8_0 or Q8_1) of one token: 64 signed bytes, d per block lanes,
/// s per block lanes (Q8_1), and the integer start value `-offset * sum(q)` per lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load_a<const T: u8, const TWO: bool>(p: *const u8) -> (__m512i, __m512, __m512, __m512i) {
    let ab = adt(T).block_bytes();
    let qoff = if has_min(T) { 4 } else { 2 };
    let p1 = p.wrapping_add(ab);
    // SAFETY: `p` (and `p1` when TWO) point at whole activation blocks.
    let q = unsafe {
        let lo = _mm256_loadu_si256(p.add(qoff) as *const __m256i);
        let hi = if TWO {
            _mm256_loadu_si256(p1.add(qoff) as *const __m256i)
        } else {
            _mm256_setzero_si256()
        };
        _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
    };
    // SAFETY: as above.
    let hdr = unsafe { header_pair::<TWO>(p, p1) };
    let d = _mm512_permutexvar_ps(
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        hdr,
    );
    let s = if has_min(T) {
        _mm512_permutexvar_ps(
            _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
            hdr,
        )
    } else {
        _mm512_setzero_ps()
    };
    let start = if has_min(T) {
        _mm512_setzero_si512()
    } else {
        let off_sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(offset(T)), q);
        _mm512_sub_epi32(_mm512_setzero_si512(), off_sum)
    };
    (q, d, s, start)
}

/// One step of two blocks for an RM x RN tile.
///
/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
unsafe fn step<const T: u8, const RM: usize, const RN: usize, const TWO: bool>(
    acc: &mut [[__m512; RN]; RM],
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
) {
    let mut wq = [_mm512_setzero_si512(); RM];
    let mut wd = [_mm512_setzero_ps(); RM];
    let mut wm = [_mm512_setzero_ps(); RM];
    for r in 0..RM {
        // SAFETY: the caller passes RM rows `wr` bytes apart with this step's blocks in range.
        let (q, d, m) = unsafe { load_w::<T, TWO>(w.add(r * wr)) };
        wq[r] = q;
        wd[r] = d;
        wm[r] = m;
    }
    for t in 0..RN {
        // SAFETY: RN activation rows `ar` bytes apart with this step's blocks in range.
        let (aq, ad, as_, start) = unsafe { load_a::<T, TWO>(a.add(t * ar)) };
        for r in 0..RM {
            let sumi = _mm512_dpbusd_epi32(start, wq[r], aq);
            let scale = _mm512_mul_ps(wd[r], ad);
            let mut x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), scale, acc[r][t]);
            if has_min(T) {
                x = _mm512_fmadd_ps(wm[r], as_, x);
            }
            acc[r][t] = x;
        }
    }
}

/// Computes an RM x RN tile of the output over `nb` blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const RM: usize, const RN: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let (bw, ab) = (wdt(T).block_bytes(), adt(T).block_bytes());
    let mut acc = [[_mm512_setzero_ps(); RN]; RM];
    let mut b = 0;
    while b + 2 <= nb {
        // SAFETY: blocks b and b+1 exist in every row (b + 2 <= nb).
        unsafe { step::<T, RM, RN, true>(&mut acc, w.add(b * bw), wr, a.add(b * ab), ar) };
        b += 2;
    }
    if b < nb {
        // SAFETY: block b exists; the second half is not read (TWO = false).
        unsafe { step::<T, RM, RN, false>(&mut acc, w.add(b * bw), wr, a.add(b * ab), ar) };
    }
    for (r, row) in acc.iter().enumerate() {
        for (t, v) in row.iter().enumerate() {
            // SAFETY: the caller guarantees the RM x RN output cells are in bounds.
            unsafe { *out.add(t * out_stride + r) = _mm512_reduce_add_ps(*v) };
        }
    }
}

const RM: usize = 4;
const RN: usize = 3;

/// The checked GEMM: Q4_1, Q5_0 and Q8_0 in llama.cpp's order (`ggml_order.rs`), Q4_0 and
/// Q5_1 by the row-lanes GEMM (`lanes.rs`) or panels of `ROWS_PER_PANEL` rows in tiles of up
/// to `RM` rows x `RN` tokens.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
    let Gemm {
        nb,
        w: wp,
        wr,
        a: ap,
        ar,
        out: op,
        os,
    } = g;
    if ggml_lanes(T) {
        // SAFETY: lengths checked by `Gemm::new`.
        unsafe { super::ggml_order::gemm::<T>(nb, wp, wr, n_rows, ap, ar, n_tok, op, os) };
        return;
    }
    let lanes_ok = nb <= super::lanes::SCRATCH && n_tok >= LANES_MIN_TOK;
    if lanes_ok {
        // SAFETY: lengths checked by `Gemm::new`; nb within the lanes table limit.
        unsafe { super::lanes::gemm::<T>(nb, wp, wr, n_rows, ap, ar, n_tok, op, os) };
        return;
    }
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
        // SAFETY: `Gemm::new` checked n_rows weight rows, n_tok activation rows and the
        // output cells; `tiles` passes a tile of rm <= RM rows and rn <= RN tokens inside them.
        unsafe {
            tile_sizes!(
                tile::<T>(nb, w, wr, a, ar, out, os),
                (rm, rn),
                [(4, 3)(4, 2)(4, 1)(3, 3)(3, 2)(3, 1)(2, 3)(2, 2)(2, 1)(1, 3)(1, 2)]
            )
        }
    });
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot<const T: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(T), w.len(), adt(T), a.len());
    let mut out = 0f32;
    if ggml_lanes(T) {
        // SAFETY: lengths checked; one output cell.
        unsafe {
            super::ggml_order::gemm::<T>(n / 32, w.as_ptr(), 0, 1, a.as_ptr(), 0, 1, &mut out, 0)
        };
        return out;
    }
    // SAFETY: lengths checked; one output cell.
    unsafe { tile::<T, 1, 1>(n / 32, w.as_ptr(), 0, a.as_ptr(), 0, &mut out, 0) };
    out
}

legacy_entry_points!(
    "AVX-512 VNNI",
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    "AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C"
);

/// Quantizes one 32-value block to Q8 exactly as the scalar reference (and llama.cpp's x86
/// build) does: `d = amax / 127`, `x * (127 / amax)` rounded half to even; writes the 32
/// quants at `qs` and returns (d, sum of quants).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn quantize_block_q8(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    // SAFETY: `x` has 32 values (callers iterate chunks_exact(32)).
    let (x0, x1) = unsafe {
        (
            _mm512_loadu_ps(x.as_ptr()),
            _mm512_loadu_ps(x.as_ptr().add(16)),
        )
    };
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let idv = _mm512_set1_ps(id);
    let round = |v: __m512| -> __m512i {
        let v = _mm512_mul_ps(v, idv);
        _mm512_cvtps_epi32(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(v))
    };
    let (q0, q1) = (round(x0), round(x1));
    let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    // SAFETY: `qs` has 32 bytes (callers pass a block's quant area).
    unsafe {
        _mm_storeu_si128(qs.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(
            qs.as_mut_ptr().add(16) as *mut __m128i,
            _mm512_cvtepi32_epi8(q1),
        );
    }
    (d, sum)
}

/// AVX-512 twin of the scalar `quantize_q8_0` (bit-identical output).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C. Lengths are checked (panics).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn quantize_q8_0(x: &[f32], y: &mut [u8]) {
    crate::kernels::shape::check_convert(DType::Q8_0, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(34)) {
        let (d, _) = quantize_block_q8(xb, &mut yb[2..34]);
        yb[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
    }
}

/// AVX-512 twin of the scalar `quantize_q8_1` (bit-identical output).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C. Lengths are checked (panics).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn quantize_q8_1(x: &[f32], y: &mut [u8]) {
    crate::kernels::shape::check_convert(DType::Q8_1, y.len(), x.len());
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(36)) {
        let (d, sum) = quantize_block_q8(xb, &mut yb[4..36]);
        yb[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        yb[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_le_bytes());
    }
}
