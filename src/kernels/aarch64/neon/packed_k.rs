//! NEON `sdot` panel GEMM of Q4_K x Q8_K over load-time repacked weights
//! (`packed/kquant.rs`), the twin of `scalar/packed_k.rs` (and so bit-identical to the x86
//! panel GEMMs).
//!
//! Each pair of sub-blocks (64 values) is summed exactly in i32, `isum = sum_j scale_j *
//! sum_{v in j} u_v q_v` over its 2 sub-blocks `j` of 32 values, and `m = sum_j min_j *
//! (bsum_2j + bsum_2j+1)`; then `A = fma(d_a * d, isum, A)` and `M = fma(d_a * dmin, m, M)`
//! (four steps per block, the twin's order), and the output is `A - M`.
//! Here the integers come from the panel: a 16-byte quarter `g` of quant chunk `c`
//! holds dword `c` of rows 4g..4g+4 (`qs` bytes 4c..4c+4: low nibbles are values
//! `64 (c / 8) + 4 (c % 8)..+4` of sub-block `2 (c / 8)`, high nibbles the same 32 values on, of
//! sub-block `2 (c / 8) + 1`), so `sdot` by element with the activation dword of those values
//! adds 16 products into 4 rows' i32 lanes; the rows' sub-block scales (one byte per row in
//! the scale lines) multiply the lanes exactly.
//!
//! The file holds the tiles; the loop over token groups, panels and token tiles is the shared
//! driver's (`packed/driver.rs`).

use std::arch::aarch64::*;

use super::asm::sdot_lane;
use crate::kernels::packed::driver::{self, NoTerms, PanelTile, Shape, Tile};
use crate::kernels::packed::kquant::{scale_at, QK_K};
use crate::kernels::packed::PanelLayout;
use crate::kernels::DType;

/// Bytes of a Q8_K block: f32 d, 256 i8 quants, 16 i16 group sums.
const Q8K_BYTES: usize = 292;
/// Where a Q8_K block's group sums start.
const BSUMS_AT: usize = 4 + QK_K;
/// Tokens sharing each weight load.
const TT_MAX: usize = 2;

/// Rows 4g..4g+4 of the 16-byte scale line at `line` widened to i32 lanes.
///
/// # Safety
/// 16 readable bytes at `line`; `g < 4`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn line_i32(line: *const u8, g: usize) -> int32x4_t {
    // SAFETY: bytes 4g..4g+4 of the line (caller contract).
    let x = unsafe { (line.add(4 * g) as *const u32).read_unaligned() };
    let w16 = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(x)));
    vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w16)))
}

/// Rows 4g..4g+4 of the 16 f16 at `p` as f32.
///
/// # Safety
/// 32 readable bytes at `p`; `g < 4`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16x4(p: *const u8, g: usize) -> float32x4_t {
    let v: [f32; 4] = std::array::from_fn(|i| {
        // SAFETY: f16 4g + i of the 16 at p (caller contract).
        let h = unsafe { (p.add(2 * (4 * g + i)) as *const u16).read_unaligned() };
        half::f16::from_bits(u16::from_le(h)).to_f32()
    });
    // SAFETY: `v` holds 4 f32.
    unsafe { vld1q_f32(v.as_ptr()) }
}

/// One panel x TT tokens (rows `ar` bytes apart from `a`) over all blocks.
///
/// # Safety
/// CPU with dotprod; `panel` is a whole panel of `l` (Q4_K), `a` holds TT Q8_K rows, `out`
/// `valid` cells per token row (`os` apart).
#[inline]
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const TT: usize>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let mut acc = [[vdupq_n_f32(0.0); 4]; TT];
    let mut accm = [[vdupq_n_f32(0.0); 4]; TT];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        let sc = panel.wrapping_add(l.scales_at(b));
        let y: [*const u8; TT] = std::array::from_fn(|t| a.wrapping_add(t * ar + b * Q8K_BYTES));
        // SAFETY: each token's block b (a whole Q8_K block) lies inside `a`.
        let (dy, bs): ([f32; TT], [[i32; 16]; TT]) = unsafe {
            (
                std::array::from_fn(|t| (y[t] as *const f32).read_unaligned()),
                std::array::from_fn(|t| {
                    std::array::from_fn(|i| {
                        (y[t].add(BSUMS_AT + 2 * i) as *const i16).read_unaligned() as i32
                    })
                }),
            )
        };
        for g in 0..4 {
            // SAFETY: d and dmin (16 f16 each) lie in the block's scale area.
            let (d, dmin) = unsafe {
                (
                    f16x4(sc.add(scale_at::D), g),
                    f16x4(sc.add(scale_at::DMIN), g),
                )
            };
            // SAFETY: the 8 min lines lie in the block's scale area.
            let mins: [int32x4_t; 8] =
                std::array::from_fn(|j| unsafe { line_i32(sc.add(scale_at::MIN_K4 + 16 * j), g) });
            // One float step per pair of sub-blocks (llama.cpp's repacked GEMM order).
            for j in 0..4 {
                // Activation values 64j..64j+64 of each token: 4 registers of 4 dwords.
                let x: [[int8x16_t; 4]; TT] = std::array::from_fn(|t| {
                    std::array::from_fn(|k| {
                        // SAFETY: inside each token's block (quants at 4..260).
                        unsafe { vld1q_s8(y[t].add(4 + 64 * j + 16 * k) as *const i8) }
                    })
                });
                let mut lo = [vdupq_n_s32(0); TT];
                let mut hi = [vdupq_n_s32(0); TT];
                for i in 0..8 {
                    // SAFETY: quarter g of chunk 8j + i, inside block b's quants.
                    let w = unsafe { vld1q_u8(q.add(64 * (8 * j + i) + 16 * g)) };
                    let wl = vreinterpretq_s8_u8(vandq_u8(w, vdupq_n_u8(0x0F)));
                    let wh = vreinterpretq_s8_u8(vshrq_n_u8::<4>(w));
                    for t in 0..TT {
                        lo[t] = sdot_lane(lo[t], wl, x[t][i / 4], i % 4);
                        hi[t] = sdot_lane(hi[t], wh, x[t][2 + i / 4], i % 4);
                    }
                }
                // SAFETY: the scale lines of sub-blocks 2j and 2j + 1 lie in the scale area.
                let (sl, sh) = unsafe {
                    (
                        line_i32(sc.add(scale_at::SC_K4 + 16 * (2 * j)), g),
                        line_i32(sc.add(scale_at::SC_K4 + 16 * (2 * j + 1)), g),
                    )
                };
                for t in 0..TT {
                    let isum = vmlaq_s32(vmulq_s32(lo[t], sl), hi[t], sh);
                    let mut m = vdupq_n_s32(0);
                    for sb in [2 * j, 2 * j + 1] {
                        m = vmlaq_n_s32(m, mins[sb], bs[t][2 * sb] + bs[t][2 * sb + 1]);
                    }
                    acc[t][g] = vfmaq_f32(acc[t][g], vmulq_n_f32(d, dy[t]), vcvtq_f32_s32(isum));
                    accm[t][g] = vfmaq_f32(accm[t][g], vmulq_n_f32(dmin, dy[t]), vcvtq_f32_s32(m));
                }
            }
        }
    }
    for t in 0..TT {
        let r: [float32x4_t; 4] = std::array::from_fn(|g| vsubq_f32(acc[t][g], accm[t][g]));
        // SAFETY: `valid <= 16` cells of token row t (caller contract).
        unsafe { super::packed::store(&r, out.add(t * os), valid) };
    }
}

/// The Q4_K tile: [`tile`] on 2 tokens, or 1.
struct KTile<'a>(&'a PanelLayout);

impl PanelTile for KTile<'_> {
    type Terms = NoTerms;
    const TOKENS: usize = TT_MAX;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, _: &NoTerms) {
        let (l, p, a, ar, o, os, v) = (self.0, t.panel, t.a, t.ar, t.out, t.os, t.valid);
        // SAFETY: the driver's tile contract is `tile`'s with TT = t.n (features: the
        // caller's).
        unsafe {
            if t.n >= 2 {
                tile::<2>(l, p, a, ar, o, os, v)
            } else {
                tile::<1>(l, p, a, ar, o, os, v)
            }
        }
    }
}

/// Q4_K panel GEMM with `sdot`: `out[t * os + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`; `packed` holds the 64-byte aligned panels of rows `0..n_rows`,
/// `a` Q8_K rows. Lengths are checked (panics on a caller bug).
///
/// # Safety
/// The CPU must have NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn gemm_q4_k_dotprod(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    let l = PanelLayout::new(DType::Q4_K, k).expect("Q4_K row length with a panel layout");
    let Some(s) = Shape::packed(&l, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `Shape::packed` checked the lengths; the CPU features are this function's
    // contract.
    unsafe { driver::run(&KTile(&l), &mut NoTerms, &s) }
}
