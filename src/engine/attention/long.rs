//! The long-context order: attention of a query at position [`LONG_FROM`] or later.
//!
//! Below [`LONG_FROM`] every query runs llama.cpp's one-row order (`ggml_order.rs`), which the
//! golden test holds bit for bit (its longest sequence ends at position 990). That order rounds
//! the weighted V sum to f16 after every position and walks the softmax one position at a
//! time, so its cost per position is a chain of conversions. From [`LONG_FROM`] on the query
//! runs this order instead, built to be tiled and split:
//!
//! - The attended positions are cut into spans of [`SPAN`] positions aligned on multiples of
//!   [`SPAN`]. Each span gives a partial softmax `(m, l, acc)` of its own, computed as below; the
//!   partials are folded in span order, as llama.cpp folds its split-KV chunks:
//!   `M = max(M, m)`, `A = A * e^(M_old - M) + acc * e^(m - M)` (a product, a product, a sum),
//!   `L` likewise; the output is `A * (1 / L)`.
//! - Inside a span, tiles of [`TILE`] positions aligned on multiples of [`TILE`]: the scores of
//!   a tile are `s = dot(q, k) * scale`, the dot product in f32 with four partial sums (element
//!   `i` goes to sum `i % 4`, fused multiply-adds in order, then `(s0 + s1) + (s2 + s3)`); the
//!   running maximum moves once per tile (`c = e^(m_old - m)` rescales the accumulator and the
//!   16 per-lane sums `lv`, which then add `p = e^(s - m)`: `lv * c + p`); the f32 accumulator
//!   adds `p * v` position by position with fused multiply-adds. At the span's end `l` is the
//!   halving sum of the 16 lanes of `lv`. `e^(s - m)` is [`exp_fast`] (no gather, ~1 ulp);
//!   the rarer `e^x` of a rescale or a fold is the C library's `expf`.
//!
//! Everything is per query row, so a row's result does not depend on which rows share a tile
//! (prefill tiles many tokens and the query heads of a KV head together), on whether its spans
//! ran as separate tasks (split-K decode) or in one loop, nor on the thread that ran them: a
//! sequence's logits are the same alone, batched or chunked. The SIMD kernels (one generic
//! body, [`super::simd`]) are bit-identical to the scalar twin [`tiles_scalar`].

use super::exp_fast::exp_fast;
use super::simd::Simd;
use super::HeadView;
use half::f16;

/// First query position that runs the long-context order.
pub const LONG_FROM: usize = 1024;
/// Positions per span (the unit of split-K decode).
pub const SPAN: usize = 256;
/// Positions per tile (the softmax maximum moves once per tile).
pub(super) const TILE: usize = 16;
/// Query rows one [`LongScratch`] holds.
pub(super) const MAX_ROWS: usize = 64;

/// Which kernel computes the tiles (the driver and the fold are shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LongKernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// True when the SIMD long kernels handle heads of `d` values in blocks of `bs` positions: a
/// tile lies in one block and a head is whole registers.
pub(super) fn simd_covers(d: usize, bs: usize) -> bool {
    d > 0 && d.is_multiple_of(16) && bs > 0 && bs.is_multiple_of(TILE)
}

/// Working memory of the long kernels for up to [`MAX_ROWS`] query rows of one KV head.
#[derive(Debug, Clone)]
pub(super) struct LongScratch {
    d: usize,
    /// Rows in use.
    n: usize,
    /// `[row][d]` queries (f32, RoPE applied).
    q: Vec<f32>,
    /// Each row attends positions `lo..hi`.
    lo: Vec<usize>,
    hi: Vec<usize>,
    /// The current span's partial: maximum, rescale of this tile, sum, per-lane sums,
    /// scores then probabilities of this tile, accumulator.
    m: Vec<f32>,
    c: Vec<f32>,
    l: Vec<f32>,
    lv: Vec<f32>,
    s: Vec<f32>,
    acc: Vec<f32>,
    /// Each row's lanes `a..b` attended in this tile.
    lanes: Vec<(usize, usize)>,
    /// The tile's K as f32, `[d][TILE]`, when many rows share it.
    kf: Vec<f32>,
    /// The fold of the spans so far.
    run_m: Vec<f32>,
    run_l: Vec<f32>,
    run_a: Vec<f32>,
}

impl LongScratch {
    pub(super) fn new(d: usize) -> LongScratch {
        let rows = |w: usize| vec![0.0; MAX_ROWS * w];
        LongScratch {
            d,
            n: 0,
            q: rows(d),
            lo: vec![0; MAX_ROWS],
            hi: vec![0; MAX_ROWS],
            m: rows(1),
            c: rows(1),
            l: rows(1),
            lv: rows(TILE),
            s: rows(TILE),
            acc: rows(d),
            lanes: vec![(0, 0); MAX_ROWS],
            kf: vec![0.0; d * TILE],
            run_m: rows(1),
            run_l: rows(1),
            run_a: rows(d),
        }
    }

    /// Starts a set of rows (at most [`MAX_ROWS`]).
    pub(super) fn clear(&mut self) {
        self.n = 0;
    }

    /// Adds a row: query `q` (`head_dim` values) attending positions `lo..hi`.
    pub(super) fn push(&mut self, q: &[f32], lo: usize, hi: usize) {
        let (r, d) = (self.n, self.d);
        assert!(
            r < MAX_ROWS && q.len() == d && lo < hi,
            "long attention row"
        );
        self.q[r * d..][..d].copy_from_slice(q);
        self.lo[r] = lo;
        self.hi[r] = hi;
        self.n += 1;
    }

    pub(super) fn rows(&self) -> usize {
        self.n
    }

    /// Row `r`'s partial of the last span computed: `(m, l, acc)`.
    pub(super) fn partial(&self, r: usize) -> (f32, f32, &[f32]) {
        (self.m[r], self.l[r], &self.acc[r * self.d..][..self.d])
    }

    /// Row `r`'s output after [`attend_rows`].
    pub(super) fn output(&self, r: usize) -> &[f32] {
        &self.run_a[r * self.d..][..self.d]
    }

    /// True when row `r` attends a position of span `j`.
    fn in_span(&self, r: usize, j: usize) -> bool {
        self.lo[r] < (j + 1) * SPAN && self.hi[r] > j * SPAN
    }
}

/// Spans a row attending `lo..hi` touches: `first..last`.
pub(super) fn spans_of(lo: usize, hi: usize) -> std::ops::Range<usize> {
    lo / SPAN..(hi - 1) / SPAN + 1
}

/// Folds a span's partial `(m, l, a)` into the running `(run_m, run_l, run_a)` (see the module
/// docs); one implementation for every kernel.
pub(super) fn fold(run_m: &mut f32, run_l: &mut f32, run_a: &mut [f32], m: f32, l: f32, a: &[f32]) {
    let mn = run_m.max(m);
    let so = (*run_m - mn).exp();
    let sn = (m - mn).exp();
    for (x, &y) in run_a.iter_mut().zip(a) {
        *x = *x * so + y * sn;
    }
    *run_l = *run_l * so + l * sn;
    *run_m = mn;
}

/// Halving sum of 16 lanes: `v[i] += v[i + w]` for w = 8, 4, 2, 1.
fn reduce16(lv: &[f32]) -> f32 {
    let mut v = [0f32; TILE];
    v.copy_from_slice(&lv[..TILE]);
    let mut w = TILE / 2;
    while w >= 1 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// Computes span `j`'s partial for every row of `sc` that attends a position of it (the others'
/// partials are left stale: check [`LongScratch::in_span`]).
pub(super) fn span_partial(
    kernel: LongKernel,
    view: &HeadView,
    sc: &mut LongScratch,
    j: usize,
    scale: f32,
) {
    let (n, d) = (sc.n, sc.d);
    let (mut lo, mut hi) = (usize::MAX, 0);
    for r in 0..n {
        sc.m[r] = f32::NEG_INFINITY;
        sc.lv[r * TILE..][..TILE].fill(0.0);
        sc.acc[r * d..][..d].fill(0.0);
        if sc.in_span(r, j) {
            lo = lo.min(sc.lo[r]);
            hi = hi.max(sc.hi[r]);
        }
    }
    if lo >= hi {
        return;
    }
    let begin = lo.max(j * SPAN) / TILE * TILE;
    let end = hi.min((j + 1) * SPAN);
    match kernel {
        LongKernel::Scalar => tiles_scalar(view, sc, begin, end, scale),
        // SAFETY: `LongKernel::Avx2` is chosen only when the CPU has AVX2, FMA and F16C and
        // `simd_covers` accepted the view's shape.
        #[cfg(target_arch = "x86_64")]
        LongKernel::Avx2 => unsafe { tiles_avx2(view, sc, begin, end, scale) },
        // SAFETY: as above, with AVX-512F.
        #[cfg(target_arch = "x86_64")]
        LongKernel::Avx512 => unsafe { tiles_avx512(view, sc, begin, end, scale) },
    }
    for r in 0..n {
        sc.l[r] = reduce16(&sc.lv[r * TILE..]);
    }
}

/// Attends every row of `sc` over all its spans, folding them in order; the outputs are then
/// [`LongScratch::output`].
pub(super) fn attend_rows(kernel: LongKernel, view: &HeadView, sc: &mut LongScratch, scale: f32) {
    let (n, d) = (sc.n, sc.d);
    let (mut first, mut end) = (usize::MAX, 0);
    for r in 0..n {
        sc.run_m[r] = f32::NEG_INFINITY;
        sc.run_l[r] = 0.0;
        sc.run_a[r * d..][..d].fill(0.0);
        let s = spans_of(sc.lo[r], sc.hi[r]);
        first = first.min(s.start);
        end = end.max(s.end);
    }
    for j in first..end {
        span_partial(kernel, view, sc, j, scale);
        for r in 0..n {
            if sc.in_span(r, j) {
                let (m, l) = (sc.m[r], sc.l[r]);
                fold(
                    &mut sc.run_m[r],
                    &mut sc.run_l[r],
                    &mut sc.run_a[r * d..][..d],
                    m,
                    l,
                    &sc.acc[r * d..][..d],
                );
            }
        }
    }
    for r in 0..n {
        let l = sc.run_l[r];
        let inv = if l == 0.0 { 0.0 } else { 1.0 / l };
        for x in &mut sc.run_a[r * d..][..d] {
            *x *= inv;
        }
    }
}

/// Lanes `a..b` of the tile starting at `t0` that `lo..hi` covers (`a >= b`: none).
fn lanes(lo: usize, hi: usize, t0: usize) -> (usize, usize) {
    (
        lo.saturating_sub(t0).min(TILE),
        hi.saturating_sub(t0).min(TILE),
    )
}

/// The dot product of the module docs: four partial sums by `i % 4`, then `(0 + 1) + (2 + 3)`.
fn dot4(q: &[f32], k: impl Fn(usize) -> f32) -> f32 {
    let mut p = [0f32; 4];
    for (i, &x) in q.iter().enumerate() {
        p[i % 4] = x.mul_add(k(i), p[i % 4]);
    }
    (p[0] + p[1]) + (p[2] + p[3])
}

/// The scalar twin: tiles `begin..end` (tile-aligned `begin`) of every row, any head size and
/// block size.
fn tiles_scalar(view: &HeadView, sc: &mut LongScratch, begin: usize, end: usize, scale: f32) {
    let (d, bs) = (view.head_dim, view.block_size);
    for t0 in (begin..end).step_by(TILE) {
        for r in 0..sc.n {
            let (a, b) = lanes(sc.lo[r], sc.hi[r], t0);
            if a >= b {
                continue;
            }
            let q = &sc.q[r * d..][..d];
            let mut s = [f32::NEG_INFINITY; TILE];
            for (lane, x) in s.iter_mut().enumerate().take(b).skip(a) {
                let pos = t0 + lane;
                let (k, _) = view.tile(pos / bs);
                *x = dot4(q, |i| k[i * bs + pos % bs].to_f32()) * scale;
            }
            let tmax = s.iter().fold(f32::NEG_INFINITY, |x, &y| x.max(y));
            let acc = &mut sc.acc[r * d..][..d];
            let mut c = 1.0f32;
            if tmax > sc.m[r] {
                c = (sc.m[r] - tmax).exp();
                sc.m[r] = tmax;
                for x in acc.iter_mut() {
                    *x *= c;
                }
            }
            let m = sc.m[r];
            for (x, lv) in s.iter_mut().zip(&mut sc.lv[r * TILE..][..TILE]) {
                *x = exp_fast(*x - m);
                *lv = *lv * c + *x;
            }
            for (lane, &p) in s.iter().enumerate().take(b).skip(a) {
                let pos = t0 + lane;
                let (_, v) = view.tile(pos / bs);
                for (x, y) in acc.iter_mut().zip(&v[(pos % bs) * d..][..d]) {
                    *x = p.mul_add(y.to_f32(), *x);
                }
            }
        }
    }
}

/// AVX-512 instantiation of [`tiles_simd`].
///
/// # Safety
/// AVX-512F, FMA and F16C; [`simd_covers`] accepts the view's shape.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn tiles_avx512(
    view: &HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    // SAFETY: this function's contract.
    unsafe { tiles_simd::<super::simd::Avx512>(view, sc, begin, end, scale) }
}

/// AVX2 instantiation of [`tiles_simd`].
///
/// # Safety
/// AVX2, FMA and F16C; [`simd_covers`] accepts the view's shape.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiles_avx2(view: &HeadView, sc: &mut LongScratch, begin: usize, end: usize, scale: f32) {
    // SAFETY: this function's contract.
    unsafe { tiles_simd::<super::simd::Avx2>(view, sc, begin, end, scale) }
}

/// The SIMD twin of [`tiles_scalar`] over any width: per tile, the scores of up to
/// `S::SCORE_ROWS` rows at once (vectorized over positions, each K vector converted once for
/// all of them), the softmax step per row, then the weighted V sum of up to `S::V_ROWS` rows
/// in registers (each V vector converted once for all of them).
///
/// # Safety
/// The CPU supports `S`'s features; [`simd_covers`] accepts the view's shape.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices address registers of several rows
unsafe fn tiles_simd<S: Simd>(
    view: &HeadView,
    sc: &mut LongScratch,
    begin: usize,
    end: usize,
    scale: f32,
) {
    let (d, bs, n) = (view.head_dim, view.block_size, sc.n);
    assert!(simd_covers(d, bs) && d.is_multiple_of(S::LANES));
    for t0 in (begin..end).step_by(TILE) {
        let (kt, vt) = view.tile(t0 / bs);
        let off = t0 % bs;
        let mut full = true;
        for r in 0..n {
            let (a, b) = lanes(sc.lo[r], sc.hi[r], t0);
            sc.lanes[r] = (a, b);
            full &= a == 0 && b == TILE;
        }
        // Scores: `kt` is `[d][bs]`, so positions off.. of dimension i are contiguous. With
        // more rows than one pass holds, the tile is widened to f32 once for all passes (an
        // exact conversion: the same scores).
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
        // The weighted V sum, `S::V_W` registers of `S::V_ROWS` rows at a time.
        let regs = d / S::LANES;
        let v = vt[off * d..].as_ptr();
        let mut c0 = 0;
        while c0 < regs {
            let w = (regs - c0).min(S::V_W);
            if full {
                let mut r0 = 0;
                while r0 < n {
                    let rows = (n - r0).min(S::V_ROWS);
                    // SAFETY: rows r0..r0 + rows and registers c0..c0 + w are in bounds; the
                    // V tile holds positions off..off + TILE of d values.
                    unsafe { v_rows_dispatch::<S>(rows, w, v, d, c0, 0, TILE, sc, r0) };
                    r0 += rows;
                }
            } else {
                for r in 0..n {
                    let (a, b) = sc.lanes[r];
                    if a < b {
                        // SAFETY: as above, one row.
                        unsafe { v_rows_dispatch::<S>(1, w, v, d, c0, a, b, sc, r) };
                    }
                }
            }
            c0 += w;
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
