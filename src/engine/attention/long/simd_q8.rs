//! The SIMD tiles of the long-context order over a Q8_0 cache, read as stored: the i8 values
//! are widened in registers (`vpmovsxbd` + `vcvtdq2ps`, exact) and the f16 scales applied once
//! per 32 values of a K row (the scores) or once per V register (the weighted sum), in the
//! order of the scalar twin ([`super::dot_q8`] and [`super::tiles_scalar`]'s V step), so the
//! results are bit-identical to it.

use super::{LongScratch, TILE};
use crate::engine::attention::simd::Simd;
use crate::engine::kv_cache::kv_type::QK;
use half::f16;

/// The scores of every row of `sc` for the tile at `off` of a Q8_0 K tile (`k` `[d][bs]`
/// values, `ks` `[d / QK][bs]` scales) into `sc.s`, `S::SCORE_ROWS_Q8` rows a pass. With more
/// rows than one pass holds, the tile's values are widened to f32 once (exact, unscaled) for
/// all passes.
///
/// # Safety
/// `S`'s features; `k` and `ks` hold a whole tile of `sc.d` values per position for `bs`
/// positions, `off + TILE <= bs`, `sc.d` a multiple of [`QK`] and of `S::LANES`.
#[inline(always)]
pub(super) unsafe fn scores<S: Simd>(
    k: &[i8],
    ks: &[f16],
    bs: usize,
    off: usize,
    sc: &mut LongScratch,
    scale: f32,
) {
    let (d, n) = (sc.d, sc.n);
    assert!(k.len() >= d * bs && ks.len() * QK >= d * bs && off + TILE <= bs);
    let shared = n > S::SCORE_ROWS_Q8;
    if shared {
        for i in 0..d {
            for h in (0..TILE).step_by(S::LANES) {
                // SAFETY: i * bs + off + h + LANES <= (d - 1) * bs + bs = k.len() (asserted);
                // `kf` holds d * TILE values.
                unsafe {
                    let x = S::load_i8(k.as_ptr().add(i * bs + off + h));
                    S::store(sc.kf.as_mut_ptr().add(i * TILE + h), x);
                }
            }
        }
    }
    for h in (0..TILE).step_by(S::LANES) {
        let mut r0 = 0;
        while r0 < n {
            let rows = (n - r0).min(S::SCORE_ROWS_Q8);
            let q = sc.q[r0 * d..].as_ptr();
            let s = sc.s[r0 * TILE + h..].as_mut_ptr();
            // SAFETY: scale row b of the tile at ks + b * bs + off + h holds LANES values
            // (off + h + LANES <= bs); the values as above; rows r0.. of q and s are in bounds
            // (r0 + rows <= n <= MAX_ROWS).
            unsafe {
                let sp = ks.as_ptr().add(off + h);
                if shared {
                    let kp = sc.kf.as_ptr().add(h);
                    dispatch::<S, true>(rows, kp.cast(), TILE, sp, bs, d, q, scale, s);
                } else {
                    let kp = k.as_ptr().add(off + h);
                    dispatch::<S, false>(rows, kp.cast(), bs, sp, bs, d, q, scale, s);
                }
            }
            r0 += rows;
        }
    }
}

/// [`score_rows`] for `rows` rows (at most 8).
///
/// # Safety
/// As [`score_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dispatch<S: Simd, const F32K: bool>(
    rows: usize,
    k: *const u8,
    stride: usize,
    ks: *const f16,
    bs: usize,
    d: usize,
    q: *const f32,
    scale: f32,
    s: *mut f32,
) {
    // SAFETY: this function's contract.
    unsafe {
        match rows {
            1 => score_rows::<S, 1, F32K>(k, stride, ks, bs, d, q, scale, s),
            2 => score_rows::<S, 2, F32K>(k, stride, ks, bs, d, q, scale, s),
            3 => score_rows::<S, 3, F32K>(k, stride, ks, bs, d, q, scale, s),
            4 => score_rows::<S, 4, F32K>(k, stride, ks, bs, d, q, scale, s),
            5 => score_rows::<S, 5, F32K>(k, stride, ks, bs, d, q, scale, s),
            6 => score_rows::<S, 6, F32K>(k, stride, ks, bs, d, q, scale, s),
            7 => score_rows::<S, 7, F32K>(k, stride, ks, bs, d, q, scale, s),
            _ => score_rows::<S, 8, F32K>(k, stride, ks, bs, d, q, scale, s),
        }
    }
}

/// Scores of `R` rows for `S::LANES` positions, as [`super::dot_q8`]: the values of dimension
/// `i` at `k + i * stride` elements (f32 when `F32K`, else i8), the scales of block `b` at
/// `ks + b * bs`; `s[r] = t * scale`.
///
/// # Safety
/// `S`'s features; those addresses readable for `S::LANES` elements for every `i < d` and
/// `b < d / QK`; `q` holds `R` rows of `d`; `s + r * TILE` writable for `S::LANES` f32.
#[inline(always)]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn score_rows<S: Simd, const R: usize, const F32K: bool>(
    k: *const u8,
    stride: usize,
    ks: *const f16,
    bs: usize,
    d: usize,
    q: *const f32,
    scale: f32,
    s: *mut f32,
) {
    // SAFETY: this function's contract.
    unsafe {
        let mut t = [S::zero(); R];
        for blk in 0..d / QK {
            let mut parts = [[S::zero(); 2]; R];
            for i in (blk * QK..(blk + 1) * QK).step_by(2) {
                for j in 0..2 {
                    let kk = if F32K {
                        S::load(k.cast::<f32>().add((i + j) * stride))
                    } else {
                        S::load_i8(k.cast::<i8>().add((i + j) * stride))
                    };
                    for r in 0..R {
                        parts[r][j] = S::fma(S::set1(*q.add(r * d + i + j)), kk, parts[r][j]);
                    }
                }
            }
            let sk = S::load_f16(ks.add(blk * bs));
            for r in 0..R {
                t[r] = S::fma(S::add(parts[r][0], parts[r][1]), sk, t[r]);
            }
        }
        let sv = S::set1(scale);
        for r in 0..R {
            S::store(s.add(r * TILE), S::mul(t[r], sv));
        }
    }
}

/// The V scales of the tile at `off` of a Q8_0 V tile (`vs` `[bs][d / QK]`) into `sc.vsf` as
/// f32, `[TILE][d / QK]` (exact).
///
/// # Safety
/// `S`'s features; `vs` holds `bs * d / QK` scales, `off + TILE <= bs`.
#[inline(always)]
pub(super) unsafe fn v_scales<S: Simd>(vs: &[f16], off: usize, sc: &mut LongScratch) {
    let nb = sc.d / QK;
    let src = &vs[off * nb..][..TILE * nb];
    // TILE * nb is a multiple of TILE, hence of LANES.
    for j in (0..TILE * nb).step_by(S::LANES) {
        // SAFETY: j + LANES <= TILE * nb = src.len() <= sc.vsf.len().
        unsafe { S::store(sc.vsf.as_mut_ptr().add(j), S::load_f16(src.as_ptr().add(j))) };
    }
}

/// The tile's V values at `off` of a Q8_0 V tile (`v` `[bs][d]`) scaled into `sc.vf` as f32,
/// `[TILE][d]`: `f32(v) * sv` (exact), with the scales [`v_scales`] put in `sc.vsf`. For tiles
/// whose V vectors several passes of rows read (prefill): each is then widened once.
///
/// # Safety
/// `S`'s features; `v` holds `bs * sc.d` values, `off + TILE <= bs`; `sc.vsf` holds this
/// tile's scales.
#[inline(always)]
pub(super) unsafe fn widen_v<S: Simd>(v: &[i8], off: usize, sc: &mut LongScratch) {
    let d = sc.d;
    let src = &v[off * d..][..TILE * d];
    // TILE * d is a multiple of LANES, and so is QK: a register has one scale.
    for j in (0..TILE * d).step_by(S::LANES) {
        // SAFETY: j + LANES <= TILE * d = src.len() <= sc.vf.len(); j / QK < TILE * d / QK,
        // the scales in `vsf`.
        unsafe {
            let sv = S::set1(*sc.vsf.get_unchecked(j / QK));
            let x = S::mul(S::load_i8(src.as_ptr().add(j)), sv);
            S::store(sc.vf.as_mut_ptr().add(j), x);
        }
    }
}

/// [`v_rows`] for `rows` rows and `w` registers (at most 4 each).
///
/// # Safety
/// As [`v_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn v_rows_dispatch<S: Simd, const F32V: bool>(
    rows: usize,
    w: usize,
    v: *const i8,
    c0: usize,
    a: usize,
    b: usize,
    sc: &mut LongScratch,
    r0: usize,
) {
    macro_rules! go {
        ($(($r:literal, $w:literal))*) => {
            match (rows, w) {
                // SAFETY: this function's contract.
                $(($r, $w) => unsafe { v_rows::<S, $r, $w, F32V>(v, c0, a, b, sc, r0) },)*
                _ => unreachable!("at most 4 rows and 4 registers"),
            }
        };
    }
    go!(
        (1, 1)(1, 2)(1, 3)(1, 4)(2, 1)(2, 2)(2, 3)(2, 4)(3, 1)(3, 2)(3, 3)(3, 4)(4, 1)(4, 2)(4, 3)(
            4, 4
        )
    )
}

/// Rows `r0..r0 + R`, registers `c0..c0 + W` of the accumulator: rescaled by the tile's `c`,
/// then `acc = fma(p, f32(v) * sv, acc)` for the tile's lanes `a..b` in order (`sv` from
/// `sc.vsf`, see [`v_scales`]; with `F32V` the products are read from `sc.vf`, see
/// [`widen_v`], and `v` is unused).
///
/// # Safety
/// `S`'s features; `v + lane * d + (c0 + W) * LANES` readable for lanes below `b` (or `sc.vf`
/// holding the tile); the rows and registers inside `sc`; `sc.vsf` holds this tile's scales.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn v_rows<S: Simd, const R: usize, const W: usize, const F32V: bool>(
    v: *const i8,
    c0: usize,
    a: usize,
    b: usize,
    sc: &mut LongScratch,
    r0: usize,
) {
    // SAFETY: this function's contract.
    unsafe {
        let d = sc.d;
        let nb = d / QK;
        let acc = sc.acc.as_mut_ptr().add(r0 * d + c0 * S::LANES);
        let probs = sc.s.as_ptr().add(r0 * TILE);
        let vsf = sc.vsf.as_ptr();
        let vf = sc.vf.as_ptr();
        let mut x = [[S::zero(); W]; R];
        for r in 0..R {
            let c = S::set1(*sc.c.get_unchecked(r0 + r));
            for w in 0..W {
                x[r][w] = S::mul(S::load(acc.add(r * d + w * S::LANES)), c);
            }
        }
        for lane in a..b {
            let mut vv = [S::zero(); W];
            for w in 0..W {
                let col = (c0 + w) * S::LANES;
                vv[w] = if F32V {
                    S::load(vf.add(lane * d + col))
                } else {
                    let sv = S::set1(*vsf.add(lane * nb + col / QK));
                    S::mul(S::load_i8(v.add(lane * d + col)), sv)
                };
            }
            for r in 0..R {
                let p = S::set1(*probs.add(r * TILE + lane));
                for w in 0..W {
                    x[r][w] = S::fma(p, vv[w], x[r][w]);
                }
            }
        }
        for r in 0..R {
            for w in 0..W {
                S::store(acc.add(r * d + w * S::LANES), x[r][w]);
            }
        }
    }
}
