//! The SIMD tiles of the long-context order ([`super`]), one body over any x86 vector width
//! ([`Simd`]) and either kind of cache ([`KvElem`]: f16, or Q8_0 read as stored),
//! bit-identical to the scalar twin [`super::tiles_scalar`].

use super::kv_tile::{KvElem, KvTile, ScorePass};
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
/// a score pass of rows at once (vectorized over positions, each K vector converted once for
/// all of them), the softmax step per row, then the weighted V sum of up to `S::V_ROWS` rows
/// in registers (each V vector converted once for all of them).
///
/// # Safety
/// The CPU supports `S`'s features; [`super::simd_covers`] accepts the view's shape.
#[inline(always)]
unsafe fn tiles_simd<S: Simd>(
    view: &mut HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    let (d, bs) = (view.head_dim, view.block_size);
    assert!(simd_covers(d, bs) && d.is_multiple_of(S::LANES));
    for t0 in (begin..end).step_by(TILE) {
        let blk = t0 / bs;
        match view.raw_tile(blk) {
            LayerKv::F16 { k, v } => {
                // SAFETY: the tile holds bs positions of d values, off + TILE <= bs (a tile
                // lies in one block, `simd_covers`); `S`'s features are this function's
                // contract.
                unsafe {
                    let kv = KvTile {
                        k,
                        v,
                        ks: &[],
                        vs: &[],
                    };
                    tile::<S, f16>(kv, bs, t0, sc, scale)
                }
            }
            LayerKv::Q8 {
                k,
                v,
                k_scale: ks,
                v_scale: vs,
            } => {
                // The tiles of the block after next load while this one is computed (a
                // sequence's blocks lie anywhere in the cache, so the hardware prefetchers
                // restart at every block); the first tile also starts the next block.
                if t0 == begin && (blk + 1) * bs < end {
                    view.prefetch_block(blk + 1);
                }
                if (t0 % bs == 0 || t0 == begin) && (blk + 2) * bs < end {
                    view.prefetch_block(blk + 2);
                }
                // SAFETY: as above; a Q8_0 cache's head_dim is a multiple of QK.
                unsafe { tile::<S, i8>(KvTile { k, v, ks, vs }, bs, t0, sc, scale) }
            }
        }
    }
}

/// The tile of positions `t0..t0 + TILE` of every row of `sc` from the block's K/V tile `kv`
/// (`bs` positions): scores, softmax step, weighted V sum.
///
/// # Safety
/// As [`tiles_simd`], `kv` the block holding position `t0`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices address several rows' state
unsafe fn tile<S: Simd, E: KvElem>(
    kv: KvTile<'_, E>,
    bs: usize,
    t0: usize,
    sc: &mut LongScratch,
    scale: f32,
) {
    let (d, n, off) = (sc.d, sc.n, t0 % bs);
    let mut full = true;
    for r in 0..n {
        let (a, b) = lanes(sc.lo[r], sc.hi[r], t0);
        sc.lanes[r] = (a, b);
        full &= a == 0 && b == TILE;
    }
    // SAFETY: this function's contract.
    unsafe { scores::<S, E>(&kv, bs, off, sc, scale) };
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
                let x =
                    S::mask_outside(S::load(s.add(h)), a.saturating_sub(h), b.saturating_sub(h));
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
    // The weighted V sum. V vectors read by more than one pass of rows are widened and scaled
    // once where the kind scales them (exact, so the same products).
    let widen = n > 1 && (!full || n > S::V_ROWS);
    let v = kv.v[off * d..].as_ptr();
    // SAFETY: positions off..off + TILE of d values lie in the V tile.
    unsafe {
        if E::prepare_v::<S>(&kv, off, widen, sc) {
            weighted_v::<S, E, true>(v, full, sc)
        } else {
            weighted_v::<S, E, false>(v, full, sc)
        }
    }
}

/// The scores of every row of `sc` for the tile at `off` of the K tile (`[d][bs]`) into
/// `sc.s`, [`KvElem::score_pass`] rows a pass. With more rows than one pass holds, the tile's
/// values are widened to f32 once for all passes (exact, unscaled: the same scores).
///
/// # Safety
/// `S`'s features; `off + TILE <= bs`, `sc.d` a multiple of `S::LANES` (and of QK for Q8_0).
#[inline(always)]
unsafe fn scores<S: Simd, E: KvElem>(
    kv: &KvTile<'_, E>,
    bs: usize,
    off: usize,
    sc: &mut LongScratch,
    scale: f32,
) {
    let (d, n) = (sc.d, sc.n);
    assert!(kv.covers(d, bs) && off + TILE <= bs);
    let kt = kv.k;
    // `kt` is `[d][bs]`, so positions off.. of dimension i are contiguous.
    let pass = E::score_pass::<S>();
    let shared = n > pass;
    if shared {
        for i in 0..d {
            for h in (0..TILE).step_by(S::LANES) {
                // SAFETY: i * bs + off + h + LANES <= (d - 1) * bs + bs <= kt.len() (asserted);
                // `kf` holds d * TILE values.
                unsafe {
                    let x = E::widen::<S>(kt.as_ptr().add(i * bs + off + h));
                    S::store(sc.kf.as_mut_ptr().add(i * TILE + h), x);
                }
            }
        }
    }
    for h in (0..TILE).step_by(S::LANES) {
        let mut r0 = 0;
        while r0 < n {
            let rows = (n - r0).min(pass);
            let q = sc.q[r0 * d..].as_ptr();
            let s = sc.s[r0 * TILE + h..].as_mut_ptr();
            let (k, stride) = if shared {
                (sc.kf.as_ptr().wrapping_add(h).cast(), TILE)
            } else {
                (kt.as_ptr().wrapping_add(off + h).cast(), bs)
            };
            let p = ScorePass {
                k,
                stride,
                at: off + h,
                bs,
                d,
                q,
                scale,
                s,
            };
            // SAFETY: as above for `kt` and `kf`; rows r0.. of q and s are in bounds
            // (r0 + rows <= n <= MAX_ROWS).
            unsafe {
                if shared {
                    score_dispatch::<S, E, true>(kv.ks, rows, &p)
                } else {
                    score_dispatch::<S, E, false>(kv.ks, rows, &p)
                }
            }
            r0 += rows;
        }
    }
}

/// [`KvElem::score_rows`] for `rows` rows (at most a score pass: 8 at the most).
///
/// # Safety
/// As [`KvElem::score_rows`].
#[inline(always)]
unsafe fn score_dispatch<S: Simd, E: KvElem, const F32K: bool>(
    ks: &[f16],
    rows: usize,
    p: &ScorePass,
) {
    macro_rules! go {
        ($r:literal) => {
            E::score_rows::<S, $r, F32K>(ks, p)
        };
    }
    let pass = E::score_pass::<S>();
    // SAFETY: this function's contract.
    unsafe {
        match rows {
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            4 => go!(4),
            5 => go!(5),
            _ if pass <= 6 => go!(6),
            6 => go!(6),
            7 => go!(7),
            _ => go!(8),
        }
    }
}

/// The weighted V sum of every row of `sc` over the tile's positions (`v` its first position's
/// `d` values; with `F32V` the values in `sc.vf`), `S::V_W` registers of `S::V_ROWS` rows at a
/// time when every row attends the whole tile (`full`), else row by row.
///
/// # Safety
/// `S`'s features; `v` readable for `TILE * sc.d` values; [`KvElem::prepare_v`] readied `sc`
/// for this tile (returning `F32V`).
#[inline(always)]
unsafe fn weighted_v<S: Simd, E: KvElem, const F32V: bool>(
    v: *const E,
    full: bool,
    sc: &mut LongScratch,
) {
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
                unsafe { v_rows_dispatch::<S, E, F32V>(rows, w, v, c0, 0, TILE, sc, r0) };
                r0 += rows;
            }
        } else {
            for r in 0..n {
                let (a, b) = sc.lanes[r];
                if a < b {
                    // SAFETY: as above, one row.
                    unsafe { v_rows_dispatch::<S, E, F32V>(1, w, v, c0, a, b, sc, r) };
                }
            }
        }
        c0 += w;
    }
}

/// [`v_rows`] for `rows` rows and `w` registers (at most 4 each).
///
/// # Safety
/// As [`v_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn v_rows_dispatch<S: Simd, E: KvElem, const F32V: bool>(
    rows: usize,
    w: usize,
    v: *const E,
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
                $(($r, $w) => unsafe { v_rows::<S, E, $r, $w, F32V>(v, c0, a, b, sc, r0) },)*
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
/// then `acc = fma(p, v, acc)` for the tile's lanes `a..b` in order, `v` as
/// [`KvElem::v_reg`] gives it (with `F32V` read from `sc.vf`, and `v` unused).
///
/// # Safety
/// `S`'s features; `v + lane * d + (c0 + W) * LANES` readable for lanes below `b` (or `sc.vf`
/// holding the tile); the rows and registers inside `sc`; `sc` readied for this tile
/// ([`KvElem::prepare_v`]).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn v_rows<S: Simd, E: KvElem, const R: usize, const W: usize, const F32V: bool>(
    v: *const E,
    c0: usize,
    a: usize,
    b: usize,
    sc: &mut LongScratch,
    r0: usize,
) {
    // SAFETY: this function's contract.
    unsafe {
        let d = sc.d;
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
                    E::v_reg::<S>(v, lane, col, d, vsf)
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
