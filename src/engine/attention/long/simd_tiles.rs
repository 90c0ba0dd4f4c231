//! The SIMD tiles of the long-context order ([`super`]), one body over any x86 vector width
//! ([`Simd`]), bit-identical to the scalar twin [`super::tiles_scalar`]. A Q8_0 cache's scores
//! and weighted V sum are `simd_q8`'s.

use super::simd_q8;
use super::{lanes, simd_covers, HeadView, LongScratch, TILE};
use crate::engine::attention::simd::Simd;
use crate::engine::kv_cache::LayerKv;
use half::f16;

/// AVX-512 instantiation of [`tiles_simd`].
///
/// # Safety
/// AVX-512F, FMA and F16C; [`super::simd_covers`] accepts the view's shape.
#[target_feature(enable = "avx512f,fma,f16c")]
pub(super) unsafe fn tiles_avx512(
    view: &mut HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    // SAFETY: this function's contract.
    unsafe { tiles_simd::<crate::engine::attention::simd::Avx512>(view, sc, begin, end, scale) }
}

/// AVX2 instantiation of [`tiles_simd`].
///
/// # Safety
/// AVX2, FMA and F16C; [`super::simd_covers`] accepts the view's shape.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tiles_avx2(
    view: &mut HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    // SAFETY: this function's contract.
    unsafe { tiles_simd::<crate::engine::attention::simd::Avx2>(view, sc, begin, end, scale) }
}

/// The SIMD twin of [`super::tiles_scalar`] over any width: per tile, the scores of up to
/// `S::SCORE_ROWS` rows at once (vectorized over positions, each K vector converted once for
/// all of them), the softmax step per row, then the weighted V sum of up to `S::V_ROWS` rows
/// in registers (each V vector converted once for all of them).
///
/// # Safety
/// The CPU supports `S`'s features; [`super::simd_covers`] accepts the view's shape.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices address registers of several rows
unsafe fn tiles_simd<S: Simd>(
    view: &mut HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    let (d, bs, n) = (view.head_dim, view.block_size, sc.n);
    assert!(simd_covers(d, bs) && d.is_multiple_of(S::LANES));
    for t0 in (begin..end).step_by(TILE) {
        let raw = view.raw_tile(t0 / bs);
        let off = t0 % bs;
        if let LayerKv::Q8 { .. } = raw {
            // The tiles of the block after next load while this one is computed (a sequence's
            // blocks lie anywhere in the cache, so the hardware prefetchers restart at every
            // block); the first tile also starts the next block.
            let blk = t0 / bs;
            if t0 == begin && (blk + 1) * bs < end {
                view.prefetch_block(blk + 1);
            }
            if (off == 0 || t0 == begin) && (blk + 2) * bs < end {
                view.prefetch_block(blk + 2);
            }
        }
        let mut full = true;
        for r in 0..n {
            let (a, b) = lanes(sc.lo[r], sc.hi[r], t0);
            sc.lanes[r] = (a, b);
            full &= a == 0 && b == TILE;
        }
        match raw {
            // SAFETY: the tile holds bs positions of d values, off + TILE <= bs (a tile lies
            // in one block, `simd_covers`); `S`'s features are this function's contract.
            LayerKv::F16 { k, .. } => unsafe { scores_f16::<S>(k, bs, off, sc, scale) },
            // SAFETY: as above; a Q8_0 cache's head_dim is a multiple of QK.
            LayerKv::Q8 { k, k_scale: ks, .. } => unsafe {
                simd_q8::scores::<S>(k, ks, bs, off, sc, scale)
            },
        }
        // The softmax step of each row.
        for r in 0..n {
            let (a, b) = sc.lanes[r];
            sc.c[r] = 1.0;
            if a >= b {
                continue;
            }
            let s = sc.s[r * TILE..][..TILE].as_mut_ptr();
            let lv = sc.lv[r * TILE..][..TILE].as_mut_ptr();
            // SAFETY: `s` and `lv` hold TILE values, a multiple of LANES.
            unsafe {
                let mut tmax = f32::NEG_INFINITY;
                for h in (0..TILE).step_by(S::LANES) {
                    let x = S::mask_outside(
                        S::load(s.add(h)),
                        a.saturating_sub(h),
                        b.saturating_sub(h),
                    );
                    S::store(s.add(h), x);
                    tmax = tmax.max(S::hmax(x));
                }
                if tmax > sc.m[r] {
                    sc.c[r] = (sc.m[r] - tmax).exp();
                    sc.m[r] = tmax;
                }
                let (m, c) = (S::set1(sc.m[r]), S::set1(sc.c[r]));
                for h in (0..TILE).step_by(S::LANES) {
                    let p = S::exp_fast(S::sub(S::load(s.add(h)), m));
                    S::store(s.add(h), p);
                    S::store(lv.add(h), S::add(S::mul(S::load(lv.add(h)), c), p));
                }
            }
        }
        // The weighted V sum.
        match raw {
            LayerKv::F16 { v, .. } => {
                // SAFETY: positions off..off + TILE of d values lie in the V tile.
                unsafe { weighted_v::<S, V_F16>(v[off * d..].as_ptr().cast(), full, sc) }
            }
            LayerKv::Q8 { v, v_scale: vs, .. } => {
                // SAFETY: as above; `vs` holds the tile's bs * d / QK scales.
                unsafe {
                    simd_q8::v_scales::<S>(vs, off, sc);
                    // Read by more than one pass of rows: widened and scaled once (exact, so
                    // the same products).
                    if n > 1 && (!full || n > S::V_ROWS) {
                        simd_q8::widen_v::<S>(v, off, sc);
                        weighted_v::<S, V_Q8_F32>(v[off * d..].as_ptr().cast(), full, sc);
                    } else {
                        weighted_v::<S, V_Q8>(v[off * d..].as_ptr().cast(), full, sc);
                    }
                }
            }
        }
    }
}

/// The scores of every row of `sc` for the tile at `off` of an f16 K tile `kt` (`[d][bs]`)
/// into `sc.s`, `S::SCORE_ROWS` rows a pass.
///
/// # Safety
/// `S`'s features; `kt` holds `sc.d * bs` values, `off + TILE <= bs`.
#[inline(always)]
unsafe fn scores_f16<S: Simd>(kt: &[f16], bs: usize, off: usize, sc: &mut LongScratch, scale: f32) {
    let (d, n) = (sc.d, sc.n);
    // `kt` is `[d][bs]`, so positions off.. of dimension i are contiguous. With more rows than
    // one pass holds, the tile is widened to f32 once for all passes (an exact conversion: the
    // same scores).
    let shared = n > S::SCORE_ROWS;
    if shared {
        for i in 0..d {
            for h in (0..TILE).step_by(S::LANES) {
                // SAFETY: i * bs + off + h + LANES <= (d - 1) * bs + bs = kt.len() since
                // off + TILE <= bs; `kf` holds d * TILE values.
                unsafe {
                    let x = S::load_f16(kt.as_ptr().add(i * bs + off + h));
                    S::store(sc.kf.as_mut_ptr().add(i * TILE + h), x);
                }
            }
        }
    }
    for h in (0..TILE).step_by(S::LANES) {
        let mut r0 = 0;
        while r0 < n {
            let rows = (n - r0).min(S::SCORE_ROWS);
            let q = sc.q[r0 * d..].as_ptr();
            let s = sc.s[r0 * TILE + h..].as_mut_ptr();
            // SAFETY: as above for `kt` and `kf`; rows r0.. of q and s are in bounds
            // (r0 + rows <= n <= MAX_ROWS).
            unsafe {
                if shared {
                    let k = sc.kf.as_ptr().add(h);
                    score_dispatch::<S, true>(rows, k.cast(), TILE, d, q, scale, s);
                } else {
                    let k = kt.as_ptr().add(off + h);
                    score_dispatch::<S, false>(rows, k.cast(), bs, d, q, scale, s);
                }
            }
            r0 += rows;
        }
    }
}

/// What [`weighted_v`] reads: f16 values, a Q8_0 tile's i8 values (scales in `sc.vsf`), or
/// its values widened and scaled in `sc.vf`.
const V_F16: u8 = 0;
const V_Q8: u8 = 1;
const V_Q8_F32: u8 = 2;

/// The weighted V sum of every row of `sc` over the tile's positions (`v` its first position's
/// `d` values, as `V` says), `S::V_W` registers of `S::V_ROWS` rows at a time when every row
/// attends the whole tile (`full`), else row by row.
///
/// # Safety
/// `S`'s features; `v` readable for `TILE * sc.d` values.
#[inline(always)]
unsafe fn weighted_v<S: Simd, const V: u8>(v: *const u8, full: bool, sc: &mut LongScratch) {
    let (d, n) = (sc.d, sc.n);
    let regs = d / S::LANES;
    let mut c0 = 0;
    while c0 < regs {
        let w = (regs - c0).min(S::V_W);
        if full {
            let mut r0 = 0;
            while r0 < n {
                let rows = (n - r0).min(S::V_ROWS);
                // SAFETY: rows r0..r0 + rows and registers c0..c0 + w are in bounds; the
                // V tile holds positions off..off + TILE of d values.
                unsafe { v_dispatch::<S, V>(rows, w, v, c0, 0, TILE, sc, r0) };
                r0 += rows;
            }
        } else {
            for r in 0..n {
                let (a, b) = sc.lanes[r];
                if a < b {
                    // SAFETY: as above, one row.
                    unsafe { v_dispatch::<S, V>(1, w, v, c0, a, b, sc, r) };
                }
            }
        }
        c0 += w;
    }
}

/// The V rows kernel of kind `V` (see [`weighted_v`]).
///
/// # Safety
/// As [`v_rows`] (or `simd_q8`'s).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn v_dispatch<S: Simd, const V: u8>(
    rows: usize,
    w: usize,
    v: *const u8,
    c0: usize,
    a: usize,
    b: usize,
    sc: &mut LongScratch,
    r0: usize,
) {
    let d = sc.d;
    // SAFETY: this function's contract.
    unsafe {
        match V {
            V_F16 => v_rows_dispatch::<S>(rows, w, v.cast(), d, c0, a, b, sc, r0),
            V_Q8 => simd_q8::v_rows_dispatch::<S, false>(rows, w, v.cast(), c0, a, b, sc, r0),
            _ => simd_q8::v_rows_dispatch::<S, true>(rows, w, v.cast(), c0, a, b, sc, r0),
        }
    }
}

/// [`score_rows`] for `rows` rows (at most 6).
///
/// # Safety
/// As [`score_rows`].
#[inline(always)]
unsafe fn score_dispatch<S: Simd, const F32K: bool>(
    rows: usize,
    k: *const u8,
    stride: usize,
    d: usize,
    q: *const f32,
    scale: f32,
    s: *mut f32,
) {
    // SAFETY: this function's contract.
    unsafe {
        match rows {
            1 => score_rows::<S, 1, F32K>(k, stride, d, q, scale, s),
            2 => score_rows::<S, 2, F32K>(k, stride, d, q, scale, s),
            3 => score_rows::<S, 3, F32K>(k, stride, d, q, scale, s),
            4 => score_rows::<S, 4, F32K>(k, stride, d, q, scale, s),
            5 => score_rows::<S, 5, F32K>(k, stride, d, q, scale, s),
            _ => score_rows::<S, 6, F32K>(k, stride, d, q, scale, s),
        }
    }
}

/// Scores of `R` rows for `S::LANES` positions: `s[r] = dot4(q[r], k) * scale`, the K values
/// of dimension `i` at `k + i * stride` elements (f32 when `F32K`, else f16).
///
/// # Safety
/// `S`'s features; `k + i * stride` readable for `S::LANES` elements for every `i < d`; `q`
/// holds `R` rows of `d`; `s + r * TILE` writable for `S::LANES` f32.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn score_rows<S: Simd, const R: usize, const F32K: bool>(
    k: *const u8,
    bs: usize,
    d: usize,
    q: *const f32,
    scale: f32,
    s: *mut f32,
) {
    // SAFETY: this function's contract.
    unsafe {
        let mut parts = [[S::zero(); 4]; R];
        let mut i = 0;
        while i < d {
            for j in 0..4 {
                let kk = if F32K {
                    S::load(k.cast::<f32>().add((i + j) * bs))
                } else {
                    S::load_f16(k.cast::<f16>().add((i + j) * bs))
                };
                for r in 0..R {
                    parts[r][j] = S::fma(S::set1(*q.add(r * d + i + j)), kk, parts[r][j]);
                }
            }
            i += 4;
        }
        let sv = S::set1(scale);
        for r in 0..R {
            let [p0, p1, p2, p3] = parts[r];
            let x = S::add(S::add(p0, p1), S::add(p2, p3));
            S::store(s.add(r * TILE), S::mul(x, sv));
        }
    }
}

/// [`v_rows`] for `rows` rows and `w` registers (at most 4 each).
///
/// # Safety
/// As [`v_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn v_rows_dispatch<S: Simd>(
    rows: usize,
    w: usize,
    v: *const f16,
    d: usize,
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
                $(($r, $w) => unsafe { v_rows::<S, $r, $w>(v, d, c0, a, b, sc, r0) },)*
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
/// then `acc = fma(p, v, acc)` for the tile's lanes `a..b` in order.
///
/// # Safety
/// `S`'s features; `v + lane * d + (c0 + W) * LANES` readable for lanes below `b`; the rows and
/// registers inside `sc`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn v_rows<S: Simd, const R: usize, const W: usize>(
    v: *const f16,
    d: usize,
    c0: usize,
    a: usize,
    b: usize,
    sc: &mut LongScratch,
    r0: usize,
) {
    // SAFETY: this function's contract.
    unsafe {
        let acc = sc.acc.as_mut_ptr().add(r0 * d + c0 * S::LANES);
        let probs = sc.s.as_ptr().add(r0 * TILE);
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
                vv[w] = S::load_f16(v.add(lane * d + (c0 + w) * S::LANES));
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
