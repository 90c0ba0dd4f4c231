//! NEON panel GEMMs over load-time repacked weights ([`crate::kernels::packed`]): Q4_0 and
//! Q8_0 x Q8_0, Q4_1 x Q8_1, bit-identical to their scalar twins in `scalar/packed.rs`.
//! Q4_1 and Q8_0 follow llama.cpp's order (eight partial sums per output, see `tile_lanes`);
//! Q4_0 sums each (row, token, block) exactly in i32, on signed weights (nibbles minus 8), which
//! equals the twin's `-8 * sum(a) + sum(u * a)`; then one convert and
//! `acc = fma(f32(sum), d_w * d_a, acc)` per block, in block order, as the twin does.
//!
//! * `dotprod`: a 16-byte quarter of a panel chunk holds 4 rows' dword `c` (values 4c..4c+4),
//!   so `sdot` by element with activation dword `c` adds 16 products into 4 rows' lanes; a
//!   token tile of up to [`DOT_TT`] tokens shares each weight load.
//! * `i8mm`: zipping the dwords of chunks `c` and `c + 1` gives 2 rows x 8 values, which
//!   `smmla` multiplies with 2 tokens x the same 8 activation values into a 2x2 tile; pairs of
//!   tokens go this way (two pairs per weight load), an odd last token through `sdot` (Q4_0
//!   only: `smmla` merges two of the eight partial sums of the llama.cpp-order kinds).
//!
//! The loop over token groups, panels and token tiles is the shared driver's
//! ([`crate::kernels::packed::driver`]).

use std::arch::aarch64::*;

use super::asm::{f16x8_to_f32, sdot_lane, smmla};
use crate::kernels::legacy_kind::*;
use crate::kernels::packed::driver::{self, NoTerms, PanelTile, Shape, Tile};
use crate::kernels::packed::{PanelLayout, PANEL};

/// Largest token tile of the `sdot` kernel (4 x 4 i32 sums + 8 activation registers + 4
/// weight registers fit the 32 vector registers).
const DOT_TT: usize = 4;
/// Token pairs per `smmla` tile (2 x 8 i32 sums + 8 weight + 2 activation registers).
const MM_PAIRS: usize = 2;
/// Bytes of one Q8_0 activation block (f16 d + 32 quants).
const ABLK: usize = 34;

/// Weights of "chunk" `c` (0..8, values 4c..4c+4 of every row) of the block whose quants
/// start at `q`, as signed bytes (Q4_0 minus 8, Q8_0 flipped back; Q4_1 as stored): register
/// `g` holds rows 4g..4g+4, one dword each.
///
/// # Safety
/// `q` is a whole block of the panel's quants (256 bytes for Q4_0, 512 for Q8_0).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn chunk<const T: u8>(q: *const u8, c: usize) -> [int8x16_t; 4] {
    // Q8_0: chunk c is stored chunk c; Q4_0: low (c < 4) or high nibbles of stored chunk c % 4.
    let at = if T == Q8_0 { 64 * c } else { 64 * (c % 4) };
    std::array::from_fn(|g| {
        // SAFETY: 16 bytes of the stored chunk, inside the block (caller contract).
        let x = unsafe { vld1q_u8(q.add(at + 16 * g)) };
        if T == Q8_0 {
            vreinterpretq_s8_u8(veorq_u8(x, vdupq_n_u8(0x80)))
        } else {
            let u = if c < 4 {
                vandq_u8(x, vdupq_n_u8(0x0F))
            } else {
                vshrq_n_u8::<4>(x)
            };
            let u = vreinterpretq_s8_u8(u);
            // Q4_0 is centred on 8; Q4_1's minimum is added apart (`tile_q4_1`).
            if T == Q4_0 {
                vsubq_s8(u, vdupq_n_s8(8))
            } else {
                u
            }
        }
    })
}

/// Block `b`'s 16 weight scales `d_w` as f32 (rows 4g..4g+4 in register g).
///
/// # Safety
/// `panel` is a whole panel of `l`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn weight_scales(l: &PanelLayout, panel: *const u8, b: usize) -> [float32x4_t; 4] {
    let s = panel.wrapping_add(l.scales_at(b)) as *const u16;
    // SAFETY: block b's 16 f16 scales (32 bytes) lie inside the panel.
    let (h0, h1) = unsafe { (vld1q_u16(s), vld1q_u16(s.add(8))) };
    let (a, b) = f16x8_to_f32(h0);
    let (c, d) = f16x8_to_f32(h1);
    [a, b, c, d]
}

/// The activation scale `d_a` of the Q8_0 block at `blk`.
///
/// # Safety
/// 2 readable bytes at `blk`.
#[inline(always)]
unsafe fn act_scale(blk: *const u8) -> f32 {
    // SAFETY: caller contract.
    half::f16::from_bits(u16::from_le(unsafe {
        (blk as *const u16).read_unaligned()
    }))
    .to_f32()
}

/// Adds one block's exact sums `s` (rows 4g..4g+4 of one token in register g) to `acc`:
/// `acc = fma(f32(s), d_w * d_a, acc)`, the twin's rounding.
#[inline]
#[target_feature(enable = "neon")]
fn accumulate(acc: &mut [float32x4_t; 4], s: &[int32x4_t; 4], dw: &[float32x4_t; 4], da: f32) {
    for g in 0..4 {
        acc[g] = vfmaq_f32(acc[g], vcvtq_f32_s32(s[g]), vmulq_n_f32(dw[g], da));
    }
}

/// Stores one token's 16 outputs, of which the first `valid` are rows that exist.
///
/// # Safety
/// `valid` (1..=16) writable f32 at `out`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn store(acc: &[float32x4_t; 4], out: *mut f32, valid: usize) {
    let mut tmp = [0f32; PANEL];
    for (g, &v) in acc.iter().enumerate() {
        // SAFETY: 4 f32 of the 16-entry stack array.
        unsafe { vst1q_f32(tmp.as_mut_ptr().add(4 * g), v) };
    }
    // SAFETY: `valid <= 16` cells at `out` (caller contract); `tmp` is a distinct stack array.
    unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), out, valid) };
}

/// `sdot` kernel: one panel x TT tokens (rows `ar` bytes apart from `a`) over all blocks.
///
/// # Safety
/// CPU with dotprod; `panel` is a whole panel of `l`, `a` holds TT activation rows, `out`
/// `valid` cells per token row (`os` apart).
#[inline]
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile_dot<const T: u8, const TT: usize>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let mut acc = [[vdupq_n_f32(0.0); 4]; TT];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        let blk: [*const u8; TT] = std::array::from_fn(|t| a.wrapping_add(t * ar + b * ABLK));
        // SAFETY: each token's block b quants (32 bytes after the f16 d) lie inside `a`.
        let x: [[int8x16_t; 2]; TT] = std::array::from_fn(|t| unsafe {
            [
                vld1q_s8(blk[t].add(2) as *const i8),
                vld1q_s8(blk[t].add(18) as *const i8),
            ]
        });
        let mut s = [[vdupq_n_s32(0); 4]; TT];
        for c in 0..8 {
            // SAFETY: q is block b's quants inside the panel.
            let w = unsafe { chunk::<T>(q, c) };
            for t in 0..TT {
                for g in 0..4 {
                    s[t][g] = sdot_lane(s[t][g], w[g], x[t][c / 4], c % 4);
                }
            }
        }
        // SAFETY: panel is whole; each token's block b starts with its f16 d.
        let dw = unsafe { weight_scales(l, panel, b) };
        for t in 0..TT {
            // SAFETY: as above.
            accumulate(&mut acc[t], &s[t], &dw, unsafe { act_scale(blk[t]) });
        }
    }
    for t in 0..TT {
        // SAFETY: `valid` cells of token row t (caller contract).
        unsafe { store(&acc[t], out.add(t * os), valid) };
    }
}

/// Dispatches an `sdot` tile of `tt` (1..=[`DOT_TT`]) tokens to its const instance.
///
/// # Safety
/// As [`tile_dot`] with TT = `tt`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_dot_dyn<const T: u8>(
    tt: usize,
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    // SAFETY: this function's contract is tile_dot's with TT = tt.
    unsafe {
        match tt {
            1 => tile_dot::<T, 1>(l, panel, a, ar, out, os, valid),
            2 => tile_dot::<T, 2>(l, panel, a, ar, out, os, valid),
            3 => tile_dot::<T, 3>(l, panel, a, ar, out, os, valid),
            4 => tile_dot::<T, 4>(l, panel, a, ar, out, os, valid),
            _ => unreachable!("sdot token tile of {tt}"),
        }
    }
}

/// `smmla` kernel: one panel x P token pairs (2P tokens, rows `ar` bytes apart) over all
/// blocks.
///
/// # Safety
/// CPU with i8mm; otherwise as [`tile_dot`] with 2P tokens.
#[inline]
#[target_feature(enable = "neon,i8mm")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile_mm<const T: u8, const P: usize>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let mut acc = [[[vdupq_n_f32(0.0); 4]; 2]; P];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        let blk = |t: usize| a.wrapping_add(t * ar + b * ABLK);
        // s[p][2g + h], lanes (row 4g+2h, token 2p), (4g+2h, 2p+1), (4g+2h+1, 2p), (4g+2h+1, 2p+1).
        let mut s = [[vdupq_n_s32(0); 8]; P];
        for cp in 0..4 {
            // SAFETY: q is block b's quants inside the panel.
            let (w0, w1) = unsafe { (chunk::<T>(q, 2 * cp), chunk::<T>(q, 2 * cp + 1)) };
            // Rows 4g+2h and 4g+2h+1, values 8cp..8cp+8 each.
            let m: [int8x16_t; 8] = std::array::from_fn(|i| {
                let (u, v) = (
                    vreinterpretq_s32_s8(w0[i / 2]),
                    vreinterpretq_s32_s8(w1[i / 2]),
                );
                vreinterpretq_s8_s32(if i % 2 == 0 {
                    vzip1q_s32(u, v)
                } else {
                    vzip2q_s32(u, v)
                })
            });
            for p in 0..P {
                // SAFETY: quants 8cp..8cp+8 of tokens 2p and 2p+1's block b lie inside `a`.
                let x = unsafe {
                    vcombine_s8(
                        vld1_s8(blk(2 * p).add(2 + 8 * cp) as *const i8),
                        vld1_s8(blk(2 * p + 1).add(2 + 8 * cp) as *const i8),
                    )
                };
                for i in 0..8 {
                    s[p][i] = smmla(s[p][i], m[i], x);
                }
            }
        }
        // SAFETY: panel is whole; each token's block b starts with its f16 d.
        let dw = unsafe { weight_scales(l, panel, b) };
        for p in 0..P {
            for h in 0..2 {
                // Token 2p + h, rows 4g..4g+4: the even (h = 0) or odd lanes of s[2g], s[2g+1].
                let st: [int32x4_t; 4] = std::array::from_fn(|g| {
                    let (u, v) = (s[p][2 * g], s[p][2 * g + 1]);
                    if h == 0 {
                        vuzp1q_s32(u, v)
                    } else {
                        vuzp2q_s32(u, v)
                    }
                });
                // SAFETY: as above.
                accumulate(&mut acc[p][h], &st, &dw, unsafe {
                    act_scale(blk(2 * p + h))
                });
            }
        }
    }
    for p in 0..P {
        for h in 0..2 {
            // SAFETY: `valid` cells of token row 2p + h (caller contract).
            unsafe { store(&acc[p][h], out.add((2 * p + h) * os), valid) };
        }
    }
}

/// Q4_1 x Q8_1 and Q8_0 x Q8_0 in llama.cpp's order (the twin's): one panel x one token over
/// all blocks, eight f32 accumulators per row (accumulator `c` = values 4c..4c+4 of each block,
/// one `sdot` each, exact on the signed weights), Q4_1's minimum terms apart, then the twin's
/// horizontal sum. (`smmla` would merge two of the eight partial sums, so these kinds have no
/// i8mm form.)
///
/// # Safety
/// CPU with dotprod; `panel` is a whole panel of `l`, `a` one activation row (Q8_1 for Q4_1,
/// Q8_0 for Q8_0), `out` `valid` cells.
#[inline]
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::needless_range_loop)]
unsafe fn tile_lanes<const T: u8>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    out: *mut f32,
    valid: usize,
) {
    let (ab, qa) = if has_min(T) { (36, 4) } else { (ABLK, 2) };
    let mut acc = [[vdupq_n_f32(0.0); 4]; 8];
    let mut summs = [vdupq_n_f32(0.0); 4];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        let blk = a.wrapping_add(b * ab);
        // SAFETY: the token's block b: f16 d, (Q8_1's f16 s,) 32 quants, inside `a`.
        let (x, da) = unsafe {
            (
                [
                    vld1q_s8(blk.add(qa) as *const i8),
                    vld1q_s8(blk.add(qa + 16) as *const i8),
                ],
                act_scale(blk),
            )
        };
        // SAFETY: panel is whole: block b's d scales.
        let dw = unsafe { weight_scales(l, panel, b) };
        for c in 0..8 {
            // SAFETY: q is block b's quants inside the panel.
            let w = unsafe { chunk::<T>(q, c) };
            for g in 0..4 {
                let p = sdot_lane(vdupq_n_s32(0), w[g], x[c / 4], c % 4);
                acc[c][g] = vfmaq_f32(acc[c][g], vcvtq_f32_s32(p), vmulq_n_f32(dw[g], da));
            }
        }
        if has_min(T) {
            // SAFETY: Q4_1's m scales sit 32 bytes after its d ones; s follows d in `blk`.
            let (mw, sa) = unsafe { (weight_scales(l, panel.add(32), b), act_scale(blk.add(2))) };
            for g in 0..4 {
                summs[g] = vfmaq_n_f32(summs[g], mw[g], sa);
            }
        }
    }
    let r: [float32x4_t; 4] = std::array::from_fn(|g| {
        let s: [float32x4_t; 4] = std::array::from_fn(|j| vaddq_f32(acc[4 + j][g], acc[j][g]));
        let h = vaddq_f32(vaddq_f32(s[0], s[2]), vaddq_f32(s[1], s[3]));
        if has_min(T) {
            vaddq_f32(h, summs[g])
        } else {
            h
        }
    });
    // SAFETY: `valid` cells at `out` (caller contract).
    unsafe { store(&r, out, valid) };
}

/// The llama.cpp-order kinds' tile (Q4_1, Q8_0): [`tile_lanes`], one panel x one token.
struct LanesTile<'a, const T: u8>(&'a PanelLayout);

impl<const T: u8> PanelTile for LanesTile<'_, T> {
    type Terms = NoTerms;
    const TOKENS: usize = 1;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, _: &NoTerms) {
        // SAFETY: the driver's tile contract is tile_lanes' (features: the caller's).
        unsafe { tile_lanes::<T>(self.0, t.panel, t.a, t.out, t.valid) }
    }
}

/// The `sdot` tile of Q4_0: [`tile_dot`] on up to [`DOT_TT`] tokens.
struct DotTile<'a, const T: u8>(&'a PanelLayout);

impl<const T: u8> PanelTile for DotTile<'_, T> {
    type Terms = NoTerms;
    const TOKENS: usize = DOT_TT;

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, _: &NoTerms) {
        let (l, n) = (self.0, t.n);
        // SAFETY: the driver's tile contract is tile_dot's with TT = t.n.
        unsafe { tile_dot_dyn::<T>(n, l, t.panel, t.a, t.ar, t.out, t.os, t.valid) }
    }
}

/// The `smmla` tile: [`MM_PAIRS`] token pairs, one pair, or an odd last token through
/// [`tile_dot`].
struct MmTile<'a, const T: u8>(&'a PanelLayout);

impl<const T: u8> PanelTile for MmTile<'_, T> {
    type Terms = NoTerms;
    const TOKENS: usize = 2 * MM_PAIRS;

    #[inline(always)]
    fn tokens(&self, left: usize) -> usize {
        if left >= 2 * MM_PAIRS {
            2 * MM_PAIRS
        } else if left >= 2 {
            2
        } else {
            1
        }
    }

    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, _: &NoTerms) {
        let (l, p, a, ar, o, os, v) = (self.0, t.panel, t.a, t.ar, t.out, t.os, t.valid);
        // SAFETY: the driver's tile contract is tile_mm's with 2P = t.n tokens (tile_dot's
        // for one); the CPU features are the caller's.
        unsafe {
            match t.n {
                1 => tile_dot::<T, 1>(l, p, a, ar, o, os, v),
                2 => tile_mm::<T, 1>(l, p, a, ar, o, os, v),
                _ => tile_mm::<T, MM_PAIRS>(l, p, a, ar, o, os, v),
            }
        }
    }
}

/// The checked call shared by both variants: its shape, or `None` when there is nothing to
/// compute.
fn prepare<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) -> Option<(PanelLayout, Shape)> {
    assert!(
        T == Q4_0 || T == Q4_1 || T == Q8_0,
        "NEON panel GEMMs: Q4_0, Q4_1 and Q8_0 only"
    );
    let l = PanelLayout::new(wdt(T), k).expect("dtype with a panel layout");
    let s = Shape::packed(&l, packed, n_rows, a, n_tok, out, os)?;
    Some((l, s))
}

/// Panel GEMM with `sdot`: `out[t * os + r] = dot(row r, activation row t)` for `r < n_rows`,
/// `t < n_tok`; `packed` holds the 64-byte aligned panels of rows `0..n_rows` of kind `T`
/// (Q4_0, Q4_1 or Q8_0), `a` activation rows (Q8_1 for Q4_1, else Q8_0). Lengths are checked
/// (panics).
///
/// # Safety
/// The CPU must support NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn gemm_dotprod<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    let Some((l, s)) = prepare::<T>(k, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `prepare` checked the lengths; the CPU features are this function's contract.
    unsafe {
        if ggml_lanes(T) {
            driver::run(&LanesTile::<T>(&l), &mut NoTerms, &s)
        } else {
            driver::run(&DotTile::<T>(&l), &mut NoTerms, &s)
        }
    }
}

/// Panel GEMM with `smmla` for token pairs (and `sdot` for an odd last token; Q4_1 and Q8_0
/// are all [`gemm_dotprod`]); the contract of [`gemm_dotprod`], with the same results bit for bit.
///
/// # Safety
/// The CPU must support NEON, dotprod and i8mm.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) unsafe fn gemm_i8mm<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: crate::kernels::cells::OutCells<'_>,
    os: usize,
) {
    if ggml_lanes(T) {
        // SAFETY: dotprod is part of this function's contract.
        return unsafe { gemm_dotprod::<T>(k, packed, n_rows, a, n_tok, out, os) };
    }
    let Some((l, s)) = prepare::<T>(k, packed, n_rows, a, n_tok, out, os) else {
        return;
    };
    // SAFETY: `prepare` checked the lengths; the CPU features are this function's contract.
    unsafe { driver::run(&MmTile::<T>(&l), &mut NoTerms, &s) }
}
