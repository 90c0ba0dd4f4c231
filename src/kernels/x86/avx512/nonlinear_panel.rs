//! The AVX-512 VNNI panel GEMM of IQ4_NL and MXFP4 prompt batches: the unpack and the token
//! tile of `x86/nonlinear_tiles.rs`'s loop, bit-identical to `nonlinear.rs`'s register tiles
//! and to the scalar twin (`scalar/nonlinear.rs`, the float order its docs state).
//!
//! * Unpack: per block, four 16-row gathers of a code dword (`vpgatherdd`, one per row), its
//!   low and high nibbles looked up (`vpshufb`) in the table plus 128, stored as the block's
//!   chunks `j` and `j + 4` (lane `r` = values `4j..4j+4`, `16+4j..16+4j+4` of row `r`, as
//!   unsigned bytes); one more gather for the 16 scales, stored as f32 (`2^(e - 128)` or the
//!   f16 `d`).
//! * Tile: one `vpdpbusd` per chunk and token (64 multiply-adds, 16 rows) from the token's
//!   lane start `-128 * sum(a)`, so accumulator `i`, lane `r` is lane `i` of row `r`'s sum;
//!   then `acc_i = fma(d_w * d_a, f32(sum_i), acc_i)`, and the scalar `hsum8` over the eight
//!   accumulators at the end. Two tokens per tile (16 accumulators).

use std::arch::x86_64::*;

use crate::kernels::packed::PANEL;
use crate::kernels::x86::nonlinear_tiles::{
    scales_at, table, wdt, ActTerms, NlPanel, PanelTile, MXFP4, UNPACKED_BLOCK,
};

/// The panel tile of kind `K` (IQ4_NL or MXFP4).
pub(super) struct Panel<const K: u8>;

/// The 16 row offsets `min(r, valid - 1) * wr` as gather indices.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_offsets(wr: usize, valid: usize) -> __m512i {
    let r = _mm512_min_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(valid as i32 - 1),
    );
    _mm512_mullo_epi32(r, _mm512_set1_epi32(wr as i32))
}

/// The unpack of [`NlPanel::unpack`] for kind `K`.
///
/// # Safety
/// As [`NlPanel::unpack`]; the rows' offsets fit an i32 (`wr <= PANEL_NB * 18`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack<const K: u8>(w: *const u8, wr: usize, nb: usize, valid: usize, dst: *mut u8) {
    let (bw, qoff) = (wdt(K).block_bytes(), if K == MXFP4 { 1 } else { 2 });
    let idx = row_offsets(wr, valid);
    let t = table(K);
    // SAFETY: `t` is 16 bytes; flipping the top bit of an i8 adds 128.
    let t128 = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
    let tab = _mm512_broadcast_i32x4(_mm_xor_si128(t128, _mm_set1_epi8(-128)));
    let m = _mm512_set1_epi8(0x0F);
    for b in 0..nb {
        let blk = w.wrapping_add(b * bw);
        let q = dst.wrapping_add(b * UNPACKED_BLOCK);
        for j in 0..4 {
            // SAFETY: code dword j of block b of rows min(r, valid - 1) < valid: inside the
            // rows (caller contract); the chunks j and j + 4 of block b are in the scratch.
            unsafe {
                let x = _mm512_i32gather_epi32::<1>(idx, blk.add(qoff + 4 * j).cast());
                let lo = _mm512_and_si512(x, m);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(x), m);
                _mm512_store_si512(q.add(64 * j).cast(), _mm512_shuffle_epi8(tab, lo));
                _mm512_store_si512(q.add(64 * (j + 4)).cast(), _mm512_shuffle_epi8(tab, hi));
            }
        }
        // SAFETY: the block's first 4 bytes (scale, codes) of each row; 64 bytes of scales.
        unsafe {
            let s = _mm512_i32gather_epi32::<1>(idx, blk.cast());
            let d = if K == MXFP4 {
                // e8m0_to_f32_half: 0x0020_0000 << e below 2, else (e - 1) << 23.
                let e = _mm512_and_si512(s, _mm512_set1_epi32(0xFF));
                let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
                let big = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
                let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
                _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, big, sub))
            } else {
                _mm512_cvtph_ps(_mm512_cvtepi32_epi16(s))
            };
            _mm512_store_ps(dst.add(scales_at(nb) + 64 * b).cast(), d);
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn mask(valid: usize) -> __mmask16 {
    if valid >= PANEL {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    }
}

/// TT tokens times an unpacked panel over all its blocks.
///
/// # Safety
/// As [`NlPanel::tile`] with `t.n == TT`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // indices address the register tile
unsafe fn tile<const TT: usize>(t: &PanelTile, terms: &ActTerms) {
    let nb = t.nb;
    let mut acc = [[_mm512_setzero_ps(); 8]; TT];
    for b in 0..nb {
        let q = t.panel.wrapping_add(b * UNPACKED_BLOCK);
        // SAFETY: block b's 16 f32 scales lie in the unpacked panel, 64-byte aligned.
        let dw = unsafe { _mm512_load_ps(t.panel.add(scales_at(nb) + 64 * b).cast()) };
        let mut scale = [_mm512_setzero_ps(); TT];
        let mut start = [std::ptr::null::<i32>(); TT];
        for u in 0..TT {
            let e = t.e0 + u * nb + b;
            // SAFETY: entry e of the tile's token u was written by the group's fill.
            unsafe {
                scale[u] = _mm512_mul_ps(dw, _mm512_set1_ps(terms.d(e)));
                start[u] = terms.start(e);
            }
        }
        for i in 0..8 {
            // SAFETY: chunk i of block b, 64-byte aligned in the unpacked panel.
            let w = unsafe { _mm512_load_si512(q.add(64 * i).cast()) };
            for u in 0..TT {
                // SAFETY: dword i of token u's block b quants (f16 d, then 32 quants); the
                // entry's eight lane starts.
                let (x, s0) = unsafe {
                    let p = t.a.add(u * t.ar + b * 34 + 2 + 4 * i);
                    (
                        _mm512_set1_epi32((p as *const i32).read_unaligned()),
                        _mm512_set1_epi32(*start[u].add(i)),
                    )
                };
                let p = _mm512_dpbusd_epi32(s0, w, x);
                acc[u][i] = _mm512_fmadd_ps(scale[u], _mm512_cvtepi32_ps(p), acc[u][i]);
            }
        }
    }
    for u in 0..TT {
        let c = &acc[u];
        // The scalar hsum8: ((l4 + l0) + (l6 + l2)) + ((l5 + l1) + (l7 + l3)).
        let s: [__m512; 4] = std::array::from_fn(|j| _mm512_add_ps(c[4 + j], c[j]));
        let r = _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3]));
        // SAFETY: `valid` cells of token row u (caller contract).
        unsafe { _mm512_mask_storeu_ps(t.out.add(u * t.os), mask(t.valid), r) };
    }
}

impl<const K: u8> NlPanel for Panel<K> {
    const TOKENS: usize = 2;

    #[inline(always)]
    unsafe fn unpack(&self, w: *const u8, wr: usize, nb: usize, valid: usize, dst: *mut u8) {
        // SAFETY: the caller's contract; wr = nb * 18 at most fits an i32.
        unsafe { unpack::<K>(w, wr, nb, valid, dst) }
    }

    #[inline(always)]
    unsafe fn tile(&self, t: &PanelTile, terms: &ActTerms) {
        // SAFETY: the caller's contract with TT = t.n (1 or 2).
        unsafe {
            if t.n == 2 {
                tile::<2>(t, terms)
            } else {
                tile::<1>(t, terms)
            }
        }
    }
}
