//! The AVX-512 VNNI "row lanes" GEMM for the GGUF layout of Q4_0 and Q5_1 (the kinds in
//! llama.cpp's order, Q4_1 / Q5_0 / Q8_0, run `ggml_order.rs`): 16 weight rows side by side.
//!
//! Per 32-value block, the 16 rows of a panel are transposed on the fly into 8 zmm registers
//! whose i32 lane r holds 4 consecutive weights of row r (unsigned: Q4 as q, Q8_0 as q+128).
//! Each token's activation dwords are then broadcast from memory into `vpdpbusd`, so one
//! instruction does 64 multiply-adds for 16 rows with no horizontal reduction, and each
//! unpacked block serves a tile of up to 16 tokens. Activation scales, `s` (Q8_1) and the
//! exact integer offset correction `-offset * sum(a)` (Q8_0 activations) are precomputed per
//! (token, block) into stack tables once per token group, shared by all panels.
//! This is llama.cpp's interleaved repacking done at multiply time instead of load time, so
//! weights stay in the GGUF layout (no repacked copy).

use std::arch::x86_64::*;

use crate::kernels::legacy_kind::*;
use crate::kernels::packed::driver::{self, PanelTile, Shape, Tile};
use crate::kernels::packed::terms::BlockTerms;

/// Entries of the per-(token, block) activation tables (stack: 3 x 16 KiB).
pub(crate) const SCRATCH: usize = 4096;
const LANES: usize = 16;
const MAX_TT: usize = 16;

/// Offset of the 16 nibble bytes in a weight block.
const fn nibble_off(t: u8) -> usize {
    match t {
        Q4_0 => 2,
        Q4_1 => 4,
        Q5_0 => 6,
        _ => 8,
    }
}

/// Small tables for decode-sized calls (zeroing 48 KiB per call would cost microseconds).
const SMALL: usize = 256;

/// Transposes dword `0..4` of 16 rows' 16-byte chunks at `p[r] + off` into 4 zmm,
/// lane r of result i = dword i of row r.
///
/// # Safety
/// The CPU must support the target features this kernel is compiled for (the dispatch table
/// installs kernels only after detecting them), and every pointer or slice must cover the
/// bytes the block layout reads from it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn transpose16x4(p: &[*const u8; LANES], off: usize) -> [__m512i; 4] {
    let ld = |r: usize| -> __m128i {
        // SAFETY: every row pointer addresses a whole block; `off + 16` stays inside it.
        unsafe { _mm_loadu_si128(p[r].add(off) as *const __m128i) }
    };
    // z[q]: 128-bit lane j holds row 4j + q.
    let z: [__m512i; 4] = std::array::from_fn(|q| {
        let v = _mm512_castsi128_si512(ld(q));
        let v = _mm512_inserti32x4(v, ld(4 + q), 1);
        let v = _mm512_inserti32x4(v, ld(8 + q), 2);
        _mm512_inserti32x4(v, ld(12 + q), 3)
    });
    let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
    let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
    let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    [
        _mm512_unpacklo_epi64(t0, t2),
        _mm512_unpackhi_epi64(t0, t2),
        _mm512_unpacklo_epi64(t1, t3),
        _mm512_unpackhi_epi64(t1, t3),
    ]
}

/// Dword at byte `off` of each of the 16 rows' current block, lane r = row r.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gather_dwords(p: &[*const u8; LANES], off: usize) -> __m512i {
    // SAFETY: the caller guarantees 4 readable bytes at `p[r] + off` for every r.
    let ld = |r: usize| unsafe { (p[r].add(off) as *const i32).read_unaligned() };
    let q = |j: usize| _mm_setr_epi32(ld(4 * j), ld(4 * j + 1), ld(4 * j + 2), ld(4 * j + 3));
    let v = _mm512_castsi128_si512(q(0));
    let v = _mm512_inserti32x4(v, q(1), 1);
    let v = _mm512_inserti32x4(v, q(2), 2);
    _mm512_inserti32x4(v, q(3), 3)
}

/// Block `b` of the panel: 8 weight registers (dword i = values 4i..4i+4), d and m per row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack<const T: u8>(p: &[*const u8; LANES]) -> ([__m512i; 8], __m512, __m512) {
    let mut w = [_mm512_setzero_si512(); 8];
    // SAFETY: (both branches) row pointers address whole blocks of valid rows (qh included).
    unsafe {
        if T == Q8_0 {
            let lo = transpose16x4(p, 2);
            let hi = transpose16x4(p, 18);
            let flip = _mm512_set1_epi8(-128);
            for i in 0..4 {
                w[i] = _mm512_xor_si512(lo[i], flip);
                w[4 + i] = _mm512_xor_si512(hi[i], flip);
            }
        } else {
            let q = transpose16x4(p, nibble_off(T));
            let m4 = _mm512_set1_epi8(0x0F);
            for i in 0..4 {
                w[i] = _mm512_and_si512(q[i], m4);
                w[4 + i] = _mm512_and_si512(_mm512_srli_epi16(q[i], 4), m4);
            }
            if T == Q5_0 || T == Q5_1 {
                // qh of each row; bits 4i..4i+4 become bit 4 of the 4 bytes of register i:
                // (x & 0xF) * 0x02040810 moves bit j to bit 8j + 4 without carries.
                let hoff = if T == Q5_0 { 2 } else { 4 };
                let qh = gather_dwords(p, hoff);
                let spread = _mm512_set1_epi32(0x0204_0810);
                let keep = _mm512_set1_epi32(0x1010_1010);
                for (i, wi) in w.iter_mut().enumerate() {
                    let nib = _mm512_and_si512(
                        _mm512_srlv_epi32(qh, _mm512_set1_epi32(4 * i as i32)),
                        _mm512_set1_epi32(0xF),
                    );
                    let bits = _mm512_and_si512(_mm512_mullo_epi32(nib, spread), keep);
                    *wi = _mm512_or_si512(*wi, bits);
                }
            }
        }
    }
    // SAFETY: each row pointer addresses a whole block; its first 4 bytes are the header.
    // (16 scalar loads + inserts measured ~20% faster than vpgatherdd at 1..4 tokens.)
    let hdr = unsafe { gather_dwords(p, 0) };
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hdr));
    let m = if has_min(T) {
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hdr, 16)))
    } else {
        _mm512_setzero_ps()
    };
    (w, d, m)
}

/// One panel (16 rows, `valid` of them real) x TT tokens over all `nb` blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn panel_tile<const T: u8, const TT: usize, const N: usize>(
    nb: usize,
    rows: &[*const u8; LANES],
    valid: usize,
    a: *const u8,
    ar: usize,
    tab: &BlockTerms<N>,
    tab0: usize,
    out: *mut f32,
    os: usize,
) {
    let bw = wdt(T).block_bytes();
    let ab = adt(T).block_bytes();
    let qoff = if has_min(T) { 4 } else { 2 };
    let mut acc = [_mm512_setzero_ps(); TT];
    for b in 0..nb {
        let p: [*const u8; LANES] = std::array::from_fn(|r| rows[r].wrapping_add(b * bw));
        // SAFETY: block b exists in every (clamped) row.
        let (w, d, m) = unsafe { unpack::<T>(&p) };
        for t in 0..TT {
            let ti = tab0 + t * nb + b;
            // SAFETY: token t's block b lies inside `a` (caller contract).
            let q = unsafe { a.add(t * ar + b * ab + qoff) } as *const i32;
            let mut sumi = if has_min(T) {
                _mm512_setzero_si512()
            } else {
                _mm512_set1_epi32(tab.start[ti])
            };
            // Two chains halve the vpdpbusd latency path (matters at few tokens).
            let mut sum2 = _mm512_setzero_si512();
            for i in (0..8).step_by(2) {
                // SAFETY: dwords i and i+1 of the 32 activation bytes.
                let (a0, a1) =
                    unsafe { (q.add(i).read_unaligned(), q.add(i + 1).read_unaligned()) };
                sumi = _mm512_dpbusd_epi32(sumi, w[i], _mm512_set1_epi32(a0));
                sum2 = _mm512_dpbusd_epi32(sum2, w[i + 1], _mm512_set1_epi32(a1));
            }
            sumi = _mm512_add_epi32(sumi, sum2);
            let scale = _mm512_mul_ps(d, _mm512_set1_ps(tab.d[ti]));
            let mut x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), scale, acc[t]);
            if has_min(T) {
                x = _mm512_fmadd_ps(m, _mm512_set1_ps(tab.s[ti]), x);
            }
            acc[t] = x;
        }
    }
    let mask: __mmask16 = if valid >= LANES {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    };
    for t in 0..TT {
        // SAFETY: the caller guarantees `valid` output cells per token row.
        unsafe { _mm512_mask_storeu_ps(out.add(t * os), mask, acc[t]) };
    }
}

/// Dispatches a token tile of `tt` (1..=16) tokens to its const instance.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel_dyn<const T: u8, const N: usize>(
    tt: usize,
    nb: usize,
    rows: &[*const u8; LANES],
    valid: usize,
    a: *const u8,
    ar: usize,
    tab: &BlockTerms<N>,
    tab0: usize,
    out: *mut f32,
    os: usize,
) {
    macro_rules! go {
        ($($n:literal)*) => {
            match tt {
                // SAFETY: this function's own contract (features detected, pointers covering
                // `nb` blocks of the rows and `tt` activation rows) is what panel_tile needs.
                $($n => unsafe { panel_tile::<T, $n, N>(nb, rows, valid, a, ar, tab, tab0, out, os) },)*
                _ => unreachable!("token tile of {tt}"),
            }
        };
    }
    // SAFETY: forwarded caller contract.
    go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// The row-lanes tile: 16 GGUF rows `wr` bytes apart (a "panel" of `16 * wr` bytes, rows
/// past the last repeating it) x up to [`MAX_TT`] tokens, with `N`-entry terms.
struct RowsTile<const T: u8, const N: usize> {
    nb: usize,
    wr: usize,
}

impl<const T: u8, const N: usize> PanelTile for RowsTile<T, N> {
    type Terms = BlockTerms<N>;
    /// One group as large as the terms hold: the rows are unpacked per tile, so the fewer
    /// passes over the weights the better.
    const TOKEN_GROUP: usize = usize::MAX;
    const TOKENS: usize = MAX_TT;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, tab: &BlockTerms<N>) {
        let rows: [*const u8; LANES] =
            std::array::from_fn(|r| t.panel.wrapping_add(r.min(t.valid - 1) * self.wr));
        // SAFETY: rows 0..valid of the "panel" exist (clamped), tokens and outputs as the
        // driver's tile contract, which is panel_tile's with TT = t.n.
        unsafe {
            panel_dyn::<T, N>(
                t.n, self.nb, &rows, t.valid, t.a, t.ar, tab, t.e0, t.out, t.os,
            )
        }
    }
}

/// Row-lanes GEMM (see module docs). Lengths must have been checked by the caller;
/// `nb <= SCRATCH` (the caller falls back to the register tile otherwise).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI + AVX2/FMA/F16C; `w` holds `n_rows` rows of `wr` bytes, `a` holds
/// `n_tok` rows of `ar` bytes, `out` holds `(n_tok - 1) * os + n_rows` floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<const T: u8>(
    nb: usize,
    w: *const u8,
    wr: usize,
    n_rows: usize,
    a: *const u8,
    ar: usize,
    n_tok: usize,
    out: *mut f32,
    os: usize,
) {
    if n_rows == 0 || n_tok == 0 {
        return;
    }
    let s = Shape {
        w,
        panel_bytes: LANES * wr,
        nb,
        n_rows,
        a,
        ar,
        n_tok,
        out,
        os,
    };
    // SAFETY: forwarded caller contract; nb <= SCRATCH.
    unsafe {
        if n_tok * nb <= SMALL {
            gemm_with::<T, SMALL>(&s, wr)
        } else {
            gemm_with::<T, SCRATCH>(&s, wr)
        }
    }
}

/// The row-lanes GEMM with `N`-entry terms.
///
/// # Safety
/// As [`gemm`], with `nb <= N`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn gemm_with<const T: u8, const N: usize>(s: &Shape, wr: usize) {
    // The weights' offset, removed exactly through `start` (Q4_1 / Q5_1 have a minimum).
    let offset: i32 = match T {
        Q4_0 => 8,
        Q5_0 => 16,
        Q8_0 => 128,
        _ => 0,
    };
    let tile = RowsTile::<T, N> { nb: s.nb, wr };
    let mut terms = BlockTerms::<N>::new(T, if has_min(T) { 0 } else { offset });
    // SAFETY: forwarded caller contract.
    unsafe { driver::run(&tile, &mut terms, s) }
}
