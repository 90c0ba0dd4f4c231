//! The SIMD twins of [`super::attend_group`] (bit-identical), one body for both x86 widths
//! ([`Simd`]: AVX-512's 16 f32 lanes, AVX2's 8).
//!
//! Scores of `S::LANES` positions at once: every f16·f16 product is exact in f32, so only the
//! order of the additions matters, and that order is reproduced lane-wise over positions. The
//! reference's 16 score lanes are not vector lanes here but 16 separate partial sums, each
//! vectorized over positions, so the register width changes no per-position operation: every
//! position gets the four-part fused multiply-adds, the `(0 + 2) + (1 + 3)` combination and
//! the halving over the 16 lanes of [`super::reduce_lanes`]. Then the sequential online
//! softmax, the exps of a register's positions as one vector (bit-identical to `expf`), and
//! the f16 accumulator rounded through `vcvtps2ph` after every step. Up to a width's head
//! count of query heads of the group run side by side (their K/V tiles are converted from
//! f16 once, and their independent softmax chains interleave); each head's arithmetic is
//! exactly the one-head order.

use super::super::sink::fold_sink;
use super::{HeadView, Scores, LANES, PARTS};
use crate::engine::attention::simd::{Avx2, Avx512, Simd};
use crate::kernels::prefetch::to_l1 as prefetch;
use half::f16;
use std::mem::MaybeUninit;

/// Most f16 accumulator values of one pass ([`heads`]' `acc16`): 4 heads of 512.
const ACC16: usize = 4 * 512;

/// `G` query heads of one KV head, `C` registers of `S::LANES` values per head; `q` and `out`
/// hold `G` heads, `sinks` (when given) their `G` sink logits, `qh` at least `G * head_dim`
/// values (the f16-rounded queries).
///
/// # Safety
/// `S`'s CPU features; `head_dim == C * S::LANES`, one of [`super::simd_head_dim`]'s; the
/// block size a multiple of `S::LANES`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices address registers of several heads
unsafe fn heads<S: Simd, const G: usize, const C: usize>(
    view: &mut HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: Scores,
    sinks: Option<&[f32]>,
    qh: &mut [f32],
) {
    // SAFETY: `S`'s CPU features (every `S::` operation) are this function's contract; each
    // pointer is justified where it is formed (the "in bounds:" comments).
    unsafe {
        let (d, bs) = (view.head_dim, view.block_size);
        invariant_eq!(d, C * S::LANES);
        invariant!(S::LANES <= LANES);
        let full = d - d % (LANES * PARTS);
        let qh = &mut qh[..G * d];
        for (h, &x) in qh.iter_mut().zip(&q[..G * d]) {
            *h = f16::from_f32(x).to_f32();
        }
        // The weighted-V accumulators, f16-valued (rounded after every step): in registers
        // when they fit, else stored as f16 (the same values: a store rounds as round_f16 and
        // a load widens exactly), where a spilled f32 register would cost a load, a store and
        // the rounding's two conversions per step.
        let spill = G * C > S::V_ROWS * S::V_W;
        let mut acc = [[S::zero(); C]; G];
        // Only the spilling shapes use (and zero) the first G * d values.
        let mut acc16 = [std::mem::MaybeUninit::<f16>::uninit(); ACC16];
        assert!(G * d <= ACC16);
        if spill {
            for x in &mut acc16[..G * d] {
                x.write(f16::ZERO);
            }
        }
        let a16 = acc16.as_mut_ptr().cast::<f16>();
        let (mut m, mut l) = ([f32::NEG_INFINITY; G], [0.0f32; G]);
        // A register's positions (the first `S::LANES` of 16).
        let mut scores = [[0f32; LANES]; G];
        let n_blocks = view.n_blocks();
        // Lines of one stored K (or V) tile, prefetched a share per score lane (see below).
        let tile_lines = view.stored_bytes().div_ceil(64);
        for bi in view.first_block()..n_blocks {
            // The next block's K and V tiles are fetched while this one is computed: a
            // sequence's pages lie anywhere in the cache, so the hardware prefetchers restart
            // at every tile, and with many sequences decoding the cache's reads come from
            // memory (a B=16 step reads as many K/V bytes as weight bytes).
            let next = (bi + 1 < n_blocks).then(|| view.stored(bi + 1));
            let (k, v, lo, n) = view.block(bi);
            assert!(k.len() == bs * d && v.len() >= n * d);
            // Scores start at a vector boundary; positions before `lo` (outside a sliding
            // window) are scored but skipped.
            let t_first = lo - lo % S::LANES;
            for t in (t_first..n).step_by(S::LANES) {
                let skip = lo.saturating_sub(t);
                // s[j][lane]: head j's lane-`lane` partial sums, vectorized over positions,
                // each written once by the lane loop before it is read (zeroing the array first
                // was a 3 KiB `memset` per 16 positions at G = 3, ~1% of a 16-sequence step).
                let mut s = [[MaybeUninit::<S::V>::uninit(); LANES]; G];
                let get = |s: &[[MaybeUninit<S::V>; LANES]; G], j: usize, lane: usize| {
                    // SAFETY: the lane loop below writes s[j][lane] for every j < G and
                    // lane < LANES before anything calls `get`.
                    s[j][lane].assume_init()
                };
                for lane in 0..LANES {
                    if let (Some((nk, nv)), true) = (next, t == t_first) {
                        for c in lane * tile_lines / LANES..(lane + 1) * tile_lines / LANES {
                            prefetch(nk.wrapping_add(64 * c));
                            prefetch(nv.wrapping_add(64 * c));
                        }
                    }
                    if C * S::LANES == LANES * PARTS {
                        // Head size 64: one product per partial sum, each exact in f32 (an
                        // f16·f16 product), so `p0 + p2` is `fma(q0, k0, p2)` with p2 = fma(q2,
                        // k2, +0) as the reference forms it (zeros signed alike): two sums per
                        // head live instead of four, and one add instead of three. AVX2 then
                        // fits a group of four heads in one pass ([`max_heads_avx2`]).
                        // In bounds: as for the general loop below (i < 64 = d).
                        let kt =
                            |pj: usize| S::load_f16(k.as_ptr().add((pj * LANES + lane) * bs + t));
                        // In bounds: j < G and i < d, and `qh` holds G * d values.
                        let qb = |j: usize, pj: usize| {
                            S::set1(*qh.get_unchecked(j * d + pj * LANES + lane))
                        };
                        let (k0, k2) = (kt(0), kt(2));
                        let mut even = [S::zero(); G];
                        for j in 0..G {
                            even[j] = S::fma(qb(j, 0), k0, S::fma(qb(j, 2), k2, S::zero()));
                        }
                        let (k1, k3) = (kt(1), kt(3));
                        for j in 0..G {
                            let odd = S::fma(qb(j, 1), k1, S::fma(qb(j, 3), k3, S::zero()));
                            s[j][lane] = MaybeUninit::new(S::add(even[j], odd));
                        }
                        continue;
                    }
                    let mut parts = [[S::zero(); PARTS]; G];
                    for base in (0..full).step_by(LANES * PARTS) {
                        for pj in 0..PARTS {
                            let i = base + pj * LANES + lane;
                            // In bounds: t is a multiple of S::LANES below n <= bs, and bs is one
                            // too, so i * bs + t + S::LANES <= (d - 1) * bs + bs = k.len().
                            let kk = S::load_f16(k.as_ptr().add(i * bs + t));
                            for j in 0..G {
                                // In bounds: j < G and i < d, and `qh` holds G * d values.
                                let qi = *qh.get_unchecked(j * d + i);
                                parts[j][pj] = S::fma(S::set1(qi), kk, parts[j][pj]);
                            }
                        }
                    }
                    for j in 0..G {
                        let [p0, p1, p2, p3] = parts[j];
                        s[j][lane] = MaybeUninit::new(S::add(S::add(p0, p2), S::add(p1, p3)));
                    }
                }
                for j in 0..G {
                    let mut w = LANES / 2;
                    while w >= 1 {
                        for lane in 0..w {
                            s[j][lane] =
                                MaybeUninit::new(S::add(get(&s, j, lane), get(&s, j, lane + w)));
                        }
                        w /= 2;
                    }
                }
                if full < d {
                    // The reference's tail: the tree's sum widened to f64, then each f32 product
                    // added in f64, in order.
                    let mut wide = [S::widen(get(&s, 0, 0)); G];
                    for j in 0..G {
                        wide[j] = S::widen(get(&s, j, 0));
                    }
                    for i in full..d {
                        // In bounds: as for the tree above (i < d).
                        let kk = S::load_f16(k.as_ptr().add(i * bs + t));
                        for j in 0..G {
                            // In bounds: j < G and i < d, and `qh` holds G * d values.
                            let qi = *qh.get_unchecked(j * d + i);
                            wide[j] = S::add_wide(wide[j], S::mul(S::set1(qi), kk));
                        }
                    }
                    for j in 0..G {
                        s[j][0] = MaybeUninit::new(S::narrow(wide[j]));
                    }
                }
                for j in 0..G {
                    // In bounds: `scores[j]` holds 16 >= S::LANES f32.
                    S::store(scores[j].as_mut_ptr(), get(&s, j, 0));
                }
                // The running max and each position's exp argument are a cheap serial scan; the
                // exps of the register's positions then run as one vector (bit-identical to
                // expf); positions past `n` get exp(0) and are never read.
                let nv = (n - t).min(S::LANES);
                let mut grew = [0u32; G];
                let mut e = [[0f32; LANES]; G];
                for j in 0..G {
                    let mut arg = [0f32; LANES];
                    for p in skip..nv {
                        let sc = scale.apply(scores[j][p]);
                        if sc > m[j] {
                            arg[p] = m[j] - sc;
                            m[j] = sc;
                            grew[j] |= 1 << p;
                        } else {
                            arg[p] = sc - m[j];
                        }
                    }
                    // In bounds: `arg` and `e[j]` hold 16 >= S::LANES f32; the arguments are <= 0
                    // or NaN.
                    let x = S::expf_nonpositive(S::load(arg.as_ptr()));
                    S::store(e[j].as_mut_ptr(), x);
                }
                for p in skip..nv {
                    let mut vsv = [S::zero(); G];
                    for j in 0..G {
                        let (ms, vs) = if grew[j] & (1 << p) != 0 {
                            let ms = e[j][p];
                            let msv = S::set1(ms);
                            if spill {
                                for ci in 0..C {
                                    // In bounds: j * d + (ci + 1) * S::LANES <= G * d.
                                    let at = a16.add(j * d + ci * S::LANES);
                                    S::store_f16(at, S::mul(S::load_f16(at), msv));
                                }
                            } else {
                                for a in acc[j].iter_mut() {
                                    *a = S::round_f16(S::mul(*a, msv));
                                }
                            }
                            (ms, 1.0f32)
                        } else {
                            (1.0f32, e[j][p])
                        };
                        vsv[j] = S::set1(vs);
                        l[j] = l[j].mul_add(ms, vs);
                    }
                    let row = (t + p) * d;
                    for ci in 0..C {
                        // In bounds: row + (ci + 1) * S::LANES <= (t + p + 1) * d <= n * d <= v.len().
                        let vv = S::load_f16(v.as_ptr().add(row + ci * S::LANES));
                        for j in 0..G {
                            if spill {
                                // In bounds: as for the rescaling above.
                                let at = a16.add(j * d + ci * S::LANES);
                                S::store_f16(at, S::fma(vv, vsv[j], S::load_f16(at)));
                            } else {
                                acc[j][ci] = S::round_f16(S::fma(vv, vsv[j], acc[j][ci]));
                            }
                        }
                    }
                }
            }
        }
        for j in 0..G {
            // The sink (super::super::sink): the f32 accumulator times `ms`, then the sum's
            // reciprocal, as the scalar twin's `finish_row`.
            let (ms, lj) = match sinks {
                Some(s) => fold_sink(m[j], l[j], s[j]),
                None => (1.0, l[j]),
            };
            let inv = S::set1(if lj == 0.0 { 0.0 } else { 1.0 / lj });
            if spill {
                for ci in 0..C {
                    // In bounds: as above.
                    acc[j][ci] = S::load_f16(a16.add(j * d + ci * S::LANES));
                }
            }
            if ms != 1.0 {
                for a in acc[j].iter_mut() {
                    *a = S::mul(*a, S::set1(ms));
                }
            }
            for ci in 0..C {
                // In bounds: j * d + (ci + 1) * S::LANES <= (j + 1) * d <= out.len().
                S::store(
                    out.as_mut_ptr().add(j * d + ci * S::LANES),
                    S::mul(acc[j][ci], inv),
                );
            }
        }
    }
}

/// One width's entry point: `$attend` (the twin), `$heads` (its `#[target_feature]` instances
/// of [`heads`]), `$S` the width, `$feat` its features, `$covers` its shape test, `$max` the
/// most heads per pass by head size (at most `$g`'s largest), `$($c)*` the registers per head
/// of the [`super::simd_head_dim`] sizes.
macro_rules! simd_twin {
    ($attend:ident, $heads:ident, $S:ty, $feat:literal, $covers:ident, $max:ident,
     [$($g:literal)*], [$($c:literal)*]) => {
        /// `G` heads of `C` registers with this width's features (see [`heads`]).
        ///
        /// # Safety
        /// As [`heads`].
        #[target_feature(enable = $feat)]
        unsafe fn $heads<const G: usize, const C: usize>(
            view: &mut HeadView,
            q: &[f32],
            out: &mut [f32],
            scale: Scores,
            sinks: Option<&[f32]>,
            qh: &mut [f32],
        ) {
            // SAFETY: this function's contract is `heads`'.
            unsafe { heads::<$S, G, C>(view, q, out, scale, sinks, qh) }
        }

        #[doc = concat!("The `", stringify!($S), "` twin of [`super::attend_group`] (see the ")]
        #[doc = concat!("module docs), up to [`", stringify!($max), "`] heads a pass. `scratch` ")]
        /// holds the f16-rounded queries: at least [`super::SCRATCH_HEADS`] `* head_dim` values.
        #[doc = concat!("Panics unless [`super::", stringify!($covers), "`] accepts the view's ")]
        /// shape, `q` and `out` have the same length and `scratch` is long enough.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $feat, ".")]
        #[target_feature(enable = $feat)]
        pub(in crate::engine::attention) unsafe fn $attend(
            view: &mut HeadView,
            q: &[f32],
            out: &mut [f32],
            scale: Scores,
            sinks: Option<&[f32]>,
            scratch: &mut [f32],
        ) {
            let (d, bs) = (view.head_dim, view.block_size);
            assert!(
                super::$covers(d, bs) && q.len() == out.len(),
                concat!(stringify!($attend), ": head_dim {}, block size {} not covered"),
                d,
                bs
            );
            /// Dispatches `G` heads to the instance of this head size.
            ///
            /// # Safety
            /// As [`heads`] for `G` heads of `view.head_dim` values.
            #[inline(always)]
            unsafe fn by_width<const G: usize>(
                view: &mut HeadView,
                q: &[f32],
                out: &mut [f32],
                scale: Scores,
                sinks: Option<&[f32]>,
                qh: &mut [f32],
            ) {
                // SAFETY: forwarded contract; the head size picks C = head_dim / LANES.
                unsafe {
                    match view.head_dim / <$S as Simd>::LANES {
                        $($c => $heads::<G, $c>(view, q, out, scale, sinks, qh),)*
                        c => unreachable!("{c} registers per head"),
                    }
                }
            }
            let (g, max) = (q.len() / d, $max(d));
            assert!(sinks.is_none_or(|s| s.len() == g), "one sink per head");
            for j0 in (0..g).step_by(max) {
                let span = j0 * d..(j0 + max).min(g) * d;
                let (qs, os) = (&q[span.clone()], &mut out[span]);
                let ss = sinks.map(|s| &s[j0..(j0 + max).min(g)]);
                // SAFETY: features as required by this function; d and bs checked above.
                unsafe {
                    match (g - j0).min(max) {
                        $($g => by_width::<$g>(view, qs, os, scale, ss, scratch),)*
                        n => unreachable!("{n} heads per pass"),
                    }
                }
            }
        }
    };
}

/// Heads per AVX-512 pass: four for every head size (its 32 registers hold four heads' 4
/// partial score vectors beside the K vector and broadcasts).
fn max_heads_avx512(_head_dim: usize) -> usize {
    4
}

/// Heads per AVX2 pass: three heads' 12 partial score vectors plus the K vector and a broadcast
/// fill its 16 registers; at head size 64 a head keeps two sums live (see [`heads`]), so a
/// 4-head group (Llama-3.2-1B) runs in one pass, converting each K and V tile once, not twice.
/// Llama-3.2-1B shape Q4_K_M, `KILN_ISA=avx2`, one thread, Zen 4, 2026-11-27: pp512 +4.7%
/// (median of 7 alternating pairs against 3 + 1 heads a pass).
fn max_heads_avx2(head_dim: usize) -> usize {
    if head_dim == LANES * PARTS {
        4
    } else {
        3
    }
}

simd_twin!(
    attend_group_avx512,
    heads_avx512,
    Avx512,
    "avx512f,fma,f16c",
    avx512_covers,
    max_heads_avx512,
    [1 2 3 4],
    [4 6 8 12 16 32]
);
simd_twin!(
    attend_group_avx2,
    heads_avx2,
    Avx2,
    "avx2,fma,f16c",
    avx2_covers,
    max_heads_avx2,
    [1 2 3 4],
    [8 12 16 24 32 64]
);
