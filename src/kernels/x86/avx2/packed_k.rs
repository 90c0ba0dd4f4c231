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
//! the token's group-sum pairs from the per-call table. Those pairs come from the panel's
//! scale lines by one `vpbroadcastq` load and one `vpshufb` each (plus a `vpsraw` for Q6_K's
//! signed scales), not by widening and shifting: without VNNI the kernel is bound by its vector
//! ALU ops even at one token (~57 GB/s in L2 against ~33 from memory), so every op per block
//! counts.
//!
//! Two tile shapes: decode-sized calls (1-2 tokens) read both halves of a panel in one pass
//! (a panel streams from memory once, prefetched `PF_BLOCKS` ahead into L2, one line per 64 bytes
//! read); larger calls (prefill, batched decode: compute-bound) run one half at a time with
//! up to 4 tokens (Q4_K; Q5_K 2) sharing each unpacked weight register, which halves the
//! unpacking per multiply, and the whole half-panel's float sums fit the 16 ymm registers.
//! Q6_K's half-panel tiles take up to 16 tokens (see [`block_q6`]).
//!
//! The file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`).
//!
//! Tried on the Q4_K half-panel tile and measured no faster (Llama-3.2-1B Q4_K_M pp512, one
//! thread, alternating with this build's binary, 2026-11-27): the 8 steps written out (token
//! pointers held in registers, 28 instead of ~34 instructions per step): 72-75.5 against
//! 75.5-76.3 tok/s; 16 tokens per tile sharing one unpack of each block into an L1 scratch
//! (no `vpsrlw`/`vpand` per step, 2 weight loads): 63-64 against 76-80; Q4_K prefill on
//! the whole-panel 2-token tile (6 loads per 8 `vpmaddubsw` instead of 9, 3 more unpacking
//! ops): 70-72 against 70.6-80; 5 tokens per
//! half-panel tile instead of 4: 75.6-81.2 against 75.8-80.0 (no change). Fewer
//! instructions alone do not help; both the load and the vector ALU counts per step seem
//! near their bounds.

use std::arch::x86_64::*;

use crate::kernels::packed::driver::{self, PanelTile, Shape, Tile};
use crate::kernels::packed::kquant::{scale_at, ActTable};
use crate::kernels::packed::PanelLayout;
use crate::kernels::x86::kquant_tiles::{checked, dtype, KBlock, LARGE, QH, SMALL};
pub(crate) use crate::kernels::x86::kquant_tiles::{Q4K, Q5K, Q6K};
use crate::kernels::DType;

/// Tokens sharing one unpacked weight dword in a whole-panel tile.
const TT: usize = 2;
/// Calls of at most this many tokens (decode) run whole-panel tiles, larger ones half-panel
/// tiles of more tokens.
pub(crate) const ONE_PASS_MAX: usize = 2;
/// A `vpshufb` index that writes a zero byte.
const Z: i8 = -128;

/// One Q4_K/Q5_K block (half panel) for `N` tokens: the integer sums `isum` (scaled quants)
/// and `msum` (mins) added to `acc` / `accm` with `scale[t]` = (d * d_a, dmin * d_a): once per
/// block for Q5_K, once per pair of sub-blocks (64 values) for Q4_K (scalar/packed_k.rs).
/// Each quant chunk load also prefetches that line of `pf` (`x86::prefetch_line`; null: none),
/// or with `spread` every other load line `c / 2` (a whole-panel pass: each half prefetches
/// half of the block ahead, so the prefetches spread over the whole block's work).
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
    spread: bool,
) {
    // Q5_K: one sum per block; Q4_K: one per pair of sub-blocks (see scalar/packed_k.rs).
    let mut isum = [_mm256_setzero_si256(); N];
    let mut msum = [_mm256_setzero_si256(); N];
    // i16 chains per sub-block and token: Q4_K's 8 pair sums (at most 2 * 15 * 128 = 3840
    // each) fit one; Q5_K's (7936) fit four, so two chains (even / odd dwords).
    let chains = if T == Q4K { 1 } else { 2 };
    // SAFETY: (whole body) every load is inside the block's quants / scale area or the
    // tokens' Q8_K blocks (caller contract); the rest is register arithmetic.
    unsafe {
        let nib = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        let chunk = |c: usize| {
            if !spread || c.is_multiple_of(2) {
                super::super::prefetch_line(pf, if spread { c / 2 } else { c });
            }
            _mm256_load_si256(q.add(64 * c) as *const __m256i)
        };
        let bcast = |p: *const u8| _mm256_set1_epi32((p as *const i32).read_unaligned());
        // The 8 rows' bytes at `at` in all four qwords (one `vpbroadcastq` load).
        let bq = |at: usize| _mm256_set1_epi64x((sc.add(at) as *const i64).read_unaligned());
        // A scale line's 8 rows as i16 pairs (v, v), lane r = row r: one shuffle.
        let dup = _mm256_setr_epi8(
            0, Z, 0, Z, 1, Z, 1, Z, 2, Z, 2, Z, 3, Z, 3, Z, //
            4, Z, 4, Z, 5, Z, 5, Z, 6, Z, 6, Z, 7, Z, 7, Z,
        );
        let line = |at: usize| _mm256_shuffle_epi8(bq(at), dup);
        // Two lines interleaved by `vpunpcklbw` (bytes e0 o0 e1 o1 .. e7 o7 in each 128-bit
        // half) as i16 pairs (e, o), lane r = row r.
        let eo = _mm256_setr_epi8(
            0, Z, 1, Z, 2, Z, 3, Z, 4, Z, 5, Z, 6, Z, 7, Z, //
            8, Z, 9, Z, 10, Z, 11, Z, 12, Z, 13, Z, 14, Z, 15, Z,
        );
        for kk in 0..4 {
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
                let c = m % chains;
                for t in 0..N {
                    let xl = bcast(x[t].add(64 * kk + 4 * m));
                    let xh = bcast(x[t].add(64 * kk + 32 + 4 * m));
                    lo[t][c] = _mm256_add_epi16(lo[t][c], _mm256_maddubs_epi16(wl, xl));
                    hi[t][c] = _mm256_add_epi16(hi[t][c], _mm256_maddubs_epi16(wh, xh));
                }
            }
            let sl = line(scale_at::SC_K4 + 16 * (2 * kk));
            let sh = line(scale_at::SC_K4 + 16 * (2 * kk + 1));
            for t in 0..N {
                let mut s = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t][0], sl),
                    _mm256_madd_epi16(hi[t][0], sh),
                );
                if T != Q4K {
                    // Q5_K: each chain scaled on its own (their i16 sum may overflow).
                    s = _mm256_add_epi32(
                        s,
                        _mm256_add_epi32(
                            _mm256_madd_epi16(lo[t][1], sl),
                            _mm256_madd_epi16(hi[t][1], sh),
                        ),
                    );
                }
                isum[t] = _mm256_add_epi32(isum[t], s);
            }
            // Mins of sub-blocks 2kk, 2kk + 1 as i16 pairs, times the token's group-sum pair.
            let mp = _mm256_shuffle_epi8(
                _mm256_unpacklo_epi8(
                    bq(scale_at::MIN_K4 + 16 * (2 * kk)),
                    bq(scale_at::MIN_K4 + 16 * (2 * kk + 1)),
                ),
                eo,
            );
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
/// Two steps at a time (values `4j..4j + 8` of each 32-value quarter): their 8 unpacked weight
/// registers serve every token, and each token's two pair sums per quarter (at most 2 * 16128
/// in i16) go straight into `vpmaddwd` by the group's scale, so no i16 sums stay live between
/// steps (with per-step i16 sums kept across steps, 2 tokens already spilled them). Per token
/// and step pair only its one i32 sum is live beside the 8 weight and 4 scale registers, so
/// the token count is not bound by the registers: from 4 tokens on, the compiler keeps most
/// sums in L1 (one load-add and one store per token and step pair), and the unpacking (3
/// loads, 11 ops a step) is shared by up to 16 tokens ([`half_tokens`]): 22 / 16 ~ 1.4 ALU
/// ops per token and step pair instead of 22 / 4 = 5.5, beside the token's own 20 (8
/// `vpmaddubsw`, 4 `vpaddw`, 4 `vpmaddwd`, 4 `vpaddd`; 8 broadcasts). The all-Q6_K Llama-3.2-1B
/// (`kiln quantize -t Q6_K`) AVX2 pp512, one thread, ran ~11% faster at 8 tokens and
/// ~13% at 12 or 16 than at 4 (2026-11-27, alternating binaries). Tried and no faster: the
/// quarters outer and the tokens inner (each quarter's two weight registers freed early; the
/// 4-token and 8-token sums then stayed in registers or spilled as the compiler chose):
/// 65.3/64.1/65.5 and 68.2/61.7/68.7 against 66.4/67.0/66.0 tok/s (4 tokens, this order).
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
    spread: bool,
) {
    // SAFETY: (whole body) as in `block_k4`.
    unsafe {
        let m6 = _mm256_set1_epi8(0x3F);
        let (b01, b23, b45) = (
            _mm256_set1_epi8(0x03),
            _mm256_set1_epi8(0x0C),
            _mm256_set1_epi8(0x30),
        );
        let chunk = |c: usize| {
            if !spread || c.is_multiple_of(2) {
                super::super::prefetch_line(pf, if spread { c / 2 } else { c });
            }
            _mm256_load_si256(q.add(64 * c) as *const __m256i)
        };
        let bcast = |p: *const u8| _mm256_set1_epi32((p as *const i32).read_unaligned());
        // Group g's 8 signed row scales in all four qwords (one `vpbroadcastq` load).
        let bq = |g: usize| {
            _mm256_set1_epi64x((sc.add(scale_at::SC_Q6 + 16 * g) as *const i64).read_unaligned())
        };
        // Each row's byte four times in its lane, then an arithmetic 16-bit shift: the
        // sign-extended i16 pair (s, s), lane r = row r.
        let dup = _mm256_setr_epi8(
            0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, //
            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7,
        );
        let twice = |g: usize| _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(bq(g), dup));
        // Groups 2m, 2m + 1 interleaved by `vpunpcklbw` (bytes e0 o0 .. e7 o7 per 128-bit
        // half), each byte twice: the i16 pair (s_2m, s_2m+1) after the same shift.
        let eo = _mm256_setr_epi8(
            0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, //
            8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15,
        );
        // Step 8h + j's four weight registers (quarters t = 0..4): chunks A, B, C
        // (packed/kquant.rs); v0..v2 are their low 6 bits, v3 their top 2 bits each (the
        // 16-bit shifts move bits within their own byte: the other bits are masked off).
        // (A macro: as a closure called twice, LLVM kept it out of line.)
        macro_rules! unpack {
            ($s:expr) => {{
                let st = 3 * ($s);
                let (a, b, c) = (chunk(st), chunk(st + 1), chunk(st + 2));
                let v3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<6>(b), b01),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(c), b23),
                );
                let v3 = _mm256_or_si256(v3, _mm256_and_si256(_mm256_srli_epi16::<2>(a), b45));
                [
                    _mm256_and_si256(a, m6),
                    _mm256_and_si256(b, m6),
                    _mm256_and_si256(c, m6),
                    v3,
                ]
            }};
        }
        for h in 0..2 {
            for half in 0..2 {
                // Groups 8h + 2qt + half (qt = 0..4): values 128h + 32qt + 16half .. + 16.
                let sg: [__m256i; 4] = std::array::from_fn(|qt| twice(8 * h + 2 * qt + half));
                for jp in 0..2 {
                    let j = 4 * half + 2 * jp;
                    let (w0, w1) = (unpack!(8 * h + j), unpack!(8 * h + j + 1));
                    for t in 0..N {
                        for qt in 0..4 {
                            let at = 4 * (32 * h + 8 * qt + j);
                            let p = _mm256_add_epi16(
                                _mm256_maddubs_epi16(w0[qt], bcast(x[t].add(at))),
                                _mm256_maddubs_epi16(w1[qt], bcast(x[t].add(at + 4))),
                            );
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sg[qt]));
                        }
                    }
                }
            }
        }
        let mut corr = [_mm256_setzero_si256(); N];
        for m in 0..8 {
            let sp = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(
                _mm256_unpacklo_epi8(bq(2 * m), bq(2 * m + 1)),
                eo,
            ));
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

/// One panel x `N` tokens over all blocks: its 8-row half `W` (0 or 1), or with `W == 2` both
/// halves of each block in turn (one pass over the panel's bytes: what decode-sized calls run;
/// with the prefetch following the stream across panels, Q4_K's half-panel passes, the second
/// from cache, ran 4-8% slower at one token: 23.5 against 24.5 GB/s from memory). With `PF`
/// the chunk loads prefetch the stream two blocks ahead (`x86::prefetch_k_ahead`): with
/// `W == 2` each half one line per two loads, its half of the block ahead's lines, so one
/// prefetch goes out per 64 bytes read, as in the AVX-512 tiles. When the first half alone
/// prefetched every line (one per 32 bytes read, the second half none), the prefetches came
/// in bursts at twice the read rate and queued behind the core's miss buffers: Llama-3.2-1B
/// Q4_K_M decode under `KILN_ISA=avx2`, 2 threads, ran 28.3-30.1 against 32.7-37.3 tok/s
/// spread (2026-11-26, alternating binaries, shared machine under `chrt -f 10`; the AVX-512
/// path 31.8-35.3 in the same runs). Three or four blocks ahead instead of two: no change. Token `t`'s Q8_K row at `a + t * ar`, its table entries from
/// `tab0 + t * nb`, its outputs at `out + t * os` (the first row of the panel, or of half `W`;
/// `valid` rows of those are real).
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l` (kind `T`), the `N`
/// activation rows, table entries and output cells are in range.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const N: usize, const E: usize, const W: usize, const PF: bool>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    tab: &ActTable<E>,
    tab0: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let nb = l.nb;
    let halves = if W == 2 && valid > 8 { 2 } else { 1 };
    // Half `hh`'s rows: the panel's 8-row half `h`.
    let half = |hh: usize| if W == 2 { hh } else { W };
    let mut acc = [[_mm256_setzero_ps(); N]; 2];
    let mut accm = [[_mm256_setzero_ps(); N]; 2];
    for b in 0..nb {
        let KBlock {
            q: q0,
            sc: sc0,
            pf,
            x,
            pairs,
            dy,
        } = KBlock::<N>::at::<E, PF>(l, panel, b, a, ar, tab, tab0, |t| t);
        let dy: [__m256; N] = dy.map(|y| _mm256_set1_ps(y));
        for hh in 0..halves {
            let h = half(hh);
            let (q, sc) = (q0.wrapping_add(32 * h), sc0.wrapping_add(8 * h));
            // Whole-panel tiles: each half's chunk loads prefetch half of the block ahead's
            // lines, one per two loads; half-panel tiles: the first half all of them.
            let spread = W == 2;
            let pf = if spread && !pf.is_null() {
                pf.wrapping_add(hh * l.quant_bytes / 2)
            } else if hh == 0 {
                pf
            } else {
                std::ptr::null()
            };
            let f16s = |at: usize| {
                // SAFETY: 8 f16 of the 16 at `at` inside the scale area.
                _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sc0.add(at + 16 * h) as *const __m128i) })
            };
            let d = f16s(scale_at::D);
            if T == Q6K {
                let mut isum = [_mm256_setzero_si256(); N];
                // SAFETY: block b's quants (half h) and scales lie in the panel; x[t] are the
                // tokens' block b quants (caller contract).
                unsafe { block_q6::<N>(q, sc, &x, &pairs, &mut isum, pf, spread) };
                for t in 0..N {
                    // llama.cpp's prompt-path order (see scalar/packed_k.rs).
                    let x = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), d);
                    acc[hh][t] = _mm256_fmadd_ps(x, dy[t], acc[hh][t]);
                }
            } else {
                let dmin = f16s(scale_at::DMIN);
                let scale: [(__m256, __m256); N] =
                    std::array::from_fn(|t| (_mm256_mul_ps(d, dy[t]), _mm256_mul_ps(dmin, dy[t])));
                // SAFETY: as above.
                unsafe {
                    block_k4::<T, N>(
                        q,
                        sc,
                        &x,
                        &pairs,
                        &scale,
                        &mut acc[hh],
                        &mut accm[hh],
                        pf,
                        spread,
                    )
                };
            }
        }
    }
    for hh in 0..halves {
        let (at, n) = if W == 2 {
            (8 * hh, 8.min(valid - 8 * hh))
        } else {
            (0, valid.min(8))
        };
        for t in 0..N {
            let r = if T == Q6K {
                acc[hh][t]
            } else {
                _mm256_sub_ps(acc[hh][t], accm[hh][t])
            };
            // SAFETY: `valid` cells of token row t (caller contract), rows at..at + n.
            unsafe { super::packed::store(out.add(t * os + at), r, n) };
        }
    }
}

/// The decode-sized tile ([`ONE_PASS_MAX`] tokens or fewer in the call): [`tile`] on both
/// halves of a panel in one pass over its bytes x up to [`TT`] tokens, every tile prefetching
/// the stream (each reads its panel from memory), with `E`-entry terms.
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
                tile::<T, 1, E, 2, true>(l, p, a, ar, tab, e, o, os, v)
            } else {
                tile::<T, TT, E, 2, true>(l, p, a, ar, tab, e, o, os, v)
            }
        }
    }
}

/// Tokens per half-panel tile: Q4_K's one i16 chain per sub-block leaves registers for 4
/// (8 chains, 8 float sums); Q5_K's two chains take 2; Q6_K's two-step sums (no i16 sums live
/// across steps, one i32 sum per token) take 16, the unpacking shared by more tokens
/// ([`block_q6`]; sizes 1..=4, 8 and 16 only: with also 5..=7 and 12 instantiated, LLVM
/// moved the Q4_K tile out of line and Llama-3.2-1B Q4_K_M AVX2 pp512 ran 79.2-80.8 against
/// main's 80.8-81.7 tok/s; with these sizes 82.5-83.8 against 81.5-82.4).
const fn half_tokens(t: u8) -> usize {
    if t == Q5K {
        2
    } else if t == Q6K {
        16
    } else {
        4
    }
}

/// The tile of larger calls (prefill, batched decode): [`tile`] on one 8-row half of a panel
/// x up to [`half_tokens`] tokens; the driver runs a half's token tiles back to back, so the
/// half stays in L1 while they pass. Only a group's first tile on a panel's first half
/// prefetches the stream (it reads the panel from memory; the others find it in cache, and a
/// live prefetch pointer costs registers).
struct KHalf<'a, const T: u8, const E: usize>(&'a PanelLayout);

impl<const T: u8, const E: usize> PanelTile for KHalf<'_, T, E> {
    type Terms = ActTable<E>;
    const ROWS: usize = 8;
    const TOKENS: usize = half_tokens(T);

    #[inline(always)]
    fn tokens(&self, left: usize) -> usize {
        if T == Q6K {
            // The sizes the dispatch below has: 1..=4, 8, 16.
            match left {
                16.. => 16,
                8..=15 => 8,
                _ => left.min(4),
            }
        } else {
            Self::TOKENS.min(left)
        }
    }

    /// # Safety
    /// [`PanelTile::tile`]'s contract: `t` names a panel of this layout and activation rows,
    /// table entries and outputs in bounds for `t.valid` tokens; AVX2, FMA and F16C present.
    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, tab: &ActTable<E>) {
        let (l, (p, a, ar, e, o, os, v)) =
            (self.0, (t.panel, t.a, t.ar, t.e0, t.out, t.os, t.valid));
        macro_rules! half {
            ($n:literal) => {
                match (t.sub, e == 0) {
                    (0, true) => tile::<T, $n, E, 0, true>(l, p, a, ar, tab, e, o, os, v),
                    (0, false) => tile::<T, $n, E, 0, false>(l, p, a, ar, tab, e, o, os, v),
                    _ => tile::<T, $n, E, 1, false>(l, p, a, ar, tab, e, o, os, v),
                }
            };
        }
        // SAFETY: the driver's tile contract is `tile`'s with N = t.n on half t.sub.
        unsafe {
            match t.n {
                1 => half!(1),
                2 => half!(2),
                3 if T != Q5K => half!(3),
                4 if T == Q6K => half!(4),
                8 if T == Q6K => half!(8),
                16 if T == Q6K => half!(16),
                _ if T == Q4K => half!(4),
                _ => unreachable!("at most half_tokens(T) tokens"),
            }
        }
    }
}

/// The GEMM with an `E`-entry activation table: whole-panel tiles for decode-sized calls,
/// half-panel tiles for the others.
///
/// # Safety
/// As [`driver::run`] (the CPU features of this module), `s.nb <= E`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_tab<const T: u8, const E: usize>(l: &PanelLayout, s: &Shape) {
    let mut tab = ActTable::<E>::new(dtype(T));
    // SAFETY: caller contract.
    unsafe {
        if s.n_tok <= ONE_PASS_MAX {
            driver::run(&KTile::<T, E>(l), &mut tab, s)
        } else {
            driver::run(&KHalf::<T, E>(l), &mut tab, s)
        }
    }
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
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    let Some((l, s, small)) = checked::<T>(k, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `checked` checked the lengths and chose a table that holds nb; the CPU features
    // are this function's contract.
    unsafe {
        if small {
            gemm_tab::<T, SMALL>(&l, &s)
        } else {
            gemm_tab::<T, LARGE>(&l, &s)
        }
    }
}

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
