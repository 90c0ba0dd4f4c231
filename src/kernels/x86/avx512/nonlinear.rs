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

use crate::kernels::blocks::nonlinear::IQ4_XS_BYTES;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::x86::nonlinear_tiles::{
    adt, checked, nonlinear_entry_points, panel_gemm, prefetch_ahead, table, takes_panels, wdt,
    IQ4_XS, MXFP4, ROWS_PER_PANEL,
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

/// The 16-entry table of kind `K` plus 128 (as unsigned bytes) in all four 128-bit lanes: the
/// `vpshufb` table of [`groups2`], built once per tile.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn table128<const K: u8>() -> __m512i {
    let t = table(K);
    // SAFETY: `t` is 16 bytes; flipping the top bit of an i8 adds 128.
    let t128 = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
    _mm512_broadcast_i32x4(_mm_xor_si128(t128, _mm_set1_epi8(-128)))
}

/// The values of two 32-value groups (codes at `p0` and `p1`, 16 bytes each) plus 128, as 64
/// unsigned bytes (1..=241): group 0's values 0..32, then group 1's. `t` is [`table128`].
///
/// # Safety
/// AVX-512 F/BW; 16 readable bytes at `p0` and at `p1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn groups2(p0: *const u8, p1: *const u8, t: __m512i) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes at each. Broadcast loads give
    // [x0, x0, x1, x1] with one insert (no shuffle).
    let (x0, x1) = unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(p0 as *const __m128i)),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(p1 as *const __m128i)),
        )
    };
    let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x0), x1);
    // The 2nd and 4th 128-bit lanes shifted right by 4: the high nibbles.
    let shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    let codes = _mm512_and_si512(_mm512_srlv_epi64(z, shifts), _mm512_set1_epi8(0x0F));
    _mm512_shuffle_epi8(t, codes)
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

/// Blocks whose scales [`tile32`] converts at once.
const SCALE_BLOCKS: usize = 16;

/// The f32 scales of the `n` (1..=16) blocks at `p`, `stride` bytes apart, in lanes 0..n
/// (lanes n.. unspecified): with `e8m0`, MXFP4's `2^(e - 128)` from each block's first byte
/// (`e8m0_to_f32_half`, exact in f32 for every `e`), else the f16 at each block's start
/// (IQ4_NL's and Q8_0's `d`, exact in f32).
///
/// The weights' scales are read with scalar loads packed into two (E8M0) or four (f16) u64s:
/// a 16-lane gather stalls on the row's next cache lines, scalar loads do not.
///
/// # Safety
/// CPU features as enabled; `n` blocks of at least 2 bytes, `stride` bytes apart, at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn scales16(p: *const u8, stride: usize, n: usize, e8m0: bool) -> __m512 {
    let n = n.min(SCALE_BLOCKS);
    if e8m0 {
        let mut x = [0u64; 2];
        for j in 0..n {
            // SAFETY: block j < n starts at `p + j * stride` (caller contract).
            x[j / 8] |= (unsafe { *p.add(j * stride) } as u64) << (8 * (j % 8));
        }
        let e = _mm512_cvtepu8_epi32(_mm_set_epi64x(x[1] as i64, x[0] as i64));
        // e >= 2: the normal f32 (e - 1) << 23; e = 0, 1: the subnormals 2^21 << e.
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub))
    } else {
        let mut x = [0u64; 4];
        for j in 0..n {
            // SAFETY: as above; the f16 is the block's first 2 bytes.
            let h = unsafe { (p.add(j * stride) as *const u16).read_unaligned() };
            x[j / 4] |= (h as u64) << (16 * (j % 4));
        }
        let h = _mm256_set_epi64x(x[3] as i64, x[2] as i64, x[1] as i64, x[0] as i64);
        _mm512_cvtph_ps(h)
    }
}

/// An RM x RN tile of a 32-value kind (IQ4_NL, MXFP4) over `nb` blocks.
///
/// Every [`SCALE_BLOCKS`] blocks, the products `c = d_w * d_a` of those blocks for each row
/// and token are computed 16 at a time ([`scales16`]) into a stack array, so the block loop
/// only broadcasts them from memory; per block pair and row it unpacks the codes once
/// ([`groups2`]) and does one `vpdpbusd`, one conversion and the two fmas of the reference's
/// order (the same f32 operations as the scalar twin).
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
    let tbl = table128::<K>();
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    let mut c = [[[0f32; SCALE_BLOCKS]; RN]; RM];
    let mut b0 = 0;
    while b0 < nb {
        let n = SCALE_BLOCKS.min(nb - b0);
        prefetch_ahead::<RM>(w, wr, b0 * bw, n * bw);
        let mut da = [_mm512_setzero_ps(); RN];
        for t in 0..RN {
            // SAFETY: blocks b0..b0 + n of token t are in bounds (caller contract).
            da[t] = unsafe { scales16(a.add(t * ar + b0 * 34), 34, n, false) };
        }
        for r in 0..RM {
            // SAFETY: blocks b0..b0 + n of row r are in bounds (caller contract).
            let dw = unsafe { scales16(w.add(r * wr + b0 * bw), bw, n, K == MXFP4) };
            for t in 0..RN {
                // SAFETY: `c[r][t]` holds 16 f32.
                unsafe { _mm512_storeu_ps(c[r][t].as_mut_ptr(), _mm512_mul_ps(dw, da[t])) };
            }
        }
        let mut j = 0;
        while j < n {
            // Two blocks, or the last one alone (its pair then reads block b again, unused).
            let b = b0 + j;
            let two = j + 1 < n;
            let b1 = if two { b + 1 } else { b };
            let mut wq = [_mm512_setzero_si512(); RM];
            for r in 0..RM {
                // SAFETY: blocks b and b1 of row r are in bounds (caller contract); the codes
                // follow each block's scale.
                wq[r] = unsafe {
                    let row = w.add(r * wr + qoff);
                    groups2(row.add(b * bw), row.add(b1 * bw), tbl)
                };
            }
            for t in 0..RN {
                // SAFETY: blocks b and b1 of token t (34 bytes each: f16 d, 32 quants).
                let aq = unsafe {
                    let (p0, p1) = (a.add(t * ar + b * 34), a.add(t * ar + b1 * 34));
                    let lo = _mm256_loadu_si256(p0.add(2) as *const __m256i);
                    let hi = _mm256_loadu_si256(p1.add(2) as *const __m256i);
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
                };
                let st = start(aq);
                for r in 0..RM {
                    let s = _mm512_cvtepi32_ps(dot4(st, wq[r], aq));
                    let mut x = acc[r][t];
                    x = _mm256_fmadd_ps(_mm256_set1_ps(c[r][t][j]), _mm512_castps512_ps256(s), x);
                    if two {
                        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                        x = _mm256_fmadd_ps(_mm256_set1_ps(c[r][t][j + 1]), hi, x);
                    }
                    acc[r][t] = x;
                }
            }
            j += 2;
        }
        b0 += n;
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
    let tbl = table128::<IQ4_XS>();
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
                    groups2(p, p.add(16), tbl)
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

/// The tile of kind `K` for `rm` rows x `rn` tokens: 8x1 (IQ4_NL, MXFP4), 4x1 and 4x2 register
/// tiles; other shapes as 4-row tiles per token, then single rows.
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
            (8, 1) if K != IQ4_XS => tile32::<K, 8, 1>(nb, w, wr, a, ar, out, os),
            (4, 1) => run!(4, 1, w, a, out),
            (4, 2) => run!(4, 2, w, a, out),
            _ => {
                for t in 0..rn {
                    let (a, out) = (a.add(t * ar), out.add(t * os));
                    let mut r = 0;
                    while r < rm {
                        if rm - r >= 4 {
                            run!(4, 1, w.add(r * wr), a, out.add(r));
                            r += 4;
                        } else {
                            run!(1, 1, w.add(r * wr), a, out.add(r));
                            r += 1;
                        }
                    }
                }
            }
        }
    }
}

/// The checked GEMM: IQ4_NL / MXFP4 batches of enough tokens through the panel GEMM
/// (`nonlinear_panel.rs`), else single tokens in tiles of 8 rows (IQ4_XS: 4), more in tiles
/// of 4 rows x 2 tokens, in panels of `ROWS_PER_PANEL` rows swept by all token tiles while
/// their weights are in cache (L2). Every path gives the same bits.
///
/// # Safety
/// The CPU has the features enabled here (AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C); the slices'
/// lengths are checked (`checked`), so no other contract is the caller's.
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
    // output cells; `tiles` passes tiles of rm <= 8 rows and rn <= RN tokens inside them.
    let run = |g: &crate::kernels::x86::legacy_tiles::Gemm, rm: usize, rn: usize| unsafe {
        tile::<K>(rm, rn, g.nb, g.w, g.wr, g.a, g.ar, g.out, g.os)
    };
    if n_tok == 1 && K != IQ4_XS {
        g.tiles::<8, 1>(n_rows, n_tok, ROWS_PER_PANEL, run)
    } else if n_tok == 1 {
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
