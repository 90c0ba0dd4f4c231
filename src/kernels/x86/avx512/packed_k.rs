//! AVX-512 VNNI panel GEMMs of the K-quants (Q4_K, Q5_K, Q6_K x Q8_K) over load-time repacked
//! weights (`packed/kquant.rs`); twins of `scalar/packed_k.rs` (llama.cpp's repacked order:
//! one exact i32 sum per block and output, then one `fma`), bit-identical on every ISA.
//!
//! Lane `r` of a register is row `r` of the panel. A block's quant chunk `c` is one aligned
//! load holding dword `c` of all 16 rows; after nibble (and high-bit) masking, one `vpdpbusd`
//! with the broadcast activation dword adds 64 products. Each sub-block's dwords are summed in
//! i32 chains (values stay far below 2^31), multiplied by the rows' sub-block scales with one
//! `vpmulld` per sub-block; the mins (Q4_K/Q5_K) come from `vpdpwssd` of the rows' min
//! pairs with the token's group-sum pairs, computed once per call into a table, and Q6_K's
//! `-32` offset is each group chain's start value (`-32` times the token's group sum). Per
//! block and token the float work is one convert and one `fma` (two with mins), so the kernel
//! keeps up with memory at one token and with `vpdpbusd` at many.
//!
//! The Q6_K tile of 3+ tokens sums two of a step's four groups per pass (see `block_q6`): with
//! all four, its 4N group chains spilled and it ran ~2x the Q4_K tile's time per weight.
//! Tried on it after that and measured no faster (Phi-4-mini Q4_K_M pp512, one thread,
//! alternating, 2026-11-27): the group offsets `-32 * bsum` precomputed per call into a table
//! (one broadcast load instead of a scalar load, shift, negate and broadcast per group):
//! 38.9-40.0 against 38.9-39.9 tok/s; the eight passes written out (constant displacements
//! instead of the pointers the rolled passes keep on the stack): 38.4-38.7 against 38.9-39.5.
//!
//! The file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`).

use std::arch::x86_64::*;

use crate::kernels::packed::driver::{self, PanelTile, Shape, Tile};
use crate::kernels::packed::kquant::{scale_at, ActTable, QK_K};
use crate::kernels::packed::{PanelLayout, PANEL};
use crate::kernels::x86::kquant_tiles::{checked, dtype, KBlock, LARGE, QH, SMALL};
pub(crate) use crate::kernels::x86::kquant_tiles::{Q4K, Q5K, Q6K};
use crate::kernels::DType;

/// Tokens sharing one unpacked weight chunk.
const TT: usize = 4;

#[inline(always)]
fn mask(valid: usize) -> __mmask16 {
    if valid >= PANEL {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    }
}

/// Integer sums of one Q4_K/Q5_K block for `N` tokens: `isum` and the mins term `msum`.
/// Each quant chunk load also prefetches that line of `pf` (`x86::prefetch_line`; null: none).
///
/// # Safety
/// CPU features as enabled; `q` / `sc` are a block's aligned quants / scale area of kind
/// `T`, `x[t]` token t's Q8_K quants of that block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn block_k4<const T: u8, const N: usize>(
    q: *const u8,
    sc: *const u8,
    x: &[*const u8; N],
    pairs: &[&[i32; 8]; N],
    scale: &[(__m512, __m512); N],
    acc: &mut [__m512; N],
    accm: &mut [__m512; N],
    pf: *const u8,
) {
    // Q5_K: one sum per block; Q4_K: one per pair of sub-blocks (see scalar/packed_k.rs).
    let mut isum = [_mm512_setzero_si512(); N];
    let mut msum = [_mm512_setzero_si512(); N];
    // Two chains per sub-block when one token cannot hide the vpdpbusd latency.
    const fn chains(n: usize) -> usize {
        if n == 1 {
            2
        } else {
            1
        }
    }
    // SAFETY: (whole body) every load is inside the block's quants / scale area or the
    // tokens' Q8_K blocks (caller contract); the rest is register arithmetic.
    unsafe {
        let nib = _mm512_set1_epi8(0x0F);
        let bit4 = _mm512_set1_epi8(0x10);
        let chunk = |c: usize| {
            super::super::prefetch_line(pf, c);
            _mm512_load_si512(q.add(64 * c) as *const __m512i)
        };
        let bcast = |p: *const u8| _mm512_set1_epi32((p as *const i32).read_unaligned());
        let line = |at: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(sc.add(at) as *const __m128i));
        for kk in 0..4 {
            let mut lo = [[_mm512_setzero_si512(); 2]; N];
            let mut hi = [[_mm512_setzero_si512(); 2]; N];
            for m in 0..8 {
                let w = chunk(8 * kk + m);
                let mut wl = _mm512_and_si512(w, nib);
                // Q4_K: the high nibbles stay in place (16x the value, <= 240: still a u8);
                // their sums are divided by 16 below, exactly (every term is a multiple).
                let mut wh = if T == Q4K {
                    _mm512_andnot_si512(nib, w)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib)
                };
                if T == Q5K {
                    // Bit 2kk (2kk + 1) of each qh byte is bit 4 of sub-block 2kk's (2kk + 1's)
                    // value in that byte: a dword rotation moves it there (bit 4 of each byte
                    // comes from the same byte), vpternlog ORs it in (`x | (y & bit4)`).
                    let h = chunk(QH + m);
                    let hl = _mm512_rolv_epi32(h, _mm512_set1_epi32((4 - 2 * kk as i32) & 31));
                    let hh = _mm512_rolv_epi32(h, _mm512_set1_epi32((3 - 2 * kk as i32) & 31));
                    wl = _mm512_ternarylogic_epi32::<0xF8>(wl, hl, bit4);
                    wh = _mm512_ternarylogic_epi32::<0xF8>(wh, hh, bit4);
                }
                let c = m % chains(N);
                for t in 0..N {
                    let xl = bcast(x[t].add(64 * kk + 4 * m));
                    let xh = bcast(x[t].add(64 * kk + 32 + 4 * m));
                    lo[t][c] = _mm512_dpbusd_epi32(lo[t][c], wl, xl);
                    hi[t][c] = _mm512_dpbusd_epi32(hi[t][c], wh, xh);
                }
            }
            let sl = line(scale_at::SC_K4 + 16 * (2 * kk));
            let sh = line(scale_at::SC_K4 + 16 * (2 * kk + 1));
            for t in 0..N {
                let (l, h) = if chains(N) == 1 {
                    (lo[t][0], hi[t][0])
                } else {
                    (
                        _mm512_add_epi32(lo[t][0], lo[t][1]),
                        _mm512_add_epi32(hi[t][0], hi[t][1]),
                    )
                };
                let h = if T == Q4K {
                    _mm512_srai_epi32::<4>(h)
                } else {
                    h
                };
                let s = _mm512_add_epi32(_mm512_mullo_epi32(l, sl), _mm512_mullo_epi32(h, sh));
                isum[t] = _mm512_add_epi32(isum[t], s);
            }
            let me = line(scale_at::MIN_K4 + 16 * (2 * kk));
            let mo = line(scale_at::MIN_K4 + 16 * (2 * kk + 1));
            let mp = _mm512_or_si512(me, _mm512_slli_epi32::<16>(mo));
            for t in 0..N {
                msum[t] = _mm512_dpwssd_epi32(msum[t], mp, _mm512_set1_epi32(pairs[t][kk]));
            }
            if T == Q4K {
                for t in 0..N {
                    acc[t] = _mm512_fmadd_ps(scale[t].0, _mm512_cvtepi32_ps(isum[t]), acc[t]);
                    accm[t] = _mm512_fmadd_ps(scale[t].1, _mm512_cvtepi32_ps(msum[t]), accm[t]);
                    isum[t] = _mm512_setzero_si512();
                    msum[t] = _mm512_setzero_si512();
                }
            }
        }
        if T != Q4K {
            for t in 0..N {
                acc[t] = _mm512_fmadd_ps(scale[t].0, _mm512_cvtepi32_ps(isum[t]), acc[t]);
                accm[t] = _mm512_fmadd_ps(scale[t].1, _mm512_cvtepi32_ps(msum[t]), accm[t]);
            }
        }
    }
}

/// Integer sum of one Q6_K block for `N` tokens, the `-32` offset included; prefetches `pf`
/// as [`block_k4`].
///
/// # Safety
/// As [`block_k4`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
unsafe fn block_q6<const N: usize>(
    q: *const u8,
    sc: *const u8,
    x: &[*const u8; N],
    isum: &mut [__m512i; N],
    pf: *const u8,
) {
    // SAFETY: (whole body) as in `block_k4`.
    unsafe {
        let m6 = _mm512_set1_epi8(0x3F);
        let (b01, b23, b45) = (
            _mm512_set1_epi8(0x03),
            _mm512_set1_epi8(0x0C),
            _mm512_set1_epi8(0x30),
        );
        let chunk = |c: usize| {
            super::super::prefetch_line(pf, c);
            _mm512_load_si512(q.add(64 * c) as *const __m512i)
        };
        let bcast = |p: *const u8| _mm512_set1_epi32((p as *const i32).read_unaligned());
        let line = |at: usize| _mm512_cvtepi8_epi32(_mm_loadu_si128(sc.add(at) as *const __m128i));
        // x | (y & m): vpternlog's 0xF8.
        let or_masked =
            |x: __m512i, y: __m512i, m: __m512i| _mm512_ternarylogic_epi32::<0xF8>(x, y, m);
        // v3 of a step from its chunks A, B, C: their top 2 bits each (the 16-bit shifts move
        // bits within their own byte: the other bits are masked off).
        let top_bits = |a: __m512i, b: __m512i, c: __m512i| {
            let v3 = _mm512_and_si512(_mm512_srli_epi16::<6>(b), b01);
            let v3 = or_masked(v3, _mm512_srli_epi16::<4>(c), b23);
            or_masked(v3, _mm512_srli_epi16::<2>(a), b45)
        };
        // The offset term: each group's sum starts at -32 * bsum_g (the Q8_K group sum after
        // the block's 256 quants), so it needs no pass of its own.
        let start = |t: usize, g: usize| {
            let bs = (x[t].add(QK_K + 2 * g) as *const i16).read_unaligned();
            _mm512_set1_epi32(-32 * bs as i32)
        };
        if N <= 2 {
            for h in 0..2 {
                for half in 0..2 {
                    // Groups 8h + 2qt + half (qt = 0..4): values 128h + 32qt + 16half .. + 16.
                    let mut s: [[__m512i; 4]; N] = std::array::from_fn(|t| {
                        std::array::from_fn(|qt| start(t, 8 * h + 2 * qt + half))
                    });
                    for jj in 0..4 {
                        let j = 4 * half + jj;
                        // Chunks A, B, C of step 8h + j (packed/kquant.rs): v0..v2 are their
                        // low 6 bits, v3 their top 2 bits each (the 16-bit shifts move bits
                        // within their own byte: the other bits are masked off).
                        let st = 3 * (8 * h + j);
                        let (a, b, c) = (chunk(st), chunk(st + 1), chunk(st + 2));
                        let v3 = top_bits(a, b, c);
                        let w = [
                            _mm512_and_si512(a, m6),
                            _mm512_and_si512(b, m6),
                            _mm512_and_si512(c, m6),
                            v3,
                        ];
                        for (qt, wq) in w.iter().enumerate() {
                            for t in 0..N {
                                let xa = bcast(x[t].add(4 * (32 * h + 8 * qt + j)));
                                s[t][qt] = _mm512_dpbusd_epi32(s[t][qt], *wq, xa);
                            }
                        }
                    }
                    for qt in 0..4 {
                        let sg = line(scale_at::SC_Q6 + 16 * (8 * h + 2 * qt + half));
                        for t in 0..N {
                            isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t][qt], sg));
                        }
                    }
                }
            }
        } else {
            // Three or more tokens: two groups per pass (v0/v1 from chunks A/B, then v2/v3
            // from A/B/C, the second pass re-reading A and B from L1), so 2N group sums are
            // live instead of 4N and nothing spills. Same integer sums in another order: exact.
            for h in 0..2 {
                for half in 0..2 {
                    for pair in 0..2 {
                        let qt0 = 2 * pair;
                        let mut s: [[__m512i; 2]; N] = std::array::from_fn(|t| {
                            std::array::from_fn(|i| start(t, 8 * h + 2 * (qt0 + i) + half))
                        });
                        for jj in 0..4 {
                            let j = 4 * half + jj;
                            let st = 3 * (8 * h + j);
                            let w = if pair == 0 {
                                let (a, b) = (chunk(st), chunk(st + 1));
                                [_mm512_and_si512(a, m6), _mm512_and_si512(b, m6)]
                            } else {
                                // A and B were prefetched by the first pass.
                                let again =
                                    |c: usize| _mm512_load_si512(q.add(64 * c) as *const __m512i);
                                let (a, b, c) = (again(st), again(st + 1), chunk(st + 2));
                                let v3 = top_bits(a, b, c);
                                [_mm512_and_si512(c, m6), v3]
                            };
                            for (i, wq) in w.iter().enumerate() {
                                for t in 0..N {
                                    let xa = bcast(x[t].add(4 * (32 * h + 8 * (qt0 + i) + j)));
                                    s[t][i] = _mm512_dpbusd_epi32(s[t][i], *wq, xa);
                                }
                            }
                        }
                        for i in 0..2 {
                            let g = 8 * h + 2 * (qt0 + i) + half;
                            let sg = line(scale_at::SC_Q6 + 16 * g);
                            for t in 0..N {
                                let p = _mm512_mullo_epi32(s[t][i], sg);
                                isum[t] = _mm512_add_epi32(isum[t], p);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One panel x `N` tokens (`N <= TT`) over all blocks; token `t`'s Q8_K row at `a + t * ar`,
/// its table entries from `tab0 + t * nb`, its outputs at `out + t * os` (`valid` of them).
/// Tokens past `last` (`last < N`) repeat token `last`: they read its row and entries and store
/// the same values over its outputs. `last = N - 1` is the plain tile; a smaller `last`, not a
/// compile-time constant, makes the tile redo real work (a paced tile, [`KTile`]).
/// With `PF` the block loads prefetch the stream two blocks ahead (`x86::prefetch_k_ahead`):
/// what the tiles that read a panel from memory run (every tile of 1 or 2 tokens, and the
/// first tile of a token group in each panel); the group's other tiles find the panel in
/// cache and run without (a live prefetch pointer costs the 4-token tile registers: Q6_K
/// at 16 rows from memory ran 26% slower with it). Batched decode from memory, one thread,
/// 1B shapes (`gemv_bw ... mem 0 4`, 2026-11-26): Q4_K 11.2 -> 22.1 GB/s, Q6_K 11.7 -> 18.1
/// at 4 rows with the first tile prefetching.
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l` (kind `T`), the `N`
/// activation rows, table entries and output cells are in range.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const N: usize, const E: usize, const PF: bool>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    tab: &ActTable<E>,
    tab0: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
    last: usize,
) {
    let nb = l.nb;
    invariant!(last < N);
    // Token t's row, entries and outputs: the clamp is free when `last` is the constant N - 1.
    let tk = |t: usize| t.min(last);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut accm = [_mm512_setzero_ps(); N];
    for b in 0..nb {
        let KBlock {
            q,
            sc,
            pf,
            x,
            pairs,
            dy,
        } = KBlock::<N>::at::<E, PF>(l, panel, b, a, ar, tab, tab0, tk);
        // SAFETY: d and dmin are 16 f16 each inside the scale area.
        let (d, dmin) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(sc.add(scale_at::D) as *const __m256i)),
                _mm512_cvtph_ps(_mm256_loadu_si256(sc.add(scale_at::DMIN) as *const __m256i)),
            )
        };
        let dy: [__m512; N] = dy.map(|y| _mm512_set1_ps(y));
        if T == Q6K {
            let mut isum = [_mm512_setzero_si512(); N];
            // SAFETY: block b's quants and scales lie in the panel; x[t] are the tokens'
            // block b quants (caller contract).
            unsafe { block_q6::<N>(q, sc, &x, &mut isum, pf) };
            for t in 0..N {
                // llama.cpp's prompt-path order (see scalar/packed_k.rs).
                let x = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), d);
                acc[t] = _mm512_fmadd_ps(x, dy[t], acc[t]);
            }
        } else {
            let scale: [(__m512, __m512); N] =
                std::array::from_fn(|t| (_mm512_mul_ps(d, dy[t]), _mm512_mul_ps(dmin, dy[t])));
            // SAFETY: as above.
            unsafe { block_k4::<T, N>(q, sc, &x, &pairs, &scale, &mut acc, &mut accm, pf) };
        }
    }
    for t in 0..N {
        let r = if T == Q6K {
            acc[t]
        } else {
            _mm512_sub_ps(acc[t], accm[t])
        };
        // SAFETY: `valid` cells of token row tk(t) <= t (caller contract).
        unsafe { _mm512_mask_storeu_ps(out.add(tk(t) * os), mask(valid), r) };
    }
}

/// The K-quant tile: [`tile`] on up to [`TT`] tokens, with `E`-entry terms. When `paced`,
/// 2-token tiles run the 3-token tile with the second token repeated (same outputs, bit for
/// bit: each output is its own token's arithmetic): on Zen 4 (256-bit datapaths), one thread,
/// a 2-token tile streamed its panels from memory ~20% slower than a 3-token one although it
/// computes a third less, and slower than the padded tile (`gemv_bw` Llama-3.2-1B layers
/// `mem 0 2`, 2026-11-27: Q4_K 21.0-22.1 -> 25.8-26.7 GB/s, Q6_K 21.0 -> 27.1, against a
/// 27-28 GB/s plain read); the padded tile's extra `vpdpbusd`s keep its loads spaced out. The
/// AVX2 2-token tile is no faster (compute-bound at ~25 GB/s in L2). The repeat count `last`
/// is hidden from the compiler (`black_box`): folded to a constant, the repeated token's
/// work is merged away and the tile runs as the 2-token one (measured: as slow).
struct KTile<'a, const T: u8, const E: usize> {
    l: &'a PanelLayout,
    paced: bool,
}

impl<const T: u8, const E: usize> PanelTile for KTile<'_, T, E> {
    type Terms = ActTable<E>;
    const TOKENS: usize = TT;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, tab: &ActTable<E>) {
        let (l, (p, a, ar, e, o, os, v)) =
            (self.l, (t.panel, t.a, t.ar, t.e0, t.out, t.os, t.valid));
        // SAFETY: the driver's tile contract is `tile`'s with N = t.n (the paced tile reads
        // and writes only tokens 0 and 1 of its 3).
        unsafe {
            match (t.n, e == 0) {
                (1, _) => tile::<T, 1, E, true>(l, p, a, ar, tab, e, o, os, v, 0),
                (2, _) if self.paced => {
                    let last = std::hint::black_box(1);
                    tile::<T, 3, E, true>(l, p, a, ar, tab, e, o, os, v, last)
                }
                (2, _) => tile::<T, 2, E, true>(l, p, a, ar, tab, e, o, os, v, 1),
                (3, true) => tile::<T, 3, E, true>(l, p, a, ar, tab, e, o, os, v, 2),
                (3, false) => tile::<T, 3, E, false>(l, p, a, ar, tab, e, o, os, v, 2),
                (_, true) => tile::<T, TT, E, true>(l, p, a, ar, tab, e, o, os, v, TT - 1),
                (_, false) => tile::<T, TT, E, false>(l, p, a, ar, tab, e, o, os, v, TT - 1),
            }
        }
    }
}

/// K-quant panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows`
/// of kind `T` and `a` Q8_K rows. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_k<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    // SAFETY: this function's contract.
    unsafe { gemm::<T>(k, packed, n_rows, a, n_tok, out, os, false) }
}

/// [`gemm_packed_k`] with paced 2-token tiles ([`KTile`]): what [`gemm_packed_k_decode_256`]
/// runs for calls of 2 tokens. Same results, bit for bit.
///
/// # Safety
/// As [`gemm_packed_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_k_paced<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    // SAFETY: this function's contract.
    unsafe { gemm::<T>(k, packed, n_rows, a, n_tok, out, os, true) }
}

/// [`gemm_packed_k`], with `paced` 2-token tiles or not.
///
/// # Safety
/// As [`gemm_packed_k`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
    paced: bool,
) {
    let Some((l, s, small)) = checked::<T>(k, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `checked` checked the lengths and chose a table that holds nb; the CPU features
    // are this function's contract.
    unsafe {
        if small {
            gemm_tab::<T, SMALL>(&l, &s, paced)
        } else {
            gemm_tab::<T, LARGE>(&l, &s, paced)
        }
    }
}

/// The GEMM with an `E`-entry activation table (`paced`: as [`KTile`]).
///
/// # Safety
/// As [`driver::run`] (the CPU features of this module), `s.nb <= E`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm_tab<const T: u8, const E: usize>(l: &PanelLayout, s: &Shape, paced: bool) {
    let mut tab = ActTable::<E>::new(dtype(T));
    // SAFETY: caller contract.
    unsafe { driver::run(&KTile::<T, E> { l, paced }, &mut tab, s) }
}

/// [`gemm_packed_k`] on a CPU that runs AVX-512 on 256-bit datapaths
/// ([`isa::avx512_on_256bit_datapaths`]): 1-token calls take the AVX2 whole-panel tiles
/// (same results, bit for bit), 2-token ones this module's paced tiles
/// ([`gemm_packed_k_paced`]), the others this module's. From memory the AVX2 tiles kept
/// more of the stream in flight there: Zen 4, 2026-11-27, Llama-3.2-1B Q4_K_M decode on one
/// thread, alternating binaries, 26.7-28.7 -> 31.6-36.6 tok/s (Q4_K and Q6_K each gaining);
/// two threads with a busy second core showed no difference (43-45 tok/s both). Zen 5
/// (full-width AVX-512) ran the AVX-512 tiles faster (2026-11-26: Q4_K 29.8 against 25.1 GB/s).
/// At 2 tokens (batched decode of two sequences) the AVX2 tile is compute-bound (~25 GB/s
/// in L2, ~19.5 from memory) and the plain AVX-512 one no faster from memory; the paced
/// tiles took the Llama-3.2-1B Q4_K_M 2-sequence decode step from ~15% slower than a
/// 3-sequence step to about level with it (see `KTile`).
///
/// [`isa::avx512_on_256bit_datapaths`]: crate::kernels::isa::avx512_on_256bit_datapaths
///
/// # Safety
/// As [`gemm_packed_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_k_decode_256<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    use crate::kernels::x86::avx2::packed_k as avx2;
    // The kinds are `kquant_tiles`' in both modules.
    // SAFETY: this function's features include the AVX2 ones; the rest is the caller's
    // contract, the same for both GEMMs.
    unsafe {
        if n_tok == 1 {
            avx2::gemm_packed_k::<T>(k, packed, n_rows, a, n_tok, out, os)
        } else if n_tok == 2 {
            gemm_packed_k_paced::<T>(k, packed, n_rows, a, n_tok, out, os)
        } else {
            gemm_packed_k::<T>(k, packed, n_rows, a, n_tok, out, os)
        }
    }
}

/// Sets the K-quant rows' `packed` GEMMs in `t` (over the AVX2 ones, same results): the VNNI
/// versions ([`gemm_packed_k_decode_256`] on CPUs with 256-bit AVX-512 datapaths), or the AVX2
/// ones stay without VNNI.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL plus AVX2/FMA/F16C (VNNI is checked here): the
/// installed safe wrappers call the `#[target_feature]` GEMMs without re-checking.
pub(crate) unsafe fn install(t: &mut crate::kernels::row::Table) {
    use crate::kernels::row::PackedKernels;
    if !crate::kernels::isa::has_avx512_vnni() {
        return;
    }
    let half = crate::kernels::isa::avx512_on_256bit_datapaths();
    macro_rules! set {
        ($($dt:ident: $kind:ident),*) => {$(
            if let Some(row) = t[DType::$dt as usize].as_mut() {
                row.packed = Some(PackedKernels {
                    gemm: if half {
                        // SAFETY: `install`'s caller verified the CPU features, VNNI checked
                        // above.
                        |k, p, n, a, nt, o, os| unsafe { gemm_packed_k_decode_256::<$kind>(k, p, n, a, nt, o, os) }
                    } else {
                        // SAFETY: as above.
                        |k, p, n, a, nt, o, os| unsafe { gemm_packed_k::<$kind>(k, p, n, a, nt, o, os) }
                    },
                });
            }
        )*};
    }
    set!(Q4_K: Q4K, Q5_K: Q5K, Q6_K: Q6K);
}
