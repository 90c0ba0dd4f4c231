//! AVX2 panel GEMMs of the K-quants (Q4_K, Q5_K, Q6_K x Q8_K) over load-time repacked
//! weights (`packed/kquant.rs`); twins of `scalar/packed_k.rs`, so bit-identical to the
//! AVX-512 and NEON versions (one exact i32 sum per block and output, then one `fma`).
//!
//! A ymm holds 8 rows (half a panel: bytes `32h..32h + 32` of each 64-byte chunk), lane `r` 4
//! quants of row `8h + r`. `vpmaddubsw` of a weight dword with the broadcast activation dword
//! gives two i16 pair sums per row (at most 2 * 63 * 128 = 16128); as many of those are added
//! in i16 as cannot overflow (8 for Q4_K, 4 for Q5_K, 2 for Q6_K), then one `vpmaddwd` by the
//! rows' scale (held twice, as an i16 pair) turns them into the exact i32 sub-block term. The
//! mins (Q4_K/Q5_K) and Q6_K's `-32` offset are `vpmaddwd` of the rows' scale/min pairs with
//! the token's group-sum pairs from the per-call table.
//!
//! The file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`).

use std::arch::x86_64::*;

use crate::kernels::packed::driver::{self, PanelTile, Shape, Tile};
use crate::kernels::packed::kquant::{scale_at, ActTable, Q8K_BYTES, QH_AT};
use crate::kernels::packed::PanelLayout;
use crate::kernels::DType;

/// Kernel kinds (const generic): Q4_K, Q5_K, Q6_K.
pub(crate) const Q4K: u8 = 0;
pub(crate) const Q5K: u8 = 1;
pub(crate) const Q6K: u8 = 2;

fn dtype(t: u8) -> DType {
    match t {
        Q4K => DType::Q4_K,
        Q5K => DType::Q5_K,
        _ => DType::Q6_K,
    }
}

/// First qh chunk of a block (Q5_K).
const QH: usize = QH_AT / 64;
/// Tokens sharing one unpacked weight dword.
const TT: usize = 2;
/// Activation table entries (token x block) of decode-sized calls, and of the others.
const SMALL: usize = 128;
const LARGE: usize = 1024;

/// One Q4_K/Q5_K block (half panel) for `N` tokens: the integer sums `isum` (scaled quants)
/// and `msum` (mins) added to `acc` / `accm` with `scale[t]` = (d * d_a, dmin * d_a): once per
/// block for Q5_K, once per pair of sub-blocks (64 values) for Q4_K (scalar/packed_k.rs).
/// Each quant chunk load also prefetches that line of `pf` (`x86::prefetch_line`; null: none).
///
/// # Safety
/// CPU features as enabled; `q` is a block's quants plus `32h` (32-byte aligned), `sc` its
/// scale area plus `8h`, `x[t]` token t's Q8_K quants of that block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn block_k4<const T: u8, const N: usize>(
    q: *const u8,
    sc: *const u8,
    x: &[*const u8; N],
    pairs: &[&[i32; 8]; N],
    scale: &[(__m256, __m256); N],
    acc: &mut [__m256; N],
    accm: &mut [__m256; N],
    pf: *const u8,
) {
    // Q5_K: one sum per block; Q4_K: one per pair of sub-blocks (see scalar/packed_k.rs).
    let mut isum = [_mm256_setzero_si256(); N];
    let mut msum = [_mm256_setzero_si256(); N];
    // SAFETY: (whole body) every load is inside the block's quants / scale area or the
    // tokens' Q8_K blocks (caller contract); the rest is register arithmetic.
    unsafe {
        let nib = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        let chunk = |c: usize| {
            super::super::prefetch_line(pf, c);
            _mm256_load_si256(q.add(64 * c) as *const __m256i)
        };
        let bcast = |p: *const u8| _mm256_set1_epi32((p as *const i32).read_unaligned());
        // 8 rows' bytes of a scale line as i32 lanes, each value twice (an i16 pair).
        let line = |at: usize| {
            let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sc.add(at) as *const __m128i));
            _mm256_or_si256(v, _mm256_slli_epi32::<16>(v))
        };
        for kk in 0..4 {
            // Two i16 chains (even / odd dwords) per sub-block and token.
            let mut lo = [[_mm256_setzero_si256(); 2]; N];
            let mut hi = [[_mm256_setzero_si256(); 2]; N];
            for m in 0..8 {
                let w = chunk(8 * kk + m);
                let mut wl = _mm256_and_si256(w, nib);
                let mut wh = _mm256_and_si256(_mm256_srli_epi16::<4>(w), nib);
                if T == Q5K {
                    // Bit 2kk (2kk + 1) of each qh byte moved to bit 4 by one 16-bit shift
                    // (bit 4 of each byte comes from the same byte).
                    let h = chunk(QH + m);
                    let to4 = |k: i32| {
                        if k <= 4 {
                            _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - k))
                        } else {
                            _mm256_srl_epi16(h, _mm_cvtsi32_si128(k - 4))
                        }
                    };
                    let (hl, hh) = (to4(2 * kk as i32), to4(2 * kk as i32 + 1));
                    wl = _mm256_or_si256(wl, _mm256_and_si256(hl, bit4));
                    wh = _mm256_or_si256(wh, _mm256_and_si256(hh, bit4));
                }
                for t in 0..N {
                    let xl = bcast(x[t].add(64 * kk + 4 * m));
                    let xh = bcast(x[t].add(64 * kk + 32 + 4 * m));
                    let c = m % 2;
                    lo[t][c] = _mm256_add_epi16(lo[t][c], _mm256_maddubs_epi16(wl, xl));
                    hi[t][c] = _mm256_add_epi16(hi[t][c], _mm256_maddubs_epi16(wh, xh));
                }
            }
            let sl = line(scale_at::SC_K4 + 16 * (2 * kk));
            let sh = line(scale_at::SC_K4 + 16 * (2 * kk + 1));
            for t in 0..N {
                let s = if T == Q4K {
                    // 8 x 3840 fits in i16.
                    let l = _mm256_madd_epi16(_mm256_add_epi16(lo[t][0], lo[t][1]), sl);
                    let h = _mm256_madd_epi16(_mm256_add_epi16(hi[t][0], hi[t][1]), sh);
                    _mm256_add_epi32(l, h)
                } else {
                    // Q5_K: 4 x 7936 per chain fits, the chains' sum may not.
                    let l = _mm256_add_epi32(
                        _mm256_madd_epi16(lo[t][0], sl),
                        _mm256_madd_epi16(lo[t][1], sl),
                    );
                    let h = _mm256_add_epi32(
                        _mm256_madd_epi16(hi[t][0], sh),
                        _mm256_madd_epi16(hi[t][1], sh),
                    );
                    _mm256_add_epi32(l, h)
                };
                isum[t] = _mm256_add_epi32(isum[t], s);
            }
            let me = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                sc.add(scale_at::MIN_K4 + 16 * (2 * kk)) as *const __m128i,
            ));
            let mo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                sc.add(scale_at::MIN_K4 + 16 * (2 * kk + 1)) as *const __m128i,
            ));
            let mp = _mm256_or_si256(me, _mm256_slli_epi32::<16>(mo));
            for t in 0..N {
                let p = _mm256_madd_epi16(mp, _mm256_set1_epi32(pairs[t][kk]));
                msum[t] = _mm256_add_epi32(msum[t], p);
            }
            if T == Q4K {
                for t in 0..N {
                    acc[t] = _mm256_fmadd_ps(scale[t].0, _mm256_cvtepi32_ps(isum[t]), acc[t]);
                    accm[t] = _mm256_fmadd_ps(scale[t].1, _mm256_cvtepi32_ps(msum[t]), accm[t]);
                    isum[t] = _mm256_setzero_si256();
                    msum[t] = _mm256_setzero_si256();
                }
            }
        }
        if T != Q4K {
            for t in 0..N {
                acc[t] = _mm256_fmadd_ps(scale[t].0, _mm256_cvtepi32_ps(isum[t]), acc[t]);
                accm[t] = _mm256_fmadd_ps(scale[t].1, _mm256_cvtepi32_ps(msum[t]), accm[t]);
            }
        }
    }
}

/// Integer sum of one Q6_K block (half panel) for `N` tokens, the `-32` offset included;
/// prefetches `pf` as [`block_k4`].
///
/// # Safety
/// As [`block_k4`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
unsafe fn block_q6<const N: usize>(
    q: *const u8,
    sc: *const u8,
    x: &[*const u8; N],
    pairs: &[&[i32; 8]; N],
    isum: &mut [__m256i; N],
    pf: *const u8,
) {
    // SAFETY: (whole body) as in `block_k4`.
    unsafe {
        let m6 = _mm256_set1_epi8(0x3F);
        let (b01, b23, b45) = (
            _mm256_set1_epi8(0x03),
            _mm256_set1_epi8(0x0C),
            _mm256_set1_epi8(0x30),
        );
        let lo16 = _mm256_set1_epi32(0xFFFF);
        let chunk = |c: usize| {
            super::super::prefetch_line(pf, c);
            _mm256_load_si256(q.add(64 * c) as *const __m256i)
        };
        let bcast = |p: *const u8| _mm256_set1_epi32((p as *const i32).read_unaligned());
        // 8 rows' signed scales of group g as i32 lanes (sign-extended).
        let line = |g: usize| {
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                sc.add(scale_at::SC_Q6 + 16 * g) as *const __m128i
            ))
        };
        let twice =
            |v: __m256i| _mm256_or_si256(_mm256_and_si256(v, lo16), _mm256_slli_epi32::<16>(v));
        for h in 0..2 {
            for half in 0..2 {
                // Groups 8h + 2qt + half (qt = 0..4): values 128h + 32qt + 16half .. + 16.
                let mut p = [[_mm256_setzero_si256(); 4]; N];
                let sg: [__m256i; 4] = std::array::from_fn(|qt| twice(line(8 * h + 2 * qt + half)));
                for jj in 0..4 {
                    let j = 4 * half + jj;
                    // Chunks A, B, C of step 8h + j (packed/kquant.rs): v0..v2 are their low
                    // 6 bits, v3 their top 2 bits each (the 16-bit shifts move bits within
                    // their own byte: the other bits are masked off).
                    let st = 3 * (8 * h + j);
                    let (a, b, c) = (chunk(st), chunk(st + 1), chunk(st + 2));
                    let v3 = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<6>(b), b01),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(c), b23),
                    );
                    let v3 = _mm256_or_si256(v3, _mm256_and_si256(_mm256_srli_epi16::<2>(a), b45));
                    let w = [
                        _mm256_and_si256(a, m6),
                        _mm256_and_si256(b, m6),
                        _mm256_and_si256(c, m6),
                        v3,
                    ];
                    for (qt, wq) in w.iter().enumerate() {
                        for t in 0..N {
                            let xa = bcast(x[t].add(4 * (32 * h + 8 * qt + j)));
                            p[t][qt] = _mm256_add_epi16(p[t][qt], _mm256_maddubs_epi16(*wq, xa));
                        }
                    }
                    if jj % 2 == 1 {
                        // Two 16128-bounded pair sums fit in i16; fold them into i32 now.
                        for qt in 0..4 {
                            for t in 0..N {
                                let s = _mm256_madd_epi16(p[t][qt], sg[qt]);
                                isum[t] = _mm256_add_epi32(isum[t], s);
                                p[t][qt] = _mm256_setzero_si256();
                            }
                        }
                    }
                }
            }
        }
        let mut corr = [_mm256_setzero_si256(); N];
        for m in 0..8 {
            let sp = _mm256_or_si256(
                _mm256_and_si256(line(2 * m), lo16),
                _mm256_slli_epi32::<16>(line(2 * m + 1)),
            );
            for t in 0..N {
                let c = _mm256_madd_epi16(sp, _mm256_set1_epi32(pairs[t][m]));
                corr[t] = _mm256_add_epi32(corr[t], c);
            }
        }
        for t in 0..N {
            isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(corr[t]));
        }
    }
}

/// One panel x `N` tokens over all blocks: its 8-row half `which` (0 or 1), or with
/// `which == 2` both halves of each block in turn (one pass over the panel's bytes: what every
/// K-quant runs; with the prefetch following the stream across panels, Q4_K's half-panel
/// passes, the second from cache, ran 4-8% slower: 23.5 against 24.5 GB/s from memory).
/// Token `t`'s Q8_K row at `a + t * ar`,
/// its table entries from `tab0 + t * nb`, its outputs at `out + t * os` (the panel's first
/// row; `valid` <= 16 rows are real).
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l` (kind `T`), the `N`
/// activation rows, table entries and output cells are in range.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const N: usize, const E: usize>(
    l: &PanelLayout,
    panel: *const u8,
    which: usize,
    a: *const u8,
    ar: usize,
    tab: &ActTable<E>,
    tab0: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let nb = l.nb;
    let halves = if valid > 8 { 2 } else { 1 };
    let runs = |hh: usize| if which == 2 { hh < halves } else { hh == which };
    let mut acc = [[_mm256_setzero_ps(); N]; 2];
    let mut accm = [[_mm256_setzero_ps(); N]; 2];
    for b in 0..nb {
        let q0 = panel.wrapping_add(b * l.quant_bytes);
        let sc0 = panel.wrapping_add(l.scales_at(b));
        let pf = if N > 2 || which == 1 {
            std::ptr::null()
        } else {
            super::super::prefetch_k_ahead(l, panel, b)
        };
        let x: [*const u8; N] = std::array::from_fn(|t| a.wrapping_add(t * ar + b * Q8K_BYTES + 4));
        let pairs: [&[i32; 8]; N] = std::array::from_fn(|t| &tab.pair[tab0 + t * nb + b]);
        let dy: [__m256; N] = std::array::from_fn(|t| _mm256_set1_ps(tab.dy[tab0 + t * nb + b]));
        for h in 0..2 {
            if !runs(h) {
                continue;
            }
            let (q, sc) = (q0.wrapping_add(32 * h), sc0.wrapping_add(8 * h));
            // The first half's chunk loads prefetch the block ahead's lines (module docs).
            let pf = if h == 0 { pf } else { std::ptr::null() };
            let f16s = |at: usize| {
                // SAFETY: 8 f16 of the 16 at `at` inside the scale area.
                _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sc0.add(at + 16 * h) as *const __m128i) })
            };
            let (d, dmin) = (f16s(scale_at::D), f16s(scale_at::DMIN));
            if T == Q6K {
                let mut isum = [_mm256_setzero_si256(); N];
                // SAFETY: block b's quants (half h) and scales lie in the panel; x[t] are the
                // tokens' block b quants (caller contract).
                unsafe { block_q6::<N>(q, sc, &x, &pairs, &mut isum, pf) };
                for t in 0..N {
                    // llama.cpp's prompt-path order (see scalar/packed_k.rs).
                    let x = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), d);
                    acc[h][t] = _mm256_fmadd_ps(x, dy[t], acc[h][t]);
                }
            } else {
                let scale: [(__m256, __m256); N] =
                    std::array::from_fn(|t| (_mm256_mul_ps(d, dy[t]), _mm256_mul_ps(dmin, dy[t])));
                // SAFETY: as above.
                unsafe {
                    block_k4::<T, N>(q, sc, &x, &pairs, &scale, &mut acc[h], &mut accm[h], pf)
                };
            }
        }
    }
    for h in 0..2 {
        if !runs(h) {
            continue;
        }
        for t in 0..N {
            let r = if T == Q6K {
                acc[h][t]
            } else {
                _mm256_sub_ps(acc[h][t], accm[h][t])
            };
            let mut v = [0f32; 8];
            // SAFETY: `v` is 8 f32, the 32 bytes the store writes.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), r) };
            let n = 8.min(valid - 8 * h);
            // SAFETY: `valid` cells of token row t (caller contract), rows 8h..8h + n.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * os + 8 * h), n) };
        }
    }
}

/// The K-quant tile: [`tile`] on both halves of a panel (one pass over its bytes) x up to
/// [`TT`] tokens, with `E`-entry terms.
struct KTile<'a, const T: u8, const E: usize>(&'a PanelLayout);

impl<const T: u8, const E: usize> PanelTile for KTile<'_, T, E> {
    type Terms = ActTable<E>;
    const TOKENS: usize = TT;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, tab: &ActTable<E>) {
        let (l, (p, a, ar, e, o, os, v)) =
            (self.0, (t.panel, t.a, t.ar, t.e0, t.out, t.os, t.valid));
        // SAFETY: the driver's tile contract is `tile`'s with N = t.n, both halves.
        unsafe {
            if t.n == 1 {
                tile::<T, 1, E>(l, p, 2, a, ar, tab, e, o, os, v)
            } else {
                tile::<T, TT, E>(l, p, 2, a, ar, tab, e, o, os, v)
            }
        }
    }
}

/// The GEMM with an `E`-entry activation table.
///
/// # Safety
/// As [`driver::run`] (the CPU features of this module), `s.nb <= E`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_tab<const T: u8, const E: usize>(l: &PanelLayout, s: &Shape) {
    let mut tab = ActTable::<E>::new(dtype(T));
    // SAFETY: caller contract.
    unsafe { driver::run(&KTile::<T, E>(l), &mut tab, s) }
}

/// K-quant panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows`
/// of kind `T` and `a` Q8_K rows. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_k<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    let l = PanelLayout::new(dtype(T), k).expect("dtype with a panel layout");
    let Some(s) = Shape::packed(&l, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `Shape::packed` checked the lengths; nb <= MAX_K / 256 <= LARGE; the CPU
    // features are this function's contract.
    unsafe {
        if n_tok * l.nb <= SMALL {
            gemm_tab::<T, SMALL>(&l, &s)
        } else {
            gemm_tab::<T, LARGE>(&l, &s)
        }
    }
}

const _: () = assert!(crate::kernels::packed::MAX_K / 256 <= LARGE);

/// Sets the K-quant rows' `packed` GEMMs in `t`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C: the installed safe wrappers call the
/// `#[target_feature]` GEMMs without re-checking.
pub(crate) unsafe fn install(t: &mut crate::kernels::row::Table) {
    use crate::kernels::row::PackedKernels;
    macro_rules! set {
        ($($dt:ident: $kind:ident),*) => {$(
            if let Some(row) = t[DType::$dt as usize].as_mut() {
                row.packed = Some(PackedKernels {
                    // SAFETY: `install`'s caller verified AVX2, FMA and F16C.
                    gemm: |k, p, n, a, nt, o, os| unsafe { gemm_packed_k::<$kind>(k, p, n, a, nt, o, os) },
                });
            }
        )*};
    }
    set!(Q4_K: Q4K, Q5_K: Q5K, Q6_K: Q6K);
}
