//! The AVX-512 Q5_0 GEMM of token groups over unpacked panels: each Q5_0 panel's fifth bits
//! are rebuilt once per token group ([`unpack`]: one byte per weight, the register
//! `packed::weights::<Q5_0>` builds) into a stack scratch, and every token tile of the group
//! reads the unpacked copy. The tiles are `packed.rs`'s llama.cpp-order ones on the same
//! weight registers, so the outputs are the same bits; rebuilding the bits per 2-token tile
//! cost more than the multiply-adds (~140 instructions per 1,024 MACs).
//!
//! gemma-3-270m Q4_K_M (its attn_q/attn_k/ffn_gate/ffn_up are Q5_0), one thread, Zen 4,
//! 2026-11-27, alternating: pp512 442-454 -> 501-534 tok/s; 16 sequences 227-238 -> 253-256.

use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::kernels::legacy_kind::*;
use crate::kernels::packed::driver::{self, GroupTerms, PanelTile, Shape, Tile};
use crate::kernels::packed::{Line, PanelLayout};

use super::{lanes_dyn, weights, LaneSource};

/// Longest Q5_0 row (in blocks) whose panels a token group unpacks once ([`unpack`]) into
/// its stack scratch (128 blocks, k = 4096: 68 KiB); longer rows rebuild the fifth bits per
/// tile.
const BLOCKS: usize = 128;
/// Quant bytes of an unpacked Q5_0 block: chunk i holds weight register i.
const UNPACKED_QB: usize = 512;
/// Tokens per tile on an unpacked panel (3 ran slower: 24 accumulators spill).
const UNPACKED_TT: usize = 2;
/// Fewest tokens of a call whose Q5_0 panels are unpacked first (3 tiles share an unpack).
const MIN_TOKENS: usize = 5;

/// Whether a Q5_0 call of `n_tok` tokens over `nb`-block rows runs [`gemm_q5`]: enough tokens
/// to share each unpack (a decode token reads each panel once, so a copy would only add a
/// store and a reload per weight register and lose the 1-token tile's stream prefetch) and
/// rows that fit the scratch.
pub(super) fn takes(n_tok: usize, nb: usize) -> bool {
    n_tok >= MIN_TOKENS && nb <= BLOCKS
}

/// The layout of a Q5_0 panel of `l` unpacked by [`unpack`]: `nb` blocks of
/// [`UNPACKED_QB`] quant bytes, then the panel's `nb x 32` scale bytes.
fn unpacked_layout(l: &PanelLayout) -> PanelLayout {
    PanelLayout {
        quant_bytes: UNPACKED_QB,
        panel_bytes: l.nb * (UNPACKED_QB + l.scale_bytes),
        ..*l
    }
}

/// Unpacks the Q5_0 panel at `panel` (layout `l`) to `dst` in [`unpacked_layout`]: chunk i
/// of block b is [`weights`]`::<Q5_0>` of the block, byte = the stored 5-bit value (0..=31,
/// `vpdpbusd`'s unsigned operand), so tiles reading it compute the same sums.
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned Q5_0 panel of `l`; `dst` is 64-byte
/// aligned with `unpacked_layout(l).panel_bytes` writable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack(l: &PanelLayout, panel: *const u8, dst: *mut u8) {
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        for i in 0..8 {
            // SAFETY: q is block b's aligned quants; chunk i of block b lies inside `dst`,
            // 64-byte aligned (caller contract).
            unsafe {
                let w = weights::<Q5_0>(q, i);
                _mm512_store_si512(dst.add(b * UNPACKED_QB + 64 * i) as *mut __m512i, w);
            }
        }
    }
    // SAFETY: the panel's nb x 32 scale bytes follow its quants; dst has room after its own.
    unsafe {
        std::ptr::copy_nonoverlapping(
            panel.add(l.scales_at(0)),
            dst.add(l.nb * UNPACKED_QB),
            l.nb * l.scale_bytes,
        )
    }
}

/// A token group's activation terms `M` and the scratch its Q5_0 panels are unpacked into.
struct Unpacked<M> {
    terms: M,
    buf: [MaybeUninit<Line>; BLOCKS * (UNPACKED_QB + 32) / 64],
}

impl<M: GroupTerms> GroupTerms for Unpacked<M> {
    #[inline(always)]
    fn capacity(&self, nb: usize) -> usize {
        self.terms.capacity(nb)
    }

    #[inline(always)]
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize) {
        // SAFETY: the caller's contract is M's.
        unsafe { self.terms.fill(a, ar, n, nb) }
    }
}

/// The Q5_0 tile of token groups: each panel unpacked once ([`unpack`]), then `tile_lanes`
/// on up to [`UNPACKED_TT`] tokens reads the unpacked copy (the same weight registers, so
/// the same bits as `packed.rs`'s `LanesTile`).
struct Q5Tile<'a, M> {
    l: &'a PanelLayout,
    u: PanelLayout,
    m: PhantomData<M>,
}

impl<M: LaneSource> PanelTile for Q5Tile<'_, M> {
    type Terms = Unpacked<M>;
    const TOKENS: usize = UNPACKED_TT;

    #[inline(always)]
    fn prefetch_next(&self, n: usize) -> bool {
        n >= 2
    }

    /// # Safety
    /// [`PanelTile::prepare`]'s contract; `self.l.nb <= BLOCKS`.
    #[inline(always)]
    unsafe fn prepare(&self, panel: *const u8, terms: &mut Unpacked<M>) -> *const u8 {
        invariant!(self.l.nb <= BLOCKS);
        let dst = terms.buf.as_mut_ptr().cast::<u8>();
        // SAFETY: the buffer is 64-byte aligned (Line) and holds BLOCKS >= nb blocks.
        unsafe { unpack(self.l, panel, dst) };
        dst
    }

    /// # Safety
    /// [`PanelTile::tile`]'s contract, `t.panel` being [`Q5Tile::prepare`]'s copy.
    #[inline(always)]
    unsafe fn tile(&self, t: &Tile, terms: &Unpacked<M>) {
        // SAFETY: as LanesTile's, on the unpacked panel of layout `u`.
        unsafe { lanes_dyn::<Q5_0, true, M>(&self.u, t, &terms.terms) }
    }
}

/// The Q5_0 GEMM over panels unpacked once per token group ([`Q5Tile`]), activation terms
/// from `terms`.
///
/// # Safety
/// As [`driver::run`] (the CPU features of this module); `l` is a Q5_0 layout with
/// `l.nb <= BLOCKS`; `terms` are `M`'s for Q5_0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn gemm_q5<M: LaneSource>(l: &PanelLayout, s: &Shape, terms: M) {
    let tile = Q5Tile::<M> {
        l,
        u: unpacked_layout(l),
        m: PhantomData,
    };
    let mut terms = Unpacked {
        terms,
        buf: [MaybeUninit::uninit(); BLOCKS * (UNPACKED_QB + 32) / 64],
    };
    // SAFETY: caller contract.
    unsafe { driver::run(&tile, &mut terms, s) }
}
