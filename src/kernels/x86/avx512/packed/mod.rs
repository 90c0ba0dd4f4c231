//! AVX-512 VNNI panel GEMMs over load-time repacked weights ([`crate::kernels::packed`]):
//! Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, bit-identical to their scalar twins in `scalar/packed.rs`.
//!
//! A panel block is 4 (Q4) or 8 (Q8_0) aligned 64-byte loads whose i32 lane r already holds
//! 4 weights of row r, so one `vpdpbusd` with a broadcast activation dword does 64
//! multiply-adds for 16 rows with no shuffles and no horizontal reduction.
//!
//! * Q4_1, Q5_0 and Q8_0 follow llama.cpp's order (see `ggml_order.rs`): eight accumulators
//!   per token (accumulator i, lane r = partial sum i of row r), so 2 tokens per register
//!   tile; Q5_0 / Q8_0's `vpdpbusd` starts from `-offset` times the token's sum of values
//!   `4i..4i+4`, made with the block's f32 scales once per (token, block) of a call's token
//!   group ([`LaneTerms`]) and broadcast from that table. Token groups of Q5_0 unpack each
//!   panel's fifth bits once for all their tiles (`packed/unpacked.rs`).
//! * Q4_0 / Q5_1 sum each block exactly in i32 (start `-offset * sum(a)`, precomputed per
//!   token and block into stack tables shared by all panels) and do one convert + fma per
//!   block, so one panel block serves a tile of up to 16 tokens.
//!
//! This file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`), which runs a group's token tiles inside a panel, so the
//! panel (≤ ~26 KiB) stays in L1.

use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::kernels::legacy_kind::*;
use crate::kernels::packed::driver::{self, GroupTerms, NoTerms, PanelTile, Shape, Tile};
use crate::kernels::packed::terms::BlockTerms;
use crate::kernels::packed::{PanelLayout, PANEL};

mod unpacked;

/// Per-(token, block) activation table entries (stack: 2 x 16 KiB).
const SCRATCH: usize = 4096;
/// Small tables for decode-sized calls (zeroing 32 KiB per call would cost a microsecond).
const SMALL: usize = 256;
/// Largest token tile of the Q4_0 / Q5_1 kernel (16 accumulators + 8 weights + temporaries).
const MAX_TT: usize = 16;
/// Token tile of the llama.cpp-order kernel (8 accumulators + 1 minimum sum per token).
const LANES_TT: usize = 2;

/// Weight register `i` (dword i = values 4i..4i+4, unsigned) of the block at `q`.
///
/// # Safety
/// CPU features as enabled; `q` is a 64-byte aligned block of the panel's quants.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn weights<const T: u8>(q: *const u8, i: usize) -> __m512i {
    // SAFETY: chunk `i` (Q8_0) or `i % 4` (Q4) lies inside the aligned block (caller contract).
    unsafe {
        if T == Q8_0 {
            _mm512_load_si512(q.add(64 * i) as *const __m512i)
        } else {
            let x = _mm512_load_si512(q.add(64 * (i % 4)) as *const __m512i);
            let x = if i >= 4 { _mm512_srli_epi16::<4>(x) } else { x };
            let x = _mm512_and_si512(x, _mm512_set1_epi8(0x0F));
            if T != Q5_0 && T != Q5_1 {
                return x;
            }
            // Bits 4i..4i+4 of each row's qh (chunk 4) become bit 4 of the lane's 4 bytes:
            // (qh >> 4i & 0xF) * 0x02040810 moves bit j to bit 8j + 4 without carries.
            let qh = _mm512_load_si512(q.add(256) as *const __m512i);
            let nib = _mm512_and_si512(
                _mm512_srlv_epi32(qh, _mm512_set1_epi32(4 * i as i32)),
                _mm512_set1_epi32(0xF),
            );
            let bits = _mm512_mullo_epi32(nib, _mm512_set1_epi32(0x0204_0810));
            _mm512_or_si512(x, _mm512_and_si512(bits, _mm512_set1_epi32(0x1010_1010)))
        }
    }
}

/// 16 f16 at `p` as f32 lanes.
///
/// # Safety
/// CPU features as enabled; 32 readable bytes at `p`, 32-byte aligned.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: caller contract.
    _mm512_cvtph_ps(unsafe { _mm256_load_si256(p as *const __m256i) })
}

/// Broadcast of the activation dword `i` of the block whose quants start at `q`.
///
/// # Safety
/// 4 readable bytes at `q + 4i`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn act(q: *const u8, i: usize) -> __m512i {
    // SAFETY: caller contract.
    _mm512_set1_epi32(unsafe { (q.add(4 * i) as *const i32).read_unaligned() })
}

#[inline(always)]
fn mask(valid: usize) -> __mmask16 {
    if valid >= PANEL {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    }
}

/// Activation terms of the llama.cpp-order kinds for the tokens of one call, `[t * nb + b]`:
/// the block's `d` and (Q8_1) `s` as f32, and (Q5_0, Q8_0) the lanes' `-offset * sum`, made
/// once per call instead of once per panel ([`LaneTerms`]).
#[derive(Clone, Copy)]
struct LaneTab {
    d: *const f32,
    s: *const f32,
    start: *const [i32; 8],
}

/// Entries of [`LaneTab`] on the stack (uninitialized until written: 80 KiB).
const LANE_TAB: usize = 2048;
/// Most tokens a call may have to use [`LaneTab`] (decode-sized batches; prefill keeps its
/// token groups of [`driver::TOKEN_GROUP`]).
const LANE_TAB_TOKENS: usize = 32;

/// The unsigned offset of kind `T`'s stored weights as `vpdpbusd`'s byte (Q8_0: 128 = 0x80).
const fn lane_offset(t: u8) -> i8 {
    match t {
        Q8_0 => -128,
        Q5_0 => 16,
        _ => 0,
    }
}

/// Q4_1 x Q8_1, Q5_0 / Q8_0 x Q8_0 in llama.cpp's order: one panel x TT tokens over all
/// blocks. With `TAB` the activation terms come from `tab` (entries of the tile's first
/// token at `tab.*[b]`, token t at `tab.*[t * nb + b]`), else from the activation rows; both
/// give the same values, so the same bits. With `U` the panel is an unpacked one of layout
/// `l` ([`unpacked::unpack`]): block b's weight register i is its chunk i.
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l`, `a` holds TT activation
/// rows `ar` bytes apart, `out` `valid` cells per token row (`os` apart); with `TAB`, `tab`'s
/// entries of the TT tokens are written.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile_lanes<const T: u8, const TT: usize, const TAB: bool, const U: bool>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
    tab: LaneTab,
) {
    let (ab, qo) = (adt(T).block_bytes(), if has_min(T) { 4 } else { 2 });
    let off = lane_offset(T);
    let mut acc = [[_mm512_setzero_ps(); 8]; TT];
    let mut summs = [_mm512_setzero_ps(); TT];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        // Both tile sizes prefetch the stream: a 2-token tile is the first (or only) to read
        // its panel in a decode step of 2 or 3 sequences. Without it (1-token tiles only),
        // SmolLM2-135M Q4_1 on Zen 4, one thread, 2026-11-27, alternating: 2 sequences 129.3 /
        // 123.8 -> 168.8 / 176.9 tok/s, 3 sequences 239-242 -> 268-278; pp512 and 16
        // sequences unchanged (their panels are in cache).
        if TT <= 2 && !U {
            crate::kernels::x86::prefetch_ahead(q, l.quant_bytes);
        }
        let sc = panel.wrapping_add(l.scales_at(b));
        // SAFETY: block b's scales (d, then Q4_1's m) lie in the panel, 32-byte aligned.
        let dw = unsafe { f16x16(sc) };
        let mut scale = [_mm512_setzero_ps(); TT];
        // Per token, lane i: -offset * (sum of activation values 4i..4i+4).
        let mut start = [[0i32; 8]; TT];
        let mut start_at = [std::ptr::null::<i32>(); TT];
        if TAB {
            for t in 0..TT {
                let e = t * l.nb + b;
                // SAFETY: entry e of the tile's tokens is written (caller contract).
                let d = unsafe { *tab.d.add(e) };
                scale[t] = _mm512_mul_ps(dw, _mm512_set1_ps(d));
                if has_min(T) {
                    // SAFETY: Q4_1's m scales sit 32 bytes after its d ones; entry e as above.
                    let (mw, sa) = unsafe { (f16x16(sc.add(32)), *tab.s.add(e)) };
                    summs[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa), summs[t]);
                }
                if off != 0 {
                    // Read per register below (broadcast loads, not lane extracts).
                    start_at[t] = tab.start.wrapping_add(e).cast::<i32>();
                }
            }
        }
        for t in 0..if TAB { 0 } else { TT } {
            let blk = a.wrapping_add(t * ar + b * ab);
            // SAFETY: token t's block b (f16 d, Q8_1's f16 s, 32 quants) is inside `a`.
            let h = unsafe { (blk as *const i32).read_unaligned() };
            let ds = _mm_cvtph_ps(_mm_cvtsi32_si128(h));
            scale[t] = _mm512_mul_ps(dw, _mm512_broadcastss_ps(ds));
            if has_min(T) {
                // SAFETY: Q4_1's m scales sit 32 bytes after its d ones.
                let mw = unsafe { f16x16(sc.add(32)) };
                let sa = _mm512_broadcastss_ps(_mm_movehdup_ps(ds));
                summs[t] = _mm512_fmadd_ps(mw, sa, summs[t]);
            }
            if off != 0 {
                // SAFETY: the block's 32 quants follow its d.
                let x = unsafe { _mm256_loadu_si256(blk.add(qo) as *const __m256i) };
                let o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(off), x);
                let neg = _mm256_sub_epi32(_mm256_setzero_si256(), o);
                // SAFETY: `start[t]` is 8 i32.
                unsafe { _mm256_storeu_si256(start[t].as_mut_ptr() as *mut __m256i, neg) };
            }
        }
        for i in 0..8 {
            // SAFETY: q is block b's aligned quants (U: 8 unpacked chunks).
            let w = unsafe {
                if U {
                    _mm512_load_si512(q.add(64 * i) as *const __m512i)
                } else {
                    weights::<T>(q, i)
                }
            };
            for t in 0..TT {
                // SAFETY: dword i of token t's block b quants.
                let x = unsafe { act(a.wrapping_add(t * ar + b * ab + qo), i) };
                let s0 = if off != 0 {
                    if TAB {
                        // SAFETY: entry e's 8 lane offsets were written (caller contract).
                        _mm512_set1_epi32(unsafe { *start_at[t].add(i) })
                    } else {
                        _mm512_set1_epi32(start[t][i])
                    }
                } else {
                    _mm512_setzero_si512()
                };
                let p = _mm512_dpbusd_epi32(s0, w, x);
                acc[t][i] = _mm512_fmadd_ps(scale[t], _mm512_cvtepi32_ps(p), acc[t][i]);
            }
        }
    }
    for t in 0..TT {
        let c = &acc[t];
        let s: [__m512; 4] = std::array::from_fn(|j| _mm512_add_ps(c[4 + j], c[j]));
        let mut r = _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3]));
        if has_min(T) {
            r = _mm512_add_ps(r, summs[t]);
        }
        // SAFETY: `valid` cells of token row t (caller contract).
        unsafe { _mm512_mask_storeu_ps(out.add(t * os), mask(valid), r) };
    }
}

/// Q4_0 x Q8_0 and Q5_1 x Q8_1: one panel x TT tokens over all blocks, activation terms from `tab`
/// (entries `tab0 + t * nb + b`).
///
/// # Safety
/// As [`tile_lanes`]; `tab` holds the entries of the TT tokens.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile_q0<const T: u8, const TT: usize, const N: usize>(
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
    let mut acc = [_mm512_setzero_ps(); TT];
    for b in 0..nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        if TT <= 2 {
            crate::kernels::x86::prefetch_ahead(q, l.quant_bytes);
        }
        // SAFETY: q is block b's aligned quants (4 or 8 chunks inside the panel).
        let w: [__m512i; 8] = std::array::from_fn(|i| unsafe { weights::<T>(q, i) });
        // SAFETY: block b's d (and m) lie in the panel, 32-byte aligned.
        let dw = unsafe { f16x16(panel.wrapping_add(l.scales_at(b))) };
        let mw = if has_min(T) {
            // SAFETY: as above.
            unsafe { f16x16(panel.wrapping_add(l.scales_at(b) + 32)) }
        } else {
            _mm512_setzero_ps()
        };
        let (ab, qo) = (adt(T).block_bytes(), if has_min(T) { 4 } else { 2 });
        for t in 0..TT {
            let ti = tab0 + t * nb + b;
            let qa = a.wrapping_add(t * ar + b * ab + qo);
            let mut s0 = _mm512_set1_epi32(tab.start[ti]);
            let sum = if TT < 8 {
                // Two chains halve the vpdpbusd latency path (matters at few tokens).
                let mut s1 = _mm512_setzero_si512();
                for i in (0..8).step_by(2) {
                    // SAFETY: dwords i and i + 1 of token t's block b quants.
                    let (x0, x1) = unsafe { (act(qa, i), act(qa, i + 1)) };
                    s0 = _mm512_dpbusd_epi32(s0, w[i], x0);
                    s1 = _mm512_dpbusd_epi32(s1, w[i + 1], x1);
                }
                _mm512_add_epi32(s0, s1)
            } else {
                // Enough tokens to hide the latency: one chain saves the add.
                for i in 0..8 {
                    // SAFETY: dword i of token t's block b quants.
                    s0 = _mm512_dpbusd_epi32(s0, w[i], unsafe { act(qa, i) });
                }
                s0
            };
            let scale = _mm512_mul_ps(dw, _mm512_set1_ps(tab.d[ti]));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[t]);
            if has_min(T) {
                acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tab.s[ti]), acc[t]);
            }
        }
    }
    for t in 0..TT {
        // SAFETY: `valid` cells of token row t (caller contract).
        unsafe { _mm512_mask_storeu_ps(out.add(t * os), mask(valid), acc[t]) };
    }
}

/// Dispatches a Q4_0 / Q5_1 token tile of `tt` (1..=16) tokens to its const instance.
///
/// # Safety
/// As [`tile_q0`] with TT = `tt`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
    macro_rules! go {
        ($($n:literal)*) => {
            match tt {
                // SAFETY: this function's contract is tile_q0's with TT = tt.
                $($n => unsafe { tile_q0::<T, $n, N>(l, panel, a, ar, tab, tab0, out, os, valid) },)*
                _ => unreachable!("token tile of {tt}"),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// The activation terms of [`LaneTab`] for up to [`LANE_TAB`] (token, block) entries,
/// uninitialized until [`GroupTerms::fill`] writes them (only the entries the kind reads: `d`
/// always, `s` with a minimum, `start` with an offset).
struct LaneTerms<const T: u8> {
    d: [MaybeUninit<f32>; LANE_TAB],
    s: [MaybeUninit<f32>; LANE_TAB],
    start: [MaybeUninit<[i32; 8]>; LANE_TAB],
}

/// Writes the [`LaneTerms`] entries `t * nb + b` of the `n` activation rows at `a`.
///
/// # Safety
/// CPU features as enabled; `n` activation rows of `nb` blocks `ar` bytes apart at `a`;
/// `n * nb <= LANE_TAB`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn fill_lanes<const T: u8>(
    terms: &mut LaneTerms<T>,
    a: *const u8,
    ar: usize,
    n: usize,
    nb: usize,
) {
    assert!(n * nb <= LANE_TAB, "lane terms of {LANE_TAB} entries");
    let (ab, qo) = (adt(T).block_bytes(), if has_min(T) { 4 } else { 2 });
    let off = lane_offset(T);
    for t in 0..n {
        for b in 0..nb {
            let (e, blk) = (t * nb + b, a.wrapping_add(t * ar + b * ab));
            // SAFETY: token t < n, block b < nb: the block (f16 d, Q8_1's f16 s, 32 quants)
            // is inside the activations (caller contract).
            let h = unsafe { (blk as *const i32).read_unaligned() };
            let ds = _mm_cvtph_ps(_mm_cvtsi32_si128(h));
            terms.d[e].write(_mm_cvtss_f32(ds));
            if has_min(T) {
                terms.s[e].write(_mm_cvtss_f32(_mm_movehdup_ps(ds)));
            }
            if off != 0 {
                // SAFETY: the block's 32 quants follow its d.
                let x = unsafe { _mm256_loadu_si256(blk.add(qo) as *const __m256i) };
                let o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(off), x);
                let neg = _mm256_sub_epi32(_mm256_setzero_si256(), o);
                let mut lanes = [0i32; 8];
                // SAFETY: `lanes` is 8 i32.
                unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, neg) };
                terms.start[e].write(lanes);
            }
        }
    }
}

impl<const T: u8> GroupTerms for LaneTerms<T> {
    #[inline(always)]
    fn capacity(&self, nb: usize) -> usize {
        LANE_TAB / nb
    }

    #[inline(always)]
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize) {
        // SAFETY: the caller's contract (the features of this module's tiles) is fill_lanes'.
        unsafe { fill_lanes::<T>(self, a, ar, n, nb) }
    }
}

/// An unwritten [`LaneTerms`].
#[inline(always)]
fn lane_terms<const T: u8>() -> LaneTerms<T> {
    LaneTerms {
        d: [MaybeUninit::uninit(); LANE_TAB],
        s: [MaybeUninit::uninit(); LANE_TAB],
        start: [MaybeUninit::uninit(); LANE_TAB],
    }
}

/// Where a [`LanesTile`] gets its activation terms: the rows ([`NoTerms`]) or a table.
trait LaneSource: GroupTerms {
    /// Whether the tile reads [`LaneSource::at`]'s table.
    const TAB: bool;
    /// The table from entry `e0` on.
    fn at(&self, e0: usize) -> LaneTab;
}

impl LaneSource for NoTerms {
    const TAB: bool = false;

    #[inline(always)]
    fn at(&self, _e0: usize) -> LaneTab {
        LaneTab {
            d: std::ptr::null(),
            s: std::ptr::null(),
            start: std::ptr::null(),
        }
    }
}

impl<const T: u8> LaneSource for LaneTerms<T> {
    const TAB: bool = true;

    #[inline(always)]
    fn at(&self, e0: usize) -> LaneTab {
        LaneTab {
            d: self.d[e0..].as_ptr().cast::<f32>(),
            s: self.s[e0..].as_ptr().cast::<f32>(),
            start: self.start[e0..].as_ptr().cast::<[i32; 8]>(),
        }
    }
}

/// The llama.cpp-order kinds' tile (Q4_1, Q5_0, Q8_0): [`tile_lanes`] on 2 tokens (sharing
/// out the next panel's prefetch), or 1, with its terms from `M`.
struct LanesTile<'a, const T: u8, M>(&'a PanelLayout, PhantomData<M>);

impl<const T: u8, M: LaneSource> PanelTile for LanesTile<'_, T, M> {
    type Terms = M;
    const TOKENS: usize = LANES_TT;

    #[inline(always)]
    fn prefetch_next(&self, n: usize) -> bool {
        n >= 2
    }

    /// # Safety
    /// [`PanelTile::tile`]'s contract.
    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, terms: &M) {
        // SAFETY: the driver's tile contract, on the GGUF-packed panel (`U = false`).
        unsafe { lanes_dyn::<T, false, M>(self.0, t, terms) }
    }
}

/// [`tile_lanes`] on tile `t` (1 or 2 tokens) of a panel of layout `l`, its terms from `M`;
/// `U`: the panel is the unpacked Q5_0 copy (`unpacked.rs`).
///
/// # Safety
/// The driver's tile contract is tile_lanes' with TT = t.n, on a panel of `l`; with a table,
/// its entries of the tile's tokens were written by the group's fill.
#[inline(always)]
unsafe fn lanes_dyn<const T: u8, const U: bool, M: LaneSource>(
    l: &PanelLayout,
    t: &Tile,
    terms: &M,
) {
    let tab = terms.at(t.e0);
    let (p, a, ar, o, os, v) = (t.panel, t.a, t.ar, t.out, t.os, t.valid);
    // SAFETY: the caller's contract.
    unsafe {
        match (t.n, M::TAB) {
            (2, true) => tile_lanes::<T, 2, true, U>(l, p, a, ar, o, os, v, tab),
            (_, true) => tile_lanes::<T, 1, true, U>(l, p, a, ar, o, os, v, tab),
            (2, false) => tile_lanes::<T, 2, false, U>(l, p, a, ar, o, os, v, tab),
            (_, false) => tile_lanes::<T, 1, false, U>(l, p, a, ar, o, os, v, tab),
        }
    }
}

/// The llama.cpp-order GEMM of a decode-sized call (2..=[`LANE_TAB_TOKENS`] tokens): the
/// tokens' activation terms ([`LaneTerms`]: f32 `d`, `s` and Q8_0 / Q5_0's lane offsets) are
/// made once, then every panel runs its token tiles from the table instead of converting
/// them again per panel (the same values, so the same bits as [`tile_lanes`] without it).
///
/// # Safety
/// As [`gemm_packed`] after its checks, with `s.n_tok * s.nb <= LANE_TAB`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm_lanes_tab<const T: u8>(l: &PanelLayout, s: &Shape) {
    let terms = lane_terms::<T>();
    // SAFETY: caller contract; one group holds the call's tokens.
    unsafe {
        if T == Q5_0 && unpacked::takes(s.n_tok, l.nb) {
            unpacked::gemm_q5(l, s, terms)
        } else {
            let mut terms = terms;
            driver::run(&LanesTile::<T, LaneTerms<T>>(l, PhantomData), &mut terms, s)
        }
    }
}

/// The block-sum kinds' tile (Q4_0, Q5_1): [`tile_q0`] on up to [`MAX_TT`] tokens (those of
/// more than 2 sharing out the next panel's prefetch), with `N`-entry terms.
struct Q0Tile<'a, const T: u8, const N: usize>(&'a PanelLayout);

impl<const T: u8, const N: usize> PanelTile for Q0Tile<'_, T, N> {
    type Terms = BlockTerms<N>;
    const TOKENS: usize = MAX_TT;

    #[inline(always)]
    fn prefetch_next(&self, n: usize) -> bool {
        n > 2
    }

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, terms: &BlockTerms<N>) {
        let l = self.0;
        // SAFETY: the driver's tile contract is tile_q0's with TT = t.n.
        unsafe {
            tile_q0_dyn::<T, N>(
                t.n, l, t.panel, t.a, t.ar, terms, t.e0, t.out, t.os, t.valid,
            )
        }
    }
}

/// Q4_0 / Q5_1 GEMM with `N`-entry activation terms.
///
/// # Safety
/// As [`driver::run`] (the CPU features of this module), `s.nb <= N`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm_q0<const T: u8, const N: usize>(l: &PanelLayout, s: &Shape) {
    invariant!(!ggml_lanes(T), "llama.cpp-order kinds run tile_lanes");
    let mut terms = BlockTerms::<N>::new(T, if T == Q5_1 { 0 } else { 8 });
    // SAFETY: caller contract.
    unsafe { driver::run(&Q0Tile::<T, N>(l), &mut terms, s) }
}

/// Panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for `r < n_rows`,
/// `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows` of kind `T`
/// (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0) and `a` rows in its activation dtype. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
    // SAFETY: `Shape::packed` checked the lengths; `PanelLayout::new` caps nb at SCRATCH; the
    // table sizes are checked where chosen; the CPU features are this function's contract.
    unsafe {
        if ggml_lanes(T) {
            if (2..=LANE_TAB_TOKENS).contains(&n_tok) && n_tok * l.nb <= LANE_TAB {
                gemm_lanes_tab::<T>(&l, &s)
            } else if T == Q5_0 && unpacked::takes(n_tok, l.nb) && l.nb <= LANE_TAB {
                // Each panel's fifth bits are rebuilt once per token group, not per tile, and
                // the group's activation terms made once, not per panel (not for decode: a
                // Gemma-3-1B decode spent 45% of its time copying panels before `takes`).
                unpacked::gemm_q5(&l, &s, lane_terms::<T>())
            } else if l.nb <= LANE_TAB {
                // Token groups keep their activations in L1 while every panel streams past;
                // their activation terms are made once per group, not per panel.
                let tile = LanesTile::<T, LaneTerms<T>>(&l, PhantomData);
                driver::run(&tile, &mut lane_terms::<T>(), &s)
            } else {
                let tile = LanesTile::<T, NoTerms>(&l, PhantomData);
                driver::run(&tile, &mut NoTerms, &s)
            }
        } else if n_tok * l.nb <= SMALL {
            gemm_q0::<T, SMALL>(&l, &s)
        } else {
            gemm_q0::<T, SCRATCH>(&l, &s)
        }
    }
}

const _: () = assert!(crate::kernels::packed::MAX_K / 32 <= SCRATCH);
