//! AVX-512 VNNI kernels for IQ4_NL, MXFP4 (x Q8_0) and IQ4_XS (x Q8_K) weights: twins of
//! `scalar/nonlinear.rs`, bit for bit (its module doc states the float order).
//!
//! Each step takes two 32-value groups in one zmm: their 32 code bytes become 64 signed values
//! with one `vpshufb` into the 16-entry table plus 128 (unsigned, in all four 128-bit lanes),
//! and `vpdpbusd` of those with `a`, started at `-128 *` the activations' own lane sums (once
//! per token), leaves lane `i` of each half = the exact sum of that group's values `4i..4i+4`
//! (the reference's lanes; `vpdpbusd` adds four products into i32 without saturating).
//! IQ4_NL / MXFP4 then add the two groups to the eight f32 lanes one after the other (two
//! fmas, block order); IQ4_XS multiplies each half by its group's `ls - 32`, sums the eight
//! groups in i32 and does one fma per super-block.

use std::arch::x86_64::*;

use crate::kernels::blocks::nonlinear::{e8m0_to_f32_half, IQ4_XS_BYTES};
use crate::kernels::shape::check_vec_dot;
use crate::kernels::x86::nonlinear_tiles::{
    adt, checked, nonlinear_entry_points, panel_gemm, table, takes_panels, wdt, IQ4_XS, MXFP4,
    ROWS_PER_PANEL,
};
use crate::kernels::DType;

/// Reads an f16 at `p` as f32 (F16C `vcvtph2ps`: exact, as every f16 -> f32 conversion).
///
/// # Safety
/// CPU features as enabled; 2 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The values of two 32-value groups (codes at `p0` and `p1`, 16 bytes each) plus 128, as 64
/// unsigned bytes (1..=241): group 0's values 0..32, then group 1's.
///
/// # Safety
/// AVX-512 F/BW; 16 readable bytes at `p0` and at `p1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn groups2<const K: u8>(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes at each.
    let (x0, x1) = unsafe {
        (
            _mm_loadu_si128(p0 as *const __m128i),
            _mm_loadu_si128(p1 as *const __m128i),
        )
    };
    let x = _mm512_castsi256_si512(_mm256_set_m128i(x1, x0));
    // [x0, x0, x1, x1], the 2nd and 4th 128-bit lanes shifted right by 4: the high nibbles.
    let z = _mm512_shuffle_i64x2::<0x50>(x, x);
    let shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    let codes = _mm512_and_si512(_mm512_srlv_epi64(z, shifts), _mm512_set1_epi8(0x0F));
    let t = table(K);
    // SAFETY: `t` is 16 bytes; flipping the top bit of an i8 adds 128.
    let t128 = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
    let t128 = _mm_xor_si128(t128, _mm_set1_epi8(-128));
    _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t128), codes)
}

/// `-128 *` the sum of activation bytes `4i..4i+4`, per i32 lane: where [`dot4`] starts so that
/// the table's +128 cancels.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn start(a: __m512i) -> __m512i {
    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), a);
    _mm512_sub_epi32(_mm512_setzero_si512(), s)
}

/// Lane `i` of each 32-byte half: the exact sum of `w * a` over bytes `4i..4i+4`, from the
/// weights plus 128 (`u`) and the activations' [`start`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn dot4(start: __m512i, u: __m512i, a: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(start, u, a)
}

/// The reference's `hsum8` order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn hsum8(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

/// The f32 scale of the IQ4_NL or MXFP4 block at `p` (`d`, or `2^(e - 128)`).
///
/// # Safety
/// CPU features as enabled; a whole block at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn scale<const K: u8>(p: *const u8) -> f32 {
    // SAFETY: the block's first byte(s) are its scale.
    unsafe {
        if K == MXFP4 {
            e8m0_to_f32_half(*p)
        } else {
            f16_at(p)
        }
    }
}

/// An RM x RN tile of a 32-value kind (IQ4_NL, MXFP4) over `nb` blocks.
///
/// # Safety
/// CPU features as enabled; RM weight rows `wr` bytes apart at `w` and RN Q8_0 rows `ar`
/// bytes apart at `a`, each of `nb` blocks, and the RM x RN cells `out[t * os + r]` in bounds.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
#[allow(clippy::too_many_arguments)]
unsafe fn tile32<const K: u8, const RM: usize, const RN: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
) {
    let (bw, qoff) = (wdt(K).block_bytes(), if K == MXFP4 { 1 } else { 2 });
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    let mut b = 0;
    while b < nb {
        // Two blocks, or the last one alone (its pair then reads block b again, unused).
        let two = b + 1 < nb;
        let b1 = if two { b + 1 } else { b };
        let mut wq = [_mm512_setzero_si512(); RM];
        let mut wd = [[0f32; 2]; RM];
        for r in 0..RM {
            // SAFETY: blocks b and b1 of row r are in bounds (caller contract).
            let (p0, p1) = unsafe { (w.add(r * wr + b * bw), w.add(r * wr + b1 * bw)) };
            // SAFETY: as above; the codes follow each block's scale.
            wq[r] = unsafe { groups2::<K>(p0.add(qoff), p1.add(qoff)) };
            // SAFETY: `p0` and `p1` are block starts (the scale is each block's first bytes).
            wd[r] = unsafe { [scale::<K>(p0), scale::<K>(p1)] };
        }
        for t in 0..RN {
            // SAFETY: blocks b and b1 of token t (34 bytes each: f16 d, 32 quants).
            let (ad, aq) = unsafe {
                let (p0, p1) = (a.add(t * ar + b * 34), a.add(t * ar + b1 * 34));
                let lo = _mm256_loadu_si256(p0.add(2) as *const __m256i);
                let hi = _mm256_loadu_si256(p1.add(2) as *const __m256i);
                (
                    [f16_at(p0), f16_at(p1)],
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi),
                )
            };
            let st = start(aq);
            for r in 0..RM {
                let s = _mm512_cvtepi32_ps(dot4(st, wq[r], aq));
                let mut x = acc[r][t];
                x = _mm256_fmadd_ps(
                    _mm256_set1_ps(wd[r][0] * ad[0]),
                    _mm512_castps512_ps256(s),
                    x,
                );
                if two {
                    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                    x = _mm256_fmadd_ps(_mm256_set1_ps(wd[r][1] * ad[1]), hi, x);
                }
                acc[r][t] = x;
            }
        }
        b += 2;
    }
    for r in 0..RM {
        for t in 0..RN {
            // SAFETY: the output cell is in bounds (caller contract).
            unsafe { *out.add(t * os + r) = hsum8(acc[r][t]) };
        }
    }
}

/// The `ls - 32` of group pairs (0, 1), (2, 3), (4, 5), (6, 7) of the IQ4_XS super-block at
/// `p`: each i32 vector holds the first group's scale in lanes 0..8, the second's in 8..16.
///
/// # Safety
/// A whole super-block at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn xs_scales(p: *const u8) -> [__m512i; 4] {
    // SAFETY: scales_h is bytes 2..4, scales_l bytes 4..8 of the super-block.
    let (h, l) = unsafe {
        (
            (p.add(2) as *const u16).read_unaligned(),
            (p.add(4) as *const u32).read_unaligned(),
        )
    };
    let ls = |g: usize| (((l >> (4 * g)) & 0x0F) | (((h as u32 >> (2 * g)) & 3) << 4)) as i32 - 32;
    std::array::from_fn(|q| {
        let (s0, s1) = (ls(2 * q), ls(2 * q + 1));
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi32(s0)),
            _mm256_set1_epi32(s1),
        )
    })
}

/// An RM x RN tile of IQ4_XS over `nb` super-blocks (Q8_K activations: f32 d, 256 quants).
///
/// # Safety
/// As [`tile32`], with IQ4_XS rows and Q8_K activation rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
#[allow(clippy::too_many_arguments)]
unsafe fn tile_xs<const RM: usize, const RN: usize>(
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
) {
    let ab = DType::Q8_K.block_bytes();
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    for b in 0..nb {
        let mut sc = [[_mm512_setzero_si512(); 4]; RM];
        let mut wd = [0f32; RM];
        for r in 0..RM {
            // SAFETY: super-block b of row r is in bounds (caller contract).
            let p = unsafe { w.add(r * wr + b * IQ4_XS_BYTES) };
            // SAFETY: as above.
            (sc[r], wd[r]) = unsafe { (xs_scales(p), f16_at(p)) };
        }
        let mut sum = [[_mm512_setzero_si512(); RN]; RM];
        for q in 0..4 {
            let mut wq = [_mm512_setzero_si512(); RM];
            for r in 0..RM {
                // SAFETY: groups 2q and 2q+1 have their 16 code bytes at 8 + 32q and 24 + 32q.
                wq[r] = unsafe {
                    let p = w.add(r * wr + b * IQ4_XS_BYTES + 8 + 32 * q);
                    groups2::<IQ4_XS>(p, p.add(16))
                };
            }
            for t in 0..RN {
                // SAFETY: the Q8_K block's quants 64q..64q+64 (after its f32 d) are in bounds.
                let aq = unsafe {
                    _mm512_loadu_si512(a.add(t * ar + b * ab + 4 + 64 * q) as *const __m512i)
                };
                let st = start(aq);
                for r in 0..RM {
                    let s = _mm512_mullo_epi32(dot4(st, wq[r], aq), sc[r][q]);
                    sum[r][t] = _mm512_add_epi32(sum[r][t], s);
                }
            }
        }
        for t in 0..RN {
            // SAFETY: the Q8_K block's f32 d is its first 4 bytes.
            let da = unsafe { (a.add(t * ar + b * ab) as *const f32).read_unaligned() };
            for r in 0..RM {
                let s = sum[r][t];
                let s8 =
                    _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s));
                let c = _mm256_set1_ps(wd[r] * da);
                acc[r][t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(s8), acc[r][t]);
            }
        }
    }
    for r in 0..RM {
        for t in 0..RN {
            // SAFETY: the output cell is in bounds (caller contract).
            unsafe { *out.add(t * os + r) = hsum8(acc[r][t]) };
        }
    }
}

/// The tile of kind `K` for `rm` rows x `rn` tokens (4x1 and 4x2 register tiles, else 1x1s).
///
/// # Safety
/// As [`tile32`] for `rm` rows and `rn` tokens.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const K: u8>(
    rm: usize,
    rn: usize,
    nb: usize,
    w: *const u8,
    wr: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
) {
    macro_rules! run {
        ($m:literal, $n:literal, $w:expr, $a:expr, $o:expr) => {
            if K == IQ4_XS {
                tile_xs::<$m, $n>(nb, $w, wr, $a, ar, $o, os)
            } else {
                tile32::<K, $m, $n>(nb, $w, wr, $a, ar, $o, os)
            }
        };
    }
    // SAFETY: (every arm) the caller's bounds cover these rows, tokens and cells.
    unsafe {
        match (rm, rn) {
            (4, 1) => run!(4, 1, w, a, out),
            (4, 2) => run!(4, 2, w, a, out),
            _ => {
                for t in 0..rn {
                    for r in 0..rm {
                        run!(1, 1, w.add(r * wr), a.add(t * ar), out.add(t * os + r));
                    }
                }
            }
        }
    }
}

/// The checked GEMM: IQ4_NL / MXFP4 batches of enough tokens through the panel GEMM
/// (`nonlinear_panel.rs`), else single tokens in tiles of 4 rows, more in tiles of 4 rows x 2
/// tokens, in panels of `ROWS_PER_PANEL` rows swept by all token tiles while their weights
/// are in cache (L2). Every path gives the same bits.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm<const K: u8>(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    let g = checked::<K>(k, w, n_rows, a, n_tok, out, os);
    if K != IQ4_XS && takes_panels(n_tok, g.nb) {
        // SAFETY: `g` is checked for these rows and tokens; nb fits the panel scratch; the
        // CPU features are this function's.
        return unsafe { panel_gemm(&super::nonlinear_panel::Panel::<K>, &g, n_rows, n_tok) };
    }
    // SAFETY: (both walks) `checked` checked n_rows weight rows, n_tok activation rows and the
    // output cells; `tiles` passes tiles of rm <= 4 rows and rn <= RN tokens inside them.
    let run = |g: &crate::kernels::x86::legacy_tiles::Gemm, rm: usize, rn: usize| unsafe {
        tile::<K>(rm, rn, g.nb, g.w, g.wr, g.a, g.ar, g.out, g.os)
    };
    if n_tok == 1 {
        g.tiles::<4, 1>(n_rows, n_tok, ROWS_PER_PANEL, run)
    } else {
        g.tiles::<4, 2>(n_rows, n_tok, ROWS_PER_PANEL, run)
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot<const K: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(K), w.len(), adt(K), a.len());
    let mut out = 0f32;
    let nb = n / wdt(K).block_elems();
    // SAFETY: lengths checked; one output cell.
    unsafe { tile::<K>(1, 1, nb, w.as_ptr(), 0, a.as_ptr(), 0, &mut out, 0) };
    out
}

nonlinear_entry_points!(
    "AVX-512 VNNI",
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    "AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C"
);
