//! The K/V tiles the SIMD tiles ([`super::simd_tiles`]) read as f32: an f16 cache's and a
//! Q8_0 cache's read as stored (the i8 values widened in registers, `vpmovsxbd` + `vcvtdq2ps`,
//! exact, and the f16 scales applied once per 32 values of a K row or once per V register).
//! The one body of the SIMD tiles is monomorphised for each value type ([`KvElem`]: `f16`,
//! `i8`); what differs stays here: how a register of values widens, the score's dot order
//! (each the scalar twin's: [`super::tiles_scalar`] and [`super::dot_q8`]) and the V values'
//! scaling, so the results are bit-identical to the scalar twin.

use super::{LongScratch, TILE};
use crate::engine::attention::simd::Simd;
use crate::engine::kv_cache::kv_type::QK;
use half::f16;

/// One block's K and V tiles of a head as stored (the layouts of `HeadView::raw_tile`): `d`
/// values of type `E` per position, K `[d][bs]` and V `[bs][d]`; for Q8_0 (`E = i8`) one f16
/// scale per [`QK`] values, K scales `[d / QK][bs]` and V scales `[bs][d / QK]` (empty for
/// f16).
#[derive(Clone, Copy)]
pub(super) struct KvTile<'a, E> {
    pub k: &'a [E],
    pub v: &'a [E],
    pub ks: &'a [f16],
    pub vs: &'a [f16],
}

impl<E: KvElem> KvTile<'_, E> {
    /// Whether the tile holds `bs` positions of `d` values and their scales.
    #[inline(always)]
    pub(super) fn covers(&self, d: usize, bs: usize) -> bool {
        let n = d * bs;
        let scales = |x: &[f16]| !E::SCALED || x.len() * QK >= n;
        self.k.len() >= n && self.v.len() >= n && scales(self.ks) && scales(self.vs)
    }
}

/// One score pass's operands for [`KvElem::score_rows`]: the K values of dimension `i` at
/// `k + i * stride` elements (f32 when they were widened into `sc.kf`, else the stored
/// values), positions `at..at + LANES` of a tile of `bs`, `d` dimensions, the queries `q`
/// (`[row][d]`), the scale, and the scores `s` (`[row][TILE]`).
#[derive(Clone, Copy)]
pub(super) struct ScorePass {
    pub k: *const u8,
    pub stride: usize,
    pub at: usize,
    pub bs: usize,
    pub d: usize,
    pub q: *const f32,
    pub scale: f32,
    pub s: *mut f32,
}

impl ScorePass {
    /// The K register of dimension `i` (f32 when `F32K`, else `E` widened).
    ///
    /// # Safety
    /// `S`'s features; `k + i * stride` readable for `S::LANES` elements.
    #[inline(always)]
    unsafe fn k_reg<S: Simd, E: KvElem, const F32K: bool>(&self, i: usize) -> S::V {
        // SAFETY: this function's contract.
        unsafe {
            if F32K {
                S::load(self.k.cast::<f32>().add(i * self.stride))
            } else {
                E::widen::<S>(self.k.cast::<E>().add(i * self.stride))
            }
        }
    }

    /// Query value `i` of row `r`, broadcast.
    ///
    /// # Safety
    /// `S`'s features; `q` holds row `r`.
    #[inline(always)]
    unsafe fn q<S: Simd>(&self, r: usize, i: usize) -> S::V {
        // SAFETY: this function's contract.
        unsafe { S::set1(*self.q.add(r * self.d + i)) }
    }

    /// Row `r`'s scores `t * scale`.
    ///
    /// # Safety
    /// `S`'s features; `s + r * TILE` writable for `S::LANES` f32.
    #[inline(always)]
    unsafe fn store<S: Simd>(&self, r: usize, t: S::V) {
        // SAFETY: this function's contract.
        unsafe { S::store(self.s.add(r * TILE), S::mul(t, S::set1(self.scale))) }
    }
}

/// A cache value type the SIMD tiles read as f32.
pub(super) trait KvElem: Copy {
    /// Whether values carry a scale per [`QK`] (Q8_0).
    const SCALED: bool;

    /// Query rows of one score pass (the partial sums of each row stay in registers).
    fn score_pass<S: Simd>() -> usize;

    /// [`Simd::LANES`] values at `p` widened to f32 (exact, unscaled).
    ///
    /// # Safety
    /// `S`'s features; `p` readable for `S::LANES` values.
    unsafe fn widen<S: Simd>(p: *const Self) -> S::V;

    /// Scores of `R` rows for the pass's `S::LANES` positions in this type's dot order
    /// (`ks` the tile's K scales).
    ///
    /// # Safety
    /// `S`'s features; [`KvTile::covers`] holds for the pass's `d` and `bs`; the K values
    /// readable for `S::LANES` elements for every `i < d`, `at + LANES <= bs`; `q` holds `R`
    /// rows of `d`; `s + r * TILE` writable for `S::LANES` f32.
    unsafe fn score_rows<S: Simd, const R: usize, const F32K: bool>(ks: &[f16], p: &ScorePass);

    /// Readies `sc` for the weighted V sum of the tile at `off` (Q8_0: the V scales in
    /// `sc.vsf`; when `widen`, the values scaled in `sc.vf`) and returns whether the V sum is
    /// to read `sc.vf`.
    ///
    /// # Safety
    /// `S`'s features; `off + TILE <= bs`, the tile holds `bs` positions of `sc.d` values.
    unsafe fn prepare_v<S: Simd>(
        t: &KvTile<'_, Self>,
        off: usize,
        widen: bool,
        sc: &mut LongScratch,
    ) -> bool;

    /// Register `col / LANES` of lane `lane`'s V values (`v` the tile's first position's):
    /// f32 as the scalar twin's V step multiplies them (`vsf` as [`KvElem::prepare_v`] left
    /// it).
    ///
    /// # Safety
    /// `S`'s features; `v + lane * d + col` readable for `S::LANES` values, `vsf` holding the
    /// tile's scales where the type has them.
    unsafe fn v_reg<S: Simd>(
        v: *const Self,
        lane: usize,
        col: usize,
        d: usize,
        vsf: *const f32,
    ) -> S::V;
}

impl KvElem for f16 {
    const SCALED: bool = false;

    #[inline(always)]
    fn score_pass<S: Simd>() -> usize {
        S::SCORE_ROWS
    }

    #[inline(always)]
    unsafe fn widen<S: Simd>(p: *const f16) -> S::V {
        // SAFETY: this function's contract.
        unsafe { S::load_f16(p) }
    }

    /// `dot4(q[r], k)`: element `i` to partial sum `i % 4`, then `(s0 + s1) + (s2 + s3)`.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    unsafe fn score_rows<S: Simd, const R: usize, const F32K: bool>(_: &[f16], p: &ScorePass) {
        // SAFETY: this function's contract.
        unsafe {
            let mut parts = [[S::zero(); 4]; R];
            for i in (0..p.d).step_by(4) {
                for j in 0..4 {
                    let kk = p.k_reg::<S, f16, F32K>(i + j);
                    for r in 0..R {
                        parts[r][j] = S::fma(p.q::<S>(r, i + j), kk, parts[r][j]);
                    }
                }
            }
            for r in 0..R {
                let [p0, p1, p2, p3] = parts[r];
                p.store::<S>(r, S::add(S::add(p0, p1), S::add(p2, p3)));
            }
        }
    }

    #[inline(always)]
    unsafe fn prepare_v<S: Simd>(
        _: &KvTile<'_, f16>,
        _: usize,
        _: bool,
        _: &mut LongScratch,
    ) -> bool {
        false
    }

    #[inline(always)]
    unsafe fn v_reg<S: Simd>(
        v: *const f16,
        lane: usize,
        col: usize,
        d: usize,
        _: *const f32,
    ) -> S::V {
        // SAFETY: this function's contract.
        unsafe { S::load_f16(v.add(lane * d + col)) }
    }
}

impl KvElem for i8 {
    const SCALED: bool = true;

    #[inline(always)]
    fn score_pass<S: Simd>() -> usize {
        S::SCORE_ROWS_Q8
    }

    #[inline(always)]
    unsafe fn widen<S: Simd>(p: *const i8) -> S::V {
        // SAFETY: this function's contract.
        unsafe { S::load_i8(p) }
    }

    /// As [`super::dot_q8`]: per block of [`QK`] dimensions two partial sums (element `i` to
    /// sum `i % 2`), then `t = fma(p0 + p1, sk, t)` with the block's scale.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    unsafe fn score_rows<S: Simd, const R: usize, const F32K: bool>(ks: &[f16], p: &ScorePass) {
        // SAFETY: the scales of block `blk` for positions at.. are at ks + blk * bs + at, in
        // bounds (`covers`, at + LANES <= bs); the rest is this function's contract.
        unsafe {
            let ks = ks.as_ptr().add(p.at);
            let mut t = [S::zero(); R];
            for blk in 0..p.d / QK {
                let mut parts = [[S::zero(); 2]; R];
                for i in (blk * QK..(blk + 1) * QK).step_by(2) {
                    for j in 0..2 {
                        let kk = p.k_reg::<S, i8, F32K>(i + j);
                        for r in 0..R {
                            parts[r][j] = S::fma(p.q::<S>(r, i + j), kk, parts[r][j]);
                        }
                    }
                }
                let sk = S::load_f16(ks.add(blk * p.bs));
                for r in 0..R {
                    t[r] = S::fma(S::add(parts[r][0], parts[r][1]), sk, t[r]);
                }
            }
            for r in 0..R {
                p.store::<S>(r, t[r]);
            }
        }
    }

    /// The V scales of the tile at `off` into `sc.vsf` as f32, `[TILE][d / QK]` (exact); when
    /// `widen` (V vectors that several passes of rows read, in prefill), the values too,
    /// scaled into `sc.vf` as f32, `[TILE][d]`: `f32(v) * sv` (exact), each widened once.
    #[inline(always)]
    unsafe fn prepare_v<S: Simd>(
        t: &KvTile<'_, i8>,
        off: usize,
        widen: bool,
        sc: &mut LongScratch,
    ) -> bool {
        let (d, nb) = (sc.d, sc.d / QK);
        let src = &t.vs[off * nb..][..TILE * nb];
        // TILE * nb is a multiple of TILE, hence of LANES.
        for j in (0..TILE * nb).step_by(S::LANES) {
            // SAFETY: j + LANES <= TILE * nb = src.len() <= sc.vsf.len().
            unsafe { S::store(sc.vsf.as_mut_ptr().add(j), S::load_f16(src.as_ptr().add(j))) };
        }
        if widen {
            let src = &t.v[off * d..][..TILE * d];
            // TILE * d is a multiple of LANES, and so is QK: a register has one scale.
            for j in (0..TILE * d).step_by(S::LANES) {
                // SAFETY: j + LANES <= TILE * d = src.len() <= sc.vf.len(); j / QK <
                // TILE * d / QK, the scales in `vsf`.
                unsafe {
                    let sv = S::set1(*sc.vsf.get_unchecked(j / QK));
                    let x = S::mul(S::load_i8(src.as_ptr().add(j)), sv);
                    S::store(sc.vf.as_mut_ptr().add(j), x);
                }
            }
        }
        widen
    }

    #[inline(always)]
    unsafe fn v_reg<S: Simd>(
        v: *const i8,
        lane: usize,
        col: usize,
        d: usize,
        vsf: *const f32,
    ) -> S::V {
        // SAFETY: this function's contract; the register's values share one scale (QK is a
        // multiple of LANES).
        unsafe {
            let sv = S::set1(*vsf.add(lane * (d / QK) + col / QK));
            S::mul(S::load_i8(v.add(lane * d + col)), sv)
        }
    }
}
