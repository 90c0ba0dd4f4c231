//! AVX2 (+FMA, F16C) kernels for IQ4_NL, MXFP4 (x Q8_0) and IQ4_XS (x Q8_K) weights: twins
//! of `scalar/nonlinear.rs`, bit for bit (its module doc states the float order).
//!
//! A 32-value group's 16 code bytes become 32 signed bytes in value order with one `vpshufb`
//! into the 16-entry table (low nibbles: values 0..16, high nibbles: 16..32, the table in both
//! 128-bit lanes). The products go through `vpmaddubsw` with the sign trick (`|w|` times
//! `a * sign(w)`: table values and activation quants lie in -127..=127, so no pair saturates)
//! and `vpmaddwd`, which leaves lane `i` = the exact sum of values `4i..4i+4`: the reference's
//! lanes. IQ4_XS multiplies the pairs by the group's `ls - 32` in the same `vpmaddwd` and sums
//! the eight groups in i32 before its one fma per super-block. Register tiles of RM rows x RN
//! tokens unpack each weight group once per tile; every output keeps its own lanes, so the
//! tiling never changes a result.

use std::arch::x86_64::*;

use crate::kernels::blocks::nonlinear::IQ4_XS_BYTES;
use crate::kernels::shape::check_vec_dot;
use crate::kernels::x86::nonlinear_tiles::{
    adt, checked, nonlinear_entry_points, prefetch_ahead, table, wdt, IQ4_XS, MXFP4, ROWS_PER_PANEL,
};
use crate::kernels::DType;

/// Reads an f16 at `p` as f32 (F16C `vcvtph2ps`: exact, as every f16 -> f32 conversion).
///
/// # Safety
/// AVX2/FMA/F16C; 2 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The 16-entry table of kind `K` in both 128-bit lanes: the `vpshufb` table of [`group`],
/// built once per tile.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table256<const K: u8>() -> __m256i {
    let t = table(K);
    // SAFETY: `t` is 16 bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) })
}

/// The 32 values of the group whose 16 code bytes are at `p`, as signed bytes in value order;
/// `t` is [`table256`].
///
/// # Safety
/// AVX2; 16 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group(p: *const u8, t: __m256i) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let x = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i)) };
    // Low nibbles in the low 128-bit lane, high nibbles in the high one.
    let codes = _mm256_and_si256(
        _mm256_srlv_epi64(x, _mm256_set_epi64x(4, 4, 0, 0)),
        _mm256_set1_epi8(0x0F),
    );
    _mm256_shuffle_epi8(t, codes)
}

/// Blocks whose scales [`tile32`] converts at once.
const SCALE_BLOCKS: usize = 8;

/// The f32 scales of the `n` (1..=8) blocks at `p`, `stride` bytes apart, in lanes 0..n (lanes
/// n.. unspecified): with `e8m0`, MXFP4's `2^(e - 128)` from each block's first byte
/// (`e8m0_to_f32_half`, exact in f32 for every `e`), else the f16 at each block's start
/// (IQ4_NL's and Q8_0's `d`, exact in f32). Scalar loads packed into u64s (a gather stalls on
/// the row's next cache lines).
///
/// # Safety
/// AVX2/FMA/F16C; `n` blocks of at least 2 bytes, `stride` bytes apart, at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales8(p: *const u8, stride: usize, n: usize, e8m0: bool) -> __m256 {
    let n = n.min(SCALE_BLOCKS);
    if e8m0 {
        let mut x = 0u64;
        for j in 0..n {
            // SAFETY: block j < n starts at `p + j * stride` (caller contract).
            x |= (unsafe { *p.add(j * stride) } as u64) << (8 * j);
        }
        let e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(x as i64));
        // e >= 2: the normal f32 (e - 1) << 23; e = 0, 1: the subnormals 2^21 << e.
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
    } else {
        let mut x = [0u64; 2];
        for j in 0..n {
            // SAFETY: as above; the f16 is the block's first 2 bytes.
            let h = unsafe { (p.add(j * stride) as *const u16).read_unaligned() };
            x[j / 4] |= (h as u64) << (16 * (j % 4));
        }
        _mm256_cvtph_ps(_mm_set_epi64x(x[1] as i64, x[0] as i64))
    }
}

/// The 16 products-pair sums `w * a` of signed bytes, given `wa = |w|` (exact: |w|, |a| <=
/// 127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pairs(wa: __m256i, w: __m256i, a: __m256i) -> __m256i {
    _mm256_maddubs_epi16(wa, _mm256_sign_epi8(a, w))
}

/// The reference's `hsum8` order: `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum8(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

/// An RM x RN tile of a 32-value kind (IQ4_NL, MXFP4) over `nb` blocks.
///
/// # Safety
/// AVX2/FMA/F16C; RM weight rows `wr` bytes apart at `w` and RN Q8_0 rows `ar` bytes apart at
/// `a`, each of `nb` blocks, and the RM x RN output cells (`out[t * os + r]`) in bounds.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
    let ones = _mm256_set1_epi16(1);
    let tbl = table256::<K>();
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    let mut c = [[[0f32; SCALE_BLOCKS]; RN]; RM];
    let mut b0 = 0;
    while b0 < nb {
        let n = SCALE_BLOCKS.min(nb - b0);
        prefetch_ahead::<RM>(w, wr, b0 * bw, n * bw);
        let mut da = [_mm256_setzero_ps(); RN];
        for t in 0..RN {
            // SAFETY: blocks b0..b0 + n of token t are in bounds (caller contract).
            da[t] = unsafe { scales8(a.add(t * ar + b0 * 34), 34, n, false) };
        }
        for r in 0..RM {
            // SAFETY: blocks b0..b0 + n of row r are in bounds (caller contract).
            let dw = unsafe { scales8(w.add(r * wr + b0 * bw), bw, n, K == MXFP4) };
            for t in 0..RN {
                // SAFETY: `c[r][t]` holds 8 f32.
                unsafe { _mm256_storeu_ps(c[r][t].as_mut_ptr(), _mm256_mul_ps(dw, da[t])) };
            }
        }
        for j in 0..n {
            let b = b0 + j;
            let mut wq = [_mm256_setzero_si256(); RM];
            let mut wa = [_mm256_setzero_si256(); RM];
            for r in 0..RM {
                // SAFETY: block b of row r is in bounds (caller contract); the codes follow
                // the block's scale.
                wq[r] = unsafe { group(w.add(r * wr + b * bw + qoff), tbl) };
                wa[r] = _mm256_abs_epi8(wq[r]);
            }
            for t in 0..RN {
                // SAFETY: block b of token t (34 bytes: f16 d, 32 quants) is in bounds.
                let aq =
                    unsafe { _mm256_loadu_si256(a.add(t * ar + b * 34 + 2) as *const __m256i) };
                for r in 0..RM {
                    let s = _mm256_madd_epi16(pairs(wa[r], wq[r], aq), ones);
                    let c = _mm256_set1_ps(c[r][t][j]);
                    acc[r][t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(s), acc[r][t]);
                }
            }
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

/// The eight `ls - 32` of an IQ4_XS super-block at `p`, as i16 broadcasts.
///
/// # Safety
/// AVX2; a whole super-block at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn xs_scales(p: *const u8) -> [__m256i; 8] {
    // SAFETY: scales_h is bytes 2..4, scales_l bytes 4..8 of the super-block.
    let (h, l) = unsafe { ((p.add(2) as *const u16).read_unaligned(), p.add(4)) };
    std::array::from_fn(|g| {
        // SAFETY: g / 2 < 4.
        let lo = (unsafe { *l.add(g / 2) } >> (4 * (g % 2))) & 0x0F;
        let ls = (lo | ((((h >> (2 * g)) & 3) as u8) << 4)) as i16 - 32;
        _mm256_set1_epi16(ls)
    })
}

/// An RM x RN tile of IQ4_XS over `nb` super-blocks (Q8_K activations: f32 d, 256 quants).
///
/// # Safety
/// As [`tile32`], with IQ4_XS rows and Q8_K activation rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
    let tbl = table256::<IQ4_XS>();
    let mut acc = [[_mm256_setzero_ps(); RN]; RM];
    for b in 0..nb {
        let mut sc = [[_mm256_setzero_si256(); 8]; RM];
        let mut wd = [0f32; RM];
        for r in 0..RM {
            // SAFETY: super-block b of row r is in bounds (caller contract).
            let p = unsafe { w.add(r * wr + b * IQ4_XS_BYTES) };
            // SAFETY: as above.
            (sc[r], wd[r]) = unsafe { (xs_scales(p), f16_at(p)) };
        }
        let mut sum = [[_mm256_setzero_si256(); RN]; RM];
        for g in 0..8 {
            let mut wq = [_mm256_setzero_si256(); RM];
            let mut wa = [_mm256_setzero_si256(); RM];
            for r in 0..RM {
                // SAFETY: group g's 16 code bytes are at 8 + 16 g in the super-block.
                wq[r] = unsafe { group(w.add(r * wr + b * IQ4_XS_BYTES + 8 + 16 * g), tbl) };
                wa[r] = _mm256_abs_epi8(wq[r]);
            }
            for t in 0..RN {
                // SAFETY: the Q8_K block's quants 32g..32g+32 (after its f32 d) are in bounds.
                let aq = unsafe {
                    _mm256_loadu_si256(a.add(t * ar + b * ab + 4 + 32 * g) as *const __m256i)
                };
                for r in 0..RM {
                    let s = _mm256_madd_epi16(pairs(wa[r], wq[r], aq), sc[r][g]);
                    sum[r][t] = _mm256_add_epi32(sum[r][t], s);
                }
            }
        }
        for t in 0..RN {
            // SAFETY: the Q8_K block's f32 d is its first 4 bytes.
            let da = unsafe { (a.add(t * ar + b * ab) as *const f32).read_unaligned() };
            for r in 0..RM {
                let c = _mm256_set1_ps(wd[r] * da);
                acc[r][t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(sum[r][t]), acc[r][t]);
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

/// The tile of kind `K` for `rm` rows x `rn` tokens: 4x1 and 2x2 register tiles; other shapes
/// as 4-row tiles per token, then single rows.
///
/// # Safety
/// As [`tile32`] for `rm` rows and `rn` tokens.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
            (2, 2) => run!(2, 2, w, a, out),
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

/// The checked GEMM: single tokens in tiles of 4 rows, more in tiles of 2 rows x 2 tokens, in
/// panels of `ROWS_PER_PANEL` rows swept by all token tiles while their weights are in cache
/// (L2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
    // SAFETY: (both walks) `checked` checked n_rows weight rows, n_tok activation rows and the
    // output cells; `tiles` passes tiles of rm <= RM rows and rn <= RN tokens inside them.
    let run = |g: &crate::kernels::x86::legacy_tiles::Gemm, rm: usize, rn: usize| unsafe {
        tile::<K>(rm, rn, g.nb, g.w, g.wr, g.a, g.ar, g.out, g.os)
    };
    if n_tok == 1 {
        g.tiles::<4, 1>(n_rows, n_tok, ROWS_PER_PANEL, run)
    } else {
        g.tiles::<2, 2>(n_rows, n_tok, ROWS_PER_PANEL, run)
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot<const K: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_vec_dot(n, wdt(K), w.len(), adt(K), a.len());
    let mut out = 0f32;
    let nb = n / wdt(K).block_elems();
    // SAFETY: lengths checked; one output cell.
    unsafe { tile::<K>(1, 1, nb, w.as_ptr(), 0, a.as_ptr(), 0, &mut out, 0) };
    out
}

nonlinear_entry_points!("AVX2", "avx2,fma,f16c", "AVX2, FMA and F16C");
