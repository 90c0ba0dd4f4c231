//! Attention in llama.cpp's CPU flash-attention order (one query row, f16 K/V): the query is
//! rounded to f16, each score is an f16·f16 dot product summed in a fixed tree (four 16-lane
//! partial vectors, then a halving reduction), the online softmax visits positions one by one
//! with `expf`, and the weighted V sum is kept in an **f16** accumulator (rounded after every
//! fused multiply-add and every rescale), divided by the softmax sum at the end.
//!
//! Why: SmolLM2's activations are quantized to 8 bits right after attention (the Wo matmul), so
//! output differences of ~1e-5 flip Q8 roundings and grow into visible logit differences. Using
//! the reference's order and roundings makes kiln's attention output bit-identical to it for
//! head_dim 64 (the default model), which is what the golden test compares against.

use super::HeadView;
use half::f16;

/// Lanes of the reference's score vectors (AVX-512: 16 f32).
const LANES: usize = 16;
/// Partial-sum vectors of the reference's f16 dot product (64 values per step).
const PARTS: usize = 4;

/// How a raw q·k dot product becomes the softmax argument, as in ggml's flash attention:
/// `s * scale`, then with logit softcapping (`cap != 0`, `scale` already divided by the cap)
/// `cap * tanh(s * scale)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Scores {
    pub scale: f32,
    pub cap: f32,
}

impl Scores {
    #[inline(always)]
    pub fn apply(self, s: f32) -> f32 {
        let s = s * self.scale;
        if self.cap != 0.0 {
            self.cap * s.tanh()
        } else {
            s
        }
    }
}

/// Sums `p` (16 lanes) the way `_mm512_reduce_add_ps` does: halves, then quarters, ...
fn reduce_lanes(p: &[f32; LANES]) -> f32 {
    let mut v = *p;
    let mut w = LANES / 2;
    while w >= 1 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// Dot product of the f16 query `q` with position `pos` of a K tile laid out `[dim][pos]`
/// (`bs` positions per dimension), in the reference's summation order. `q.len()` is a multiple
/// of 64 (the caller checks); the tail past the last full 64 is summed left to right.
fn score(q: &[f32], k: &[f16], bs: usize, pos: usize) -> f32 {
    let d = q.len();
    let step = LANES * PARTS;
    let full = d - d % step;
    let mut acc = [[0.0f32; LANES]; PARTS];
    for base in (0..full).step_by(step) {
        for (j, part) in acc.iter_mut().enumerate() {
            for (lane, a) in part.iter_mut().enumerate() {
                let i = base + j * LANES + lane;
                *a = q[i].mul_add(k[i * bs + pos].to_f32(), *a);
            }
        }
    }
    // Halving over the partial vectors: (0 + 2), (1 + 3), then (0 + 1).
    let mut w = PARTS / 2;
    while w >= 1 {
        for j in 0..w {
            let add = acc[j + w];
            for (a, b) in acc[j].iter_mut().zip(add) {
                *a += b;
            }
        }
        w /= 2;
    }
    let mut s = f64::from(reduce_lanes(&acc[0]));
    for (i, &qi) in q.iter().enumerate().skip(full) {
        s += f64::from(qi * k[i * bs + pos].to_f32());
    }
    s as f32
}

/// Attends the `q.len() / head_dim` query heads of one GQA group in the reference's order,
/// writing `out` (same shape as `q`). `scratch` must hold at least `2 * head_dim` values. Any
/// head_dim and block size (a block size of 1 included).
pub(super) fn attend_group(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    sc: Scores,
    scratch: &mut [f32],
) {
    let (d, bs) = (view.head_dim, view.block_size);
    let g = q.len() / d;
    let (qh, acc) = scratch[..2 * d].split_at_mut(d);
    for j in 0..g {
        for (h, &x) in qh.iter_mut().zip(&q[j * d..][..d]) {
            *h = f16::from_f32(x).to_f32();
        }
        // The f16 accumulator, held as f32 values that are always f16-representable.
        acc.fill(0.0);
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        for bi in view.first_block()..view.n_blocks() {
            let (k, v, lo, n) = view.block(bi);
            for p in lo..n {
                let s = sc.apply(score(qh, k, bs, p));
                let (mut ms, mut vs) = (1.0f32, 1.0f32);
                if s > m {
                    ms = (m - s).exp();
                    m = s;
                    for a in acc.iter_mut() {
                        *a = f16::from_f32(*a * ms).to_f32();
                    }
                } else {
                    vs = (s - m).exp();
                }
                for (a, &x) in acc.iter_mut().zip(&v[p * d..][..d]) {
                    *a = f16::from_f32(x.to_f32().mul_add(vs, *a)).to_f32();
                }
                l = l.mul_add(ms, vs);
            }
        }
        let inv = if l == 0.0 { 0.0 } else { 1.0 / l };
        for (o, &a) in out[j * d..][..d].iter_mut().zip(acc.iter()) {
            *o = a * inv;
        }
    }
}

/// Heads' worth of scratch (`head_dim` values each) that every kernel here fits in: the scalar
/// twin's query and accumulator, the SIMD twins' f16-rounded queries (up to four heads a pass).
pub(super) const SCRATCH_HEADS: usize = 4;

/// Head sizes the SIMD twins handle (their accumulators live in registers): 64, 96, 128, 192
/// and 256, the sizes of the model families kiln runs. Past the last multiple of 64 (96's last
/// 32 values) the reference sums the products in f64, as [`score`] does.
fn simd_head_dim(d: usize) -> bool {
    matches!(d, 64 | 96 | 128 | 192 | 256)
}

/// True when [`attend_group_avx512`] handles heads of `d` values in blocks of `bs` positions:
/// `d` one of [`simd_head_dim`]'s, `bs` a multiple of 16 (it scores 16 positions of a K tile
/// at once).
pub(super) fn avx512_covers(d: usize, bs: usize) -> bool {
    simd_head_dim(d) && bs > 0 && bs.is_multiple_of(LANES)
}

/// Query heads of one GQA group attended together by the AVX-512 twin (their K/V tiles are
/// converted from f16 once, and their independent softmax chains interleave).
#[cfg(target_arch = "x86_64")]
const HEADS: usize = 4;

/// AVX-512 twin of [`attend_group`] (bit-identical): scores of 16 positions at once (every
/// f16·f16 product is exact in f32, so only the order of the additions matters, and that order
/// is reproduced lane-wise over positions), then the sequential online softmax with the f16
/// accumulator rounded through `vcvtps2ph` after every step. Up to [`HEADS`] query heads of the
/// group run side by side; each head's arithmetic is exactly the one-head order. `scratch`
/// holds the f16-rounded queries: at least [`SCRATCH_HEADS`] `* head_dim` values. Panics unless
/// [`avx512_covers`] accepts the view's shape, `q` and `out` have the same length and `scratch`
/// is long enough.
///
/// # Safety
/// The CPU must support AVX-512F, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
pub(super) unsafe fn attend_group_avx512(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: Scores,
    scratch: &mut [f32],
) {
    let (d, bs) = (view.head_dim, view.block_size);
    assert!(
        avx512_covers(d, bs) && q.len() == out.len(),
        "attend_group_avx512: head_dim {d}, block size {bs} not covered"
    );
    let g = q.len() / d;
    for j0 in (0..g).step_by(HEADS) {
        let span = j0 * d..(j0 + HEADS).min(g) * d;
        // SAFETY: features as required by this function; d and bs checked above.
        unsafe {
            let (qs, os) = (&q[span.clone()], &mut out[span]);
            // Const head counts and accumulator widths keep the accumulators in registers.
            macro_rules! go {
                ($($g:literal)*) => {
                    match ((g - j0).min(HEADS), d / LANES) {
                        $(
                            ($g, 4) => heads_avx512::<$g, 4>(view, qs, os, scale, scratch),
                            ($g, 6) => heads_avx512::<$g, 6>(view, qs, os, scale, scratch),
                            ($g, 8) => heads_avx512::<$g, 8>(view, qs, os, scale, scratch),
                            ($g, 12) => heads_avx512::<$g, 12>(view, qs, os, scale, scratch),
                            ($g, _) => heads_avx512::<$g, 16>(view, qs, os, scale, scratch),
                        )*
                        _ => unreachable!("at most {HEADS} heads per pass"),
                    }
                };
            }
            go!(1 2 3 4)
        }
    }
}

/// `G` query heads of one KV head (see [`attend_group_avx512`]); `q` and `out` hold `G` heads.
///
/// # Safety
/// AVX-512F, FMA and F16C; `head_dim` a multiple of 64 and at most 256, block size a multiple
/// of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address registers of several heads
unsafe fn heads_avx512<const G: usize, const C: usize>(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: Scores,
    qh: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (d, bs) = (view.head_dim, view.block_size);
    debug_assert_eq!(d, C * LANES);
    let full = d - d % (LANES * PARTS);
    #[inline(always)]
    fn round16(x: __m512) -> __m512 {
        // SAFETY: callers run with AVX-512F enabled.
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(x))
        }
    }
    let qh = &mut qh[..G * d];
    for (h, &x) in qh.iter_mut().zip(&q[..G * d]) {
        *h = f16::from_f32(x).to_f32();
    }
    let mut acc = [[_mm512_setzero_ps(); C]; G];
    let (mut m, mut l) = ([f32::NEG_INFINITY; G], [0.0f32; G]);
    let mut scores = [[0f32; LANES]; G];
    for bi in view.first_block()..view.n_blocks() {
        let (k, v, lo, n) = view.block(bi);
        assert!(k.len() == bs * d && v.len() >= n * d);
        // Scores start at a vector boundary; positions before `lo` (outside a sliding
        // window) are scored but skipped.
        for t in (lo - lo % LANES..n).step_by(LANES) {
            let skip = lo.saturating_sub(t);
            // s[j][lane]: head j's lane-`lane` partial sums, vectorized over 16 positions.
            let mut s = [[_mm512_setzero_ps(); LANES]; G];
            for lane in 0..LANES {
                let mut parts = [[_mm512_setzero_ps(); PARTS]; G];
                for base in (0..full).step_by(LANES * PARTS) {
                    for pj in 0..PARTS {
                        let i = base + pj * LANES + lane;
                        // SAFETY: i * bs + t + 16 <= (d - 1) * bs + bs = k.len().
                        let kk = unsafe {
                            _mm512_cvtph_ps(_mm256_loadu_si256(k.as_ptr().add(i * bs + t).cast()))
                        };
                        for j in 0..G {
                            // SAFETY: j < G and i < d, and `qh` holds G * d values.
                            let qi = unsafe { *qh.get_unchecked(j * d + i) };
                            parts[j][pj] = _mm512_fmadd_ps(_mm512_set1_ps(qi), kk, parts[j][pj]);
                        }
                    }
                }
                for j in 0..G {
                    let [p0, p1, p2, p3] = parts[j];
                    s[j][lane] = _mm512_add_ps(_mm512_add_ps(p0, p2), _mm512_add_ps(p1, p3));
                }
            }
            for j in 0..G {
                let mut w = LANES / 2;
                while w >= 1 {
                    for lane in 0..w {
                        s[j][lane] = _mm512_add_ps(s[j][lane], s[j][lane + w]);
                    }
                    w /= 2;
                }
            }
            if full < d {
                // The reference's tail: the tree's sum widened to f64, then each f32 product
                // added in f64, in order; 16 positions as two vectors of 8 f64.
                let mut wide = [[_mm512_setzero_pd(); 2]; G];
                for j in 0..G {
                    let x = s[j][0];
                    wide[j] = [
                        _mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                            _mm512_castps_pd(x),
                        ))),
                    ];
                }
                for i in full..d {
                    // SAFETY: as for the tree above (i < d).
                    let kk = unsafe {
                        _mm512_cvtph_ps(_mm256_loadu_si256(k.as_ptr().add(i * bs + t).cast()))
                    };
                    for j in 0..G {
                        // SAFETY: j < G and i < d, and `qh` holds G * d values.
                        let qi = unsafe { *qh.get_unchecked(j * d + i) };
                        let p = _mm512_mul_ps(_mm512_set1_ps(qi), kk);
                        let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(p));
                        wide[j][0] =
                            _mm512_add_pd(wide[j][0], _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
                        wide[j][1] =
                            _mm512_add_pd(wide[j][1], _mm512_cvtps_pd(_mm256_castpd_ps(hi)));
                    }
                }
                for j in 0..G {
                    let lo = _mm512_castps256_ps512(_mm512_cvtpd_ps(wide[j][0]));
                    s[j][0] = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                        _mm512_castps_pd(lo),
                        _mm256_castps_pd(_mm512_cvtpd_ps(wide[j][1])),
                    ));
                }
            }
            for j in 0..G {
                // SAFETY: `scores[j]` holds 16 f32.
                unsafe { _mm512_storeu_ps(scores[j].as_mut_ptr(), s[j][0]) };
            }
            // The running max and each position's exp argument are a cheap serial scan; the
            // exps of the 16 positions then run as one vector (bit-identical to expf).
            let nv = (n - t).min(LANES);
            let mut grew = [0u16; G];
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
                // SAFETY: AVX-512F (this function's contract); the arguments are <= 0 or NaN.
                unsafe {
                    let v = super::expf::expf16_nonpositive(_mm512_loadu_ps(arg.as_ptr()));
                    _mm512_storeu_ps(e[j].as_mut_ptr(), v);
                }
            }
            for p in skip..nv {
                let mut vsv = [_mm512_setzero_ps(); G];
                for j in 0..G {
                    let (ms, vs) = if grew[j] & (1 << p) != 0 {
                        let ms = e[j][p];
                        let msv = _mm512_set1_ps(ms);
                        for a in acc[j].iter_mut() {
                            *a = round16(_mm512_mul_ps(*a, msv));
                        }
                        (ms, 1.0f32)
                    } else {
                        (1.0f32, e[j][p])
                    };
                    vsv[j] = _mm512_set1_ps(vs);
                    l[j] = l[j].mul_add(ms, vs);
                }
                let row = (t + p) * d;
                for ci in 0..C {
                    // SAFETY: row + ci * 16 + 16 <= (t + p + 1) * d <= n * d <= v.len().
                    let vv = unsafe {
                        _mm512_cvtph_ps(_mm256_loadu_si256(v.as_ptr().add(row + ci * LANES).cast()))
                    };
                    for j in 0..G {
                        acc[j][ci] = round16(_mm512_fmadd_ps(vv, vsv[j], acc[j][ci]));
                    }
                }
            }
        }
    }
    for j in 0..G {
        let inv = _mm512_set1_ps(if l[j] == 0.0 { 0.0 } else { 1.0 / l[j] });
        for ci in 0..C {
            // SAFETY: j * d + ci * 16 + 16 <= (j + 1) * d <= out.len().
            unsafe {
                _mm512_storeu_ps(
                    out.as_mut_ptr().add(j * d + ci * LANES),
                    _mm512_mul_ps(acc[j][ci], inv),
                )
            };
        }
    }
}

/// Positions the AVX2 twin scores at once: one 256-bit register of f32.
const AVX2_POS: usize = 8;

/// True when [`attend_group_avx2`] handles heads of `d` values in blocks of `bs` positions:
/// `d` as for AVX-512, `bs` a multiple of 8 (it scores 8
/// positions of a K tile at once).
pub(super) fn avx2_covers(d: usize, bs: usize) -> bool {
    simd_head_dim(d) && bs > 0 && bs.is_multiple_of(AVX2_POS)
}

/// Query heads of one GQA group attended together by the AVX2 twin: three heads' 4 partial
/// score vectors (12 registers) plus the K vector and a broadcast fit AVX2's 16 registers, and
/// three is the default model's group.
#[cfg(target_arch = "x86_64")]
const HEADS_AVX2: usize = 3;

/// AVX2 twin of [`attend_group`] (bit-identical), the AVX-512 twin's algorithm on 256-bit
/// registers: the reference's 16 score lanes are not vector lanes here (nor there) but 16
/// separate partial sums, each vectorized over positions, so 8 positions per register instead
/// of 16 changes no per-position operation: every position still gets the four-part fused
/// multiply-adds, the `(0 + 2) + (1 + 3)` combination and the halving over the 16 lanes of
/// [`reduce_lanes`]; the exps are [`super::expf::expf8_nonpositive`] (bit-identical to `expf`)
/// and the f16 accumulator is rounded through `vcvtps2ph` after every step. Up to
/// [`HEADS_AVX2`] query heads of the group run side by side; `scratch` as for
/// [`attend_group_avx512`]. Panics unless [`avx2_covers`] accepts the view's shape, `q` and
/// `out` have the same length and `scratch` is long enough.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn attend_group_avx2(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: Scores,
    scratch: &mut [f32],
) {
    let (d, bs) = (view.head_dim, view.block_size);
    assert!(
        avx2_covers(d, bs) && q.len() == out.len(),
        "attend_group_avx2: head_dim {d}, block size {bs} not covered"
    );
    let g = q.len() / d;
    for j0 in (0..g).step_by(HEADS_AVX2) {
        let span = j0 * d..(j0 + HEADS_AVX2).min(g) * d;
        // SAFETY: features as required by this function; d and bs checked above.
        unsafe {
            let (qs, os) = (&q[span.clone()], &mut out[span]);
            // Const head counts and accumulator widths, as in `attend_group_avx512`.
            macro_rules! go {
                ($($g:literal)*) => {
                    match ((g - j0).min(HEADS_AVX2), d / AVX2_POS) {
                        $(
                            ($g, 8) => heads_avx2::<$g, 8>(view, qs, os, scale, scratch),
                            ($g, 12) => heads_avx2::<$g, 12>(view, qs, os, scale, scratch),
                            ($g, 16) => heads_avx2::<$g, 16>(view, qs, os, scale, scratch),
                            ($g, 24) => heads_avx2::<$g, 24>(view, qs, os, scale, scratch),
                            ($g, _) => heads_avx2::<$g, 32>(view, qs, os, scale, scratch),
                        )*
                        _ => unreachable!("at most {HEADS_AVX2} heads per pass"),
                    }
                };
            }
            go!(1 2 3)
        }
    }
}

/// `G` query heads of one KV head (see [`attend_group_avx2`]); `q` and `out` hold `G` heads,
/// `C` registers of 8 values make one head.
///
/// # Safety
/// AVX2, FMA and F16C; `head_dim` a multiple of 64 and at most 256, block size a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address registers of several heads
unsafe fn heads_avx2<const G: usize, const C: usize>(
    view: &HeadView,
    q: &[f32],
    out: &mut [f32],
    scale: Scores,
    qh: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (d, bs) = (view.head_dim, view.block_size);
    debug_assert_eq!(d, C * AVX2_POS);
    let full = d - d % (LANES * PARTS);
    #[inline(always)]
    fn round16(x: __m256) -> __m256 {
        // SAFETY: callers run with F16C enabled.
        unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
    let qh = &mut qh[..G * d];
    for (h, &x) in qh.iter_mut().zip(&q[..G * d]) {
        *h = f16::from_f32(x).to_f32();
    }
    let mut acc = [[_mm256_setzero_ps(); C]; G];
    let (mut m, mut l) = ([f32::NEG_INFINITY; G], [0.0f32; G]);
    let mut scores = [[0f32; AVX2_POS]; G];
    for bi in view.first_block()..view.n_blocks() {
        let (k, v, lo, n) = view.block(bi);
        assert!(k.len() == bs * d && v.len() >= n * d);
        // As in the AVX-512 twin: aligned groups, positions before `lo` skipped.
        for t in (lo - lo % AVX2_POS..n).step_by(AVX2_POS) {
            let skip = lo.saturating_sub(t);
            // s[j][lane]: head j's lane-`lane` partial sums, vectorized over 8 positions.
            let mut s = [[_mm256_setzero_ps(); LANES]; G];
            for lane in 0..LANES {
                let mut parts = [[_mm256_setzero_ps(); PARTS]; G];
                for base in (0..full).step_by(LANES * PARTS) {
                    for pj in 0..PARTS {
                        let i = base + pj * LANES + lane;
                        // SAFETY: t is a multiple of 8 below n <= bs and bs is a multiple of
                        // 8, so i * bs + t + 8 <= (d - 1) * bs + bs = k.len().
                        let kk = unsafe {
                            _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(i * bs + t).cast()))
                        };
                        for j in 0..G {
                            // SAFETY: j < G and i < d, and `qh` holds G * d values.
                            let qi = unsafe { *qh.get_unchecked(j * d + i) };
                            parts[j][pj] = _mm256_fmadd_ps(_mm256_set1_ps(qi), kk, parts[j][pj]);
                        }
                    }
                }
                for j in 0..G {
                    let [p0, p1, p2, p3] = parts[j];
                    s[j][lane] = _mm256_add_ps(_mm256_add_ps(p0, p2), _mm256_add_ps(p1, p3));
                }
            }
            for j in 0..G {
                let mut w = LANES / 2;
                while w >= 1 {
                    for lane in 0..w {
                        s[j][lane] = _mm256_add_ps(s[j][lane], s[j][lane + w]);
                    }
                    w /= 2;
                }
            }
            if full < d {
                // The reference's f64 tail (see `heads_avx512`), 8 positions as two vectors of
                // 4 f64.
                let mut wide = [[_mm256_setzero_pd(); 2]; G];
                for j in 0..G {
                    let x = s[j][0];
                    wide[j] = [
                        _mm256_cvtps_pd(_mm256_castps256_ps128(x)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)),
                    ];
                }
                for i in full..d {
                    // SAFETY: as for the tree above (i < d).
                    let kk = unsafe {
                        _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(i * bs + t).cast()))
                    };
                    for j in 0..G {
                        // SAFETY: j < G and i < d, and `qh` holds G * d values.
                        let qi = unsafe { *qh.get_unchecked(j * d + i) };
                        let p = _mm256_mul_ps(_mm256_set1_ps(qi), kk);
                        wide[j][0] =
                            _mm256_add_pd(wide[j][0], _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
                        wide[j][1] = _mm256_add_pd(
                            wide[j][1],
                            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(p)),
                        );
                    }
                }
                for j in 0..G {
                    s[j][0] =
                        _mm256_set_m128(_mm256_cvtpd_ps(wide[j][1]), _mm256_cvtpd_ps(wide[j][0]));
                }
            }
            for j in 0..G {
                // SAFETY: `scores[j]` holds 8 f32.
                unsafe { _mm256_storeu_ps(scores[j].as_mut_ptr(), s[j][0]) };
            }
            // The serial running-max scan, then the 8 exps as one vector (bit-identical to
            // expf); positions past `n` get exp(0) and are never read.
            let nv = (n - t).min(AVX2_POS);
            let mut grew = [0u8; G];
            let mut e = [[0f32; AVX2_POS]; G];
            for j in 0..G {
                let mut arg = [0f32; AVX2_POS];
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
                // SAFETY: AVX2 and FMA (this function's contract); the arguments are <= 0 or
                // NaN; `arg` and `e[j]` hold 8 f32.
                unsafe {
                    let v = super::expf::expf8_nonpositive(_mm256_loadu_ps(arg.as_ptr()));
                    _mm256_storeu_ps(e[j].as_mut_ptr(), v);
                }
            }
            for p in skip..nv {
                let mut vsv = [_mm256_setzero_ps(); G];
                for j in 0..G {
                    let (ms, vs) = if grew[j] & (1 << p) != 0 {
                        let ms = e[j][p];
                        let msv = _mm256_set1_ps(ms);
                        for a in acc[j].iter_mut() {
                            *a = round16(_mm256_mul_ps(*a, msv));
                        }
                        (ms, 1.0f32)
                    } else {
                        (1.0f32, e[j][p])
                    };
                    vsv[j] = _mm256_set1_ps(vs);
                    l[j] = l[j].mul_add(ms, vs);
                }
                let row = (t + p) * d;
                for ci in 0..C {
                    // SAFETY: row + ci * 8 + 8 <= (t + p + 1) * d <= n * d <= v.len().
                    let vv = unsafe {
                        _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(row + ci * AVX2_POS).cast()))
                    };
                    for j in 0..G {
                        acc[j][ci] = round16(_mm256_fmadd_ps(vv, vsv[j], acc[j][ci]));
                    }
                }
            }
        }
    }
    for j in 0..G {
        let inv = _mm256_set1_ps(if l[j] == 0.0 { 0.0 } else { 1.0 / l[j] });
        for ci in 0..C {
            // SAFETY: j * d + ci * 8 + 8 <= (j + 1) * d <= out.len().
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(j * d + ci * AVX2_POS),
                    _mm256_mul_ps(acc[j][ci], inv),
                )
            };
        }
    }
}
