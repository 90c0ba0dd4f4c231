//! AVX2 and AVX-VNNI panel GEMMs over load-time repacked weights ([`crate::kernels::packed`]):
//! Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, bit-identical to their scalar twins in `scalar/packed.rs` (and so to
//! the AVX-512 panel GEMMs: every x86 path computes the same numbers).
//!
//! A panel's 64-byte quant chunk is two ymm halves: rows 0..8 and rows 8..16. Lane r of a half
//! holds 4 weights of row r, so a broadcast activation dword dots 8 rows at once with no
//! shuffles and no horizontal reduction:
//!
//! * plain AVX2: `vpmaddubsw` (unsigned weight x signed activation, pairs to i16) then
//!   `vpmaddwd` with ones (pairs to i32). Q4 weights are at most 15, so a whole block's eight
//!   `vpmaddubsw` results add up in i16 without saturating (8 x 2 x 15 x 128 < 2^15) and one
//!   `vpmaddwd` finishes the block; Q5 weights (at most 31) add up four at a time. Q8_0 uses the sign trick (`|w| * sign(a, w)`), since the
//!   packed unsigned `q + 128` would saturate `vpmaddubsw`.
//! * AVX-VNNI: `vpdpbusd` on ymm, as the AVX-512 kernel does on zmm.
//!
//! Orders (see the twin): Q4_1, Q5_0 and Q8_0 keep eight f32 partial sums per output
//! (llama.cpp's order, `legacy_kind::ggml_lanes`; Q5_0, and Q8_0 with VNNI, add each lane's
//! `-offset * sum(a)` term); Q4_0 / Q5_1 sum each block exactly in i32 and do one convert + fma
//! per block (Q5_1 then `fma(m, s)` into the same sum). Integer sums
//! are exact whichever instructions form them, which is what makes all paths agree.
//!
//! The file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`).

use std::arch::x86_64::*;

use crate::kernels::legacy_kind::*;
use crate::kernels::packed::driver::{self, NoTerms, PanelTile, Shape, Tile};
use crate::kernels::packed::terms::BlockTerms;
use crate::kernels::packed::PanelLayout;

/// Rows per ymm half of a panel.
const HALF: usize = 8;
/// Per-(token, block) activation table entries (stack: 2 x 16 KiB).
const SCRATCH: usize = 4096;
/// Small tables for decode-sized calls.
const SMALL: usize = 256;
/// Largest token tile of the Q4_0 / Q5_1 kernel.
const MAX_TT: usize = 4;

/// Whether `T` is a 5-bit kind (its panel block carries a `qh` chunk after the nibbles).
const fn is_q5(t: u8) -> bool {
    t == Q5_0 || t == Q5_1
}

/// Broadcast of the activation dword `i` of the quants at `q`.
///
/// # Safety
/// 4 readable bytes at `q + 4i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn act(q: *const u8, i: usize) -> __m256i {
    // SAFETY: caller contract.
    _mm256_set1_epi32(unsafe { (q.add(4 * i) as *const i32).read_unaligned() })
}

/// 8 f16 at `p` as f32 lanes.
///
/// # Safety
/// 16 readable bytes at `p`, 16-byte aligned.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16x8(p: *const u8) -> __m256 {
    // SAFETY: caller contract.
    _mm256_cvtph_ps(unsafe { _mm_load_si128(p as *const __m128i) })
}

/// Weight register `i` (dword i = values 4i..4i+4) of half `h` of the block at `q`: unsigned
/// nibbles for Q4, nibble | high bit << 4 for Q5, the packed `q + 128` bytes for Q8_0.
///
/// # Safety
/// `q` is a 64-byte aligned block of the panel's quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weights<const T: u8>(q: *const u8, h: usize, i: usize) -> __m256i {
    // SAFETY: chunk `i` (Q8_0), `i % 4` (Q4, Q5) or 4 (Q5's qh), half h, lies inside the
    // aligned block.
    unsafe {
        if T == Q8_0 {
            _mm256_load_si256(q.add(64 * i + 32 * h) as *const __m256i)
        } else {
            let x = _mm256_load_si256(q.add(64 * (i % 4) + 32 * h) as *const __m256i);
            let x = if i >= 4 { _mm256_srli_epi16::<4>(x) } else { x };
            let x = _mm256_and_si256(x, _mm256_set1_epi8(0x0F));
            if !is_q5(T) {
                return x;
            }
            // Bits 4i..4i+4 of each row's qh sit in its byte i / 2: copy that byte to all 4
            // bytes of the lane, keep bit 4 (i % 2) + j in byte j, and turn it into 0x10.
            let qh = _mm256_load_si256(q.add(256 + 32 * h) as *const __m256i);
            let sel = _mm256_add_epi32(
                _mm256_setr_epi32(
                    0,
                    0x0404_0404,
                    0x0808_0808,
                    0x0C0C_0C0C,
                    0,
                    0x0404_0404,
                    0x0808_0808,
                    0x0C0C_0C0C,
                ),
                _mm256_set1_epi32((i / 2) as i32 * 0x0101_0101),
            );
            let bit = _mm256_set1_epi32(0x0804_0201 << (4 * (i % 2)));
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh, sel), bit), bit);
            _mm256_or_si256(x, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
        }
    }
}

/// Lane r = sum of the 4 products of dword lane r of `w` (unsigned) and `x` (signed).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dword_dot_plain(w: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
}

/// [`dword_dot_plain`] with `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn dword_dot_vnni(w: __m256i, x: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x)
}

/// Exact i32 block sums of 8 rows, `start + sum(u * a)`, for Q4_0 / Q5_1 (u the unsigned
/// weight), with `w` the block's weight registers and `qa` the token's 32 quants.
///
/// # Safety
/// 32 readable bytes at `qa`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sum_plain<const T: u8>(w: &[__m256i; 8], qa: *const u8, start: i32) -> __m256i {
    invariant!(!ggml_lanes(T), "llama.cpp-order kinds run tile_lanes");
    let ones = _mm256_set1_epi16(1);
    if is_q5(T) {
        // Four pair sums of weights <= 31 stay inside i16 (4 x 2 x 31 x 128 < 2^15).
        let mut s16 = [_mm256_setzero_si256(); 2];
        for (i, &u) in w.iter().enumerate() {
            // SAFETY: dword i of the token's block quants.
            let x = unsafe { act(qa, i) };
            s16[i / 4] = _mm256_add_epi16(s16[i / 4], _mm256_maddubs_epi16(u, x));
        }
        let s = _mm256_add_epi32(
            _mm256_madd_epi16(s16[0], ones),
            _mm256_madd_epi16(s16[1], ones),
        );
        _mm256_add_epi32(s, _mm256_set1_epi32(start))
    } else {
        let mut s16 = _mm256_setzero_si256();
        for (i, &u) in w.iter().enumerate() {
            // SAFETY: dword i of the token's block quants.
            let x = unsafe { act(qa, i) };
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(u, x));
        }
        _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(start))
    }
}

/// [`block_sum_plain`] with `vpdpbusd`.
///
/// # Safety
/// 32 readable bytes at `qa`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn block_sum_vnni<const T: u8>(w: &[__m256i; 8], qa: *const u8, start: i32) -> __m256i {
    let mut s0 = _mm256_set1_epi32(start);
    let mut s1 = _mm256_setzero_si256();
    for i in (0..8).step_by(2) {
        // SAFETY: dwords i and i + 1 of the token's block quants.
        let (x0, x1) = unsafe { (act(qa, i), act(qa, i + 1)) };
        s0 = _mm256_dpbusd_avx_epi32(s0, w[i], x0);
        s1 = _mm256_dpbusd_avx_epi32(s1, w[i + 1], x1);
    }
    _mm256_add_epi32(s0, s1)
}

/// Stores the first `valid` lanes of `v` at `out`: one store when all 8 are (a `memcpy` call
/// per tile row cost 1.5% of a one-thread AVX2 Q4_K_M pp512).
///
/// # Safety
/// `valid` (1..=8) writable f32 at `out`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store(out: *mut f32, v: __m256, valid: usize) {
    if valid >= HALF {
        // SAFETY: caller contract.
        unsafe { _mm256_storeu_ps(out, v) };
    } else {
        let mut tmp = [0f32; HALF];
        // SAFETY: `tmp` holds 8 f32.
        unsafe { _mm256_storeu_ps(tmp.as_mut_ptr(), v) };
        // SAFETY: caller contract: `valid` cells at `out`.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), out, valid) };
    }
}

/// Generates one instruction set's panel GEMM: `$feat` its target features, `$dword` and
/// `$block` its integer dot helpers, `$plain` whether Q8_0 multiplies signed (the sign trick).
macro_rules! panel_gemm {
    ($name:ident, $feat:literal, $dword:ident, $block:ident, $plain:literal) => {
        mod $name {
            use super::*;

            /// Q4_1 x Q8_1, Q5_0 / Q8_0 x Q8_0 in llama.cpp's order: half `h` of one panel x
            /// one token, all blocks.
            ///
            /// # Safety
            /// CPU features as enabled; `panel` is a whole aligned panel of `l`, `a` one
            /// activation row, `out` `valid` cells.
            #[inline]
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn tile_lanes<const T: u8>(
                l: &PanelLayout,
                panel: *const u8,
                h: usize,
                a: *const u8,
                out: *mut f32,
                valid: usize,
                prefetch: bool,
            ) {
                let (ab, qo) = (adt(T).block_bytes(), if has_min(T) { 4 } else { 2 });
                // Plain AVX2 multiplies Q8_0 signed (the sign trick), so only Q5_0 and
                // VNNI's Q8_0 (stored `q + 128`) have an offset to remove.
                let off = match T {
                    Q5_0 => 16,
                    Q8_0 if !$plain => 128,
                    _ => 0,
                };
                let mut acc = [_mm256_setzero_ps(); 8];
                let mut summs = _mm256_setzero_ps();
                for b in 0..l.nb {
                    let q = panel.wrapping_add(b * l.quant_bytes);
                    if prefetch && h == 0 {
                        crate::kernels::x86::prefetch_ahead(q, l.quant_bytes);
                    }
                    let sc = panel.wrapping_add(l.scales_at(b) + 16 * h);
                    // SAFETY: half h of block b's scales (d, then Q4_1's m 32 bytes on),
                    // 16-aligned.
                    let dw = unsafe { f16x8(sc) };
                    let blk = a.wrapping_add(b * ab);
                    // SAFETY: the token's block b (f16 d, Q8_1's f16 s, 32 quants) is in `a`.
                    let hds = unsafe { (blk as *const i32).read_unaligned() };
                    let ds = _mm_cvtph_ps(_mm_cvtsi32_si128(hds));
                    let scale = _mm256_mul_ps(dw, _mm256_broadcastss_ps(ds));
                    if has_min(T) {
                        // SAFETY: as above.
                        let mw = unsafe { f16x8(sc.add(32)) };
                        summs =
                            _mm256_fmadd_ps(mw, _mm256_broadcastss_ps(_mm_movehdup_ps(ds)), summs);
                    }
                    // Lane i of the token's block: -off * (sum of values 4i..4i+4).
                    let mut start = [0i32; 8];
                    if off != 0 {
                        // SAFETY: the block's 32 quants follow its scales.
                        let x = unsafe { _mm256_loadu_si256(blk.add(qo) as *const __m256i) };
                        let sums = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(_mm256_set1_epi8(1), x),
                            _mm256_set1_epi16(1),
                        );
                        let v = _mm256_mullo_epi32(sums, _mm256_set1_epi32(-off));
                        // SAFETY: `start` is 8 i32.
                        unsafe { _mm256_storeu_si256(start.as_mut_ptr() as *mut __m256i, v) };
                    }
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        // SAFETY: q is block b's aligned quants; dword i of the token's quants.
                        let (w, x) = unsafe { (weights::<T>(q, h, i), act(blk.add(qo), i)) };
                        let p = if $plain && T == Q8_0 {
                            let ws = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                            let p = _mm256_maddubs_epi16(
                                _mm256_sign_epi8(ws, ws),
                                _mm256_sign_epi8(x, ws),
                            );
                            _mm256_madd_epi16(p, _mm256_set1_epi16(1))
                        } else {
                            $dword(w, x)
                        };
                        let p = if off != 0 {
                            _mm256_add_epi32(p, _mm256_set1_epi32(start[i]))
                        } else {
                            p
                        };
                        *acc_i = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), *acc_i);
                    }
                }
                let s: [__m256; 4] = std::array::from_fn(|j| _mm256_add_ps(acc[4 + j], acc[j]));
                let mut r = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
                if has_min(T) {
                    r = _mm256_add_ps(r, summs);
                }
                // SAFETY: `valid` cells at `out` (caller contract).
                unsafe { store(out, r, valid) };
            }

            /// Q4_0 x Q8_0 and Q5_1 x Q8_1: both halves of one panel x TT
            /// tokens over all blocks, activation terms from `tab` (entries
            /// `tab0 + t * nb + b`).
            ///
            /// # Safety
            /// As [`tile_lanes`] for TT activation rows `ar` apart and output rows `os`
            /// apart (`valid` cells each); `tab` holds the entries of the TT tokens.
            #[inline]
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
            pub(super) unsafe fn tile_q0<const T: u8, const TT: usize, const N: usize>(
                l: &PanelLayout,
                panel: *const u8,
                a: *const u8,
                ar: usize,
                tab: &BlockTerms<N>,
                tab0: usize,
                out: *mut f32,
                os: usize,
                valid: usize,
            ) {
                let nb = l.nb;
                let (ab, qo) = (adt(T).block_bytes(), if has_min(T) { 4 } else { 2 });
                // One half panel at a time: its TT accumulators stay in registers across
                // the blocks (the panel is small enough to be read twice from L1).
                for h in 0..valid.div_ceil(HALF) {
                    let mut acc = [_mm256_setzero_ps(); TT];
                    for b in 0..nb {
                        let q = panel.wrapping_add(b * l.quant_bytes);
                        if TT <= 2 && h == 0 {
                            crate::kernels::x86::prefetch_ahead(q, l.quant_bytes);
                        }
                        let w: [__m256i; 8] = std::array::from_fn(|i| {
                            // SAFETY: q is block b's aligned quants.
                            unsafe { weights::<T>(q, h, i) }
                        });
                        let sc = panel.wrapping_add(l.scales_at(b) + 16 * h);
                        // SAFETY: half h of block b's d (and m, 32 bytes on) lies in the
                        // panel, 16-byte aligned.
                        let dw = unsafe { f16x8(sc) };
                        let mw = if has_min(T) {
                            // SAFETY: as above.
                            unsafe { f16x8(sc.add(32)) }
                        } else {
                            _mm256_setzero_ps()
                        };
                        for t in 0..TT {
                            let ti = tab0 + t * nb + b;
                            let qa = a.wrapping_add(t * ar + b * ab + qo);
                            // SAFETY: token t's block b quants are inside `a`.
                            let sum = unsafe { $block::<T>(&w, qa, tab.start[ti]) };
                            let scale = _mm256_mul_ps(dw, _mm256_set1_ps(tab.d[ti]));
                            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc[t]);
                            if has_min(T) {
                                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(tab.s[ti]), acc[t]);
                            }
                        }
                    }
                    let hv = (valid - h * HALF).min(HALF);
                    for t in 0..TT {
                        // SAFETY: `valid` cells of token row t (caller contract).
                        unsafe { store(out.add(t * os + h * HALF), acc[t], hv) };
                    }
                }
            }

            /// Dispatches a Q4_0 / Q5_1 token tile of `tt` tokens (1..=MAX_TT).
            ///
            /// # Safety
            /// As [`tile_q0`] with TT = `tt`.
            #[inline]
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn tile_q0_dyn<const T: u8, const N: usize>(
                tt: usize,
                l: &PanelLayout,
                panel: *const u8,
                a: *const u8,
                ar: usize,
                tab: &BlockTerms<N>,
                tab0: usize,
                out: *mut f32,
                os: usize,
                valid: usize,
            ) {
                // SAFETY: this function's contract is tile_q0's with TT = tt.
                unsafe {
                    match tt {
                        1 => tile_q0::<T, 1, N>(l, panel, a, ar, tab, tab0, out, os, valid),
                        2 => tile_q0::<T, 2, N>(l, panel, a, ar, tab, tab0, out, os, valid),
                        3 => tile_q0::<T, 3, N>(l, panel, a, ar, tab, tab0, out, os, valid),
                        4 => tile_q0::<T, 4, N>(l, panel, a, ar, tab, tab0, out, os, valid),
                        _ => unreachable!("token tiles hold at most {MAX_TT} tokens"),
                    }
                }
            }

            /// The llama.cpp-order kinds' tile (Q4_1, Q5_0, Q8_0): [`tile_lanes`], one
            /// half panel x one token; `.1`: prefetch the stream (decode).
            struct LanesTile<'a, const T: u8>(&'a PanelLayout, bool);

            impl<const T: u8> PanelTile for LanesTile<'_, T> {
                type Terms = NoTerms;
                const ROWS: usize = HALF;
                const TOKENS: usize = 1;

                #[inline(always)]
                unsafe fn tile(&self, t: &Tile, _: &NoTerms) {
                    let (l, h) = (self.0, t.sub);
                    // SAFETY: the driver's tile contract is tile_lanes' for half t.sub.
                    unsafe { tile_lanes::<T>(l, t.panel, h, t.a, t.out, t.valid, self.1) }
                }
            }

            /// The block-sum kinds' tile (Q4_0, Q5_1): [`tile_q0`], both halves of a panel
            /// x up to [`MAX_TT`] tokens (the tile loops the halves itself so its tokens'
            /// activations stay in registers and L1), with `N`-entry terms.
            struct Q0Tile<'a, const T: u8, const N: usize>(&'a PanelLayout);

            impl<const T: u8, const N: usize> PanelTile for Q0Tile<'_, T, N> {
                type Terms = BlockTerms<N>;
                const TOKENS: usize = MAX_TT;

                #[inline(always)]
                unsafe fn tile(&self, t: &Tile, tab: &BlockTerms<N>) {
                    let (l, n) = (self.0, t.n);
                    // SAFETY: the driver's tile contract is tile_q0's with TT = t.n.
                    unsafe {
                        tile_q0_dyn::<T, N>(
                            n, l, t.panel, t.a, t.ar, tab, t.e0, t.out, t.os, t.valid,
                        )
                    }
                }
            }

            /// Q4_0 / Q5_1 GEMM with `N`-entry activation terms (the llama.cpp-order kinds
            /// run [`LanesTile`]).
            ///
            /// # Safety
            /// As [`driver::run`] (this instruction set's features), `s.nb <= N`.
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn gemm_q0<const T: u8, const N: usize>(l: &PanelLayout, s: &Shape) {
                invariant!(!ggml_lanes(T), "llama.cpp-order kinds run tile_lanes");
                let mut tab = BlockTerms::<N>::new(T, if T == Q5_1 { 0 } else { 8 });
                // SAFETY: caller contract.
                unsafe { driver::run(&Q0Tile::<T, N>(l), &mut tab, s) }
            }

            /// The panel GEMM of this instruction set (contract of the module's
            /// `gemm_packed`).
            ///
            /// # Safety
            /// The CPU must support `$feat`.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn gemm_packed<const T: u8>(
                k: usize,
                packed: &[u8],
                n_rows: usize,
                a: &[u8],
                n_tok: usize,
                out: crate::kernels::cells::OutCells<'_>,
                os: usize,
            ) {
                let l = PanelLayout::new(wdt(T), k).expect("dtype with a panel layout");
                let Some(s) = Shape::packed(&l, packed, n_rows, a, n_tok, out, os) else {
                    return;
                };
                // SAFETY: `Shape::packed` checked the lengths; `PanelLayout::new` caps nb
                // at SCRATCH; the CPU features are this function's contract.
                unsafe {
                    if ggml_lanes(T) {
                        let tile = LanesTile::<T>(&l, n_tok == 1);
                        driver::run(&tile, &mut NoTerms, &s)
                    } else if n_tok * l.nb <= SMALL {
                        gemm_q0::<T, SMALL>(&l, &s)
                    } else {
                        gemm_q0::<T, SCRATCH>(&l, &s)
                    }
                }
            }
        }
    };
}

panel_gemm!(
    plain,
    "avx2,fma,f16c",
    dword_dot_plain,
    block_sum_plain,
    true
);
panel_gemm!(
    vnni,
    "avx2,fma,f16c,avxvnni",
    dword_dot_vnni,
    block_sum_vnni,
    false
);

/// AVX2 panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for `r < n_rows`,
/// `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows` of kind `T`
/// (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0) and `a` rows in its activation dtype. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    // SAFETY: same features.
    unsafe { plain::gemm_packed::<T>(k, packed, n_rows, a, n_tok, out, os) }
}

/// [`gemm_packed`] with AVX-VNNI `vpdpbusd` (same results).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_vnni<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    // SAFETY: same features.
    unsafe { vnni::gemm_packed::<T>(k, packed, n_rows, a, n_tok, out, os) }
}

const _: () = assert!(crate::kernels::packed::MAX_K / 32 <= SCRATCH);
