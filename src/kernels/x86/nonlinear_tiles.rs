//! What the AVX2 and AVX-512 kernels of the 4-bit non-linear kinds (IQ4_NL, MXFP4 x Q8_0,
//! IQ4_XS x Q8_K: `avx2/nonlinear.rs`, `avx512/nonlinear.rs`) share around their tiles: the
//! kind codes, the checked GEMM over GGUF rows ([`checked`], walked by
//! [`legacy_tiles::Gemm::tiles`]), the public entry points ([`nonlinear_entry_points!`]) and the
//! loop of the panel GEMM of prompt batches ([`panel_gemm`]).
//!
//! # The panel GEMM (IQ4_NL, MXFP4)
//!
//! The weights stay in the GGUF rows (a mixture's experts are views of the file's map: a step
//! reads only the experts it chose, so nothing is repacked at load). Instead, for a batch of
//! tokens each panel of [`PANEL`] rows is unpacked once per token group into a stack copy
//! ([`PanelScratch`]) where block `b`'s chunk `i` holds, in i32 lane `r`, values `4i..4i+4` of
//! row `r` already looked up in the 16-entry table (the ISA's [`NlPanel::unpack`] chooses the
//! byte form), and the row scales as f32. The group's token tiles then read that copy with
//! aligned loads and broadcast activation dwords, as the Q8_0 panel GEMM does.
//!
//! Every output keeps the float order of `scalar/nonlinear.rs` (eight lanes, lane `i` the
//! exact integer sum of values `4i..4i+4` of each block, `acc_i = fma(d_w * d_a, f32(lane_i),
//! acc_i)` block after block, then `hsum8`), so the panel GEMM equals the row kernels and the
//! scalar `vec_dot` bit for bit: which path a call takes (how many tokens share it) never shows
//! in a result.
//!
//! Everything here is `#[inline(always)]` or a macro, so it compiles into each ISA's
//! `#[target_feature]` GEMM as if written there.

use std::mem::MaybeUninit;

use super::legacy_tiles::Gemm;
use crate::kernels::blocks::nonlinear::{KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::kernels::packed::PANEL;
use crate::kernels::shape::check_gemm;
use crate::kernels::DType;

/// The kinds, as const-generic codes.
pub(crate) const IQ4_NL: u8 = 0;
pub(crate) const MXFP4: u8 = 1;
pub(crate) const IQ4_XS: u8 = 2;

/// Rows per panel of the register-tiled GEMM's walk (64 rows of 4096 IQ4_NL values: 147 KiB).
pub(crate) const ROWS_PER_PANEL: usize = 64;

/// The weight dtype of kind `k`.
pub(crate) const fn wdt(k: u8) -> DType {
    match k {
        IQ4_NL => DType::IQ4_NL,
        MXFP4 => DType::MXFP4,
        _ => DType::IQ4_XS,
    }
}

/// The activation dtype of kind `k`.
pub(crate) const fn adt(k: u8) -> DType {
    if k == IQ4_XS {
        DType::Q8_K
    } else {
        DType::Q8_0
    }
}

/// The 16-entry value table of kind `k`.
pub(crate) const fn table(k: u8) -> [i8; 16] {
    if k == MXFP4 {
        KVALUES_MXFP4
    } else {
        KVALUES_IQ4NL
    }
}

/// The checked GEMM of kind `K` over GGUF rows (panics on lengths that don't fit, as
/// `check_gemm`): `nb` counts the kind's blocks (32 values, or IQ4_XS's 256).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn checked<const K: u8>(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) -> Gemm {
    let (wr, ar) = check_gemm(
        k,
        wdt(K),
        w.len(),
        n_rows,
        adt(K),
        a.len(),
        n_tok,
        out.len(),
        os,
    );
    Gemm {
        nb: k / wdt(K).block_elems(),
        w: w.as_ptr(),
        wr,
        a: a.as_ptr(),
        ar,
        out: out.as_mut_ptr(),
        os,
    }
}

/// Blocks of the longest row the panel GEMM takes (4096 values: gpt-oss's 2880 and every
/// 32-value width up to a 4096-wide model); longer rows take the register tiles.
pub(crate) const PANEL_NB: usize = 128;
/// Bytes of one unpacked block of a panel: 8 chunks of 64 bytes (16 rows x 4 values).
pub(crate) const UNPACKED_BLOCK: usize = 512;
/// Where the f32 row scales of an unpacked panel start (16 per block, 64 bytes).
pub(crate) const fn scales_at(nb: usize) -> usize {
    nb * UNPACKED_BLOCK
}

/// The stack copy of one unpacked panel ([`NlPanel::unpack`]): 72 KiB at [`PANEL_NB`].
#[repr(C, align(64))]
pub(crate) struct PanelScratch([u8; PANEL_NB * (UNPACKED_BLOCK + 64)]);

/// Entries (token x block) of a token group's activation terms: 144 KiB on the stack.
const TERMS: usize = 4096;
/// Most tokens of a group (their activations stay in L1 while the panels pass).
const GROUP: usize = 64;

/// A token group's activation terms, entry `t * nb + b` for its token `t` and block `b`: the
/// Q8_0 scale `d` as f32 and `-128 *` the sum of each lane's four quants (where a `vpdpbusd` of
/// weights stored as `value + 128` starts, so that the offset cancels exactly).
pub(crate) struct ActTerms {
    pub d: [MaybeUninit<f32>; TERMS],
    pub start: [MaybeUninit<[i32; 8]>; TERMS],
}

impl ActTerms {
    /// Unwritten terms ([`ActTerms::fill`] writes the entries a tile reads).
    #[inline(always)]
    pub fn new() -> Self {
        ActTerms {
            d: [MaybeUninit::uninit(); TERMS],
            start: [MaybeUninit::uninit(); TERMS],
        }
    }

    /// Writes the entries of the `n` Q8_0 rows at `a` (`ar` bytes apart, `nb` blocks each).
    ///
    /// # Safety
    /// `n` readable rows of `nb` Q8_0 blocks at `a`; `n * nb <= TERMS`.
    #[inline(always)]
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize) {
        assert!(n * nb <= TERMS, "activation terms of {TERMS} entries");
        for t in 0..n {
            for b in 0..nb {
                // SAFETY: token t < n, block b < nb: a whole Q8_0 block (caller contract).
                let blk = unsafe { std::slice::from_raw_parts(a.add(t * ar + b * 34), 34) };
                let e = t * nb + b;
                self.d[e].write(half::f16::from_le_bytes([blk[0], blk[1]]).to_f32());
                let q = &blk[2..34];
                self.start[e].write(std::array::from_fn(|i| {
                    -128 * q[4 * i..4 * i + 4]
                        .iter()
                        .map(|&x| x as i8 as i32)
                        .sum::<i32>()
                }));
            }
        }
    }

    /// The scale of entry `e` (written by the group's fill).
    ///
    /// # Safety
    /// Entry `e` was written.
    #[inline(always)]
    pub unsafe fn d(&self, e: usize) -> f32 {
        // SAFETY: caller contract.
        unsafe { self.d[e].assume_init() }
    }

    /// The lane starts of entry `e`.
    ///
    /// # Safety
    /// Entry `e` was written.
    #[inline(always)]
    pub unsafe fn start(&self, e: usize) -> *const i32 {
        self.start[e].as_ptr().cast::<i32>()
    }
}

/// One token tile of the panel GEMM: `n` tokens times the `valid` rows of an unpacked panel.
#[derive(Clone, Copy)]
pub(crate) struct PanelTile {
    pub n: usize,
    /// The unpacked panel (64-byte aligned, [`PanelScratch`]) of `nb` blocks.
    pub panel: *const u8,
    pub nb: usize,
    /// The tile's first activation row; the others follow `ar` bytes apart.
    pub a: *const u8,
    pub ar: usize,
    /// The tile's first token's first entry in the group's terms.
    pub e0: usize,
    /// The first output cell of the tile's first token; token rows `os` apart.
    pub out: *mut f32,
    pub os: usize,
    /// Rows of the panel that exist (`1..=PANEL`); the others must not be stored.
    pub valid: usize,
}

/// An instruction set's part of the panel GEMM.
pub(crate) trait NlPanel {
    /// Most tokens per tile.
    const TOKENS: usize;

    /// Unpacks rows `0..valid` (`wr` bytes apart at `w`, `nb` blocks; rows `valid..PANEL`
    /// repeat the last) into `dst` (the module docs' form).
    ///
    /// # Safety
    /// `valid` (1..=PANEL) readable rows of `nb <= PANEL_NB` blocks at `w`; `dst` is a
    /// writable [`PanelScratch`]; the CPU has the tile's features.
    unsafe fn unpack(&self, w: *const u8, wr: usize, nb: usize, valid: usize, dst: *mut u8);

    /// Computes the tile's outputs.
    ///
    /// # Safety
    /// `t` as [`panel_gemm`] builds it: an unpacked panel, `t.n` activation rows whose terms
    /// entries are written, `t.valid` writable cells per token row; the CPU features.
    unsafe fn tile(&self, t: &PanelTile, terms: &ActTerms);
}

/// Whether a call of `n_tok` tokens over rows of `nb` blocks takes the panel GEMM (enough
/// tokens to share a panel's unpacking, rows short enough for the stack copy).
#[inline(always)]
pub(crate) fn takes_panels(n_tok: usize, nb: usize) -> bool {
    n_tok >= 4 && nb <= PANEL_NB
}

/// The panel GEMM of `g` (IQ4_NL or MXFP4 rows, Q8_0 activations) with tile `p`: for each
/// token group, its activation terms once; for each panel of [`PANEL`] rows, the unpacked copy
/// once; then the group's token tiles over it.
///
/// # Safety
/// `g` from [`checked`] for these `n_rows` and `n_tok`, `g.nb <= PANEL_NB`; the CPU has the
/// features of `p`'s unpack and tiles.
#[inline(always)]
pub(crate) unsafe fn panel_gemm<P: NlPanel>(p: &P, g: &Gemm, n_rows: usize, n_tok: usize) {
    let nb = g.nb;
    assert!((1..=PANEL_NB).contains(&nb), "panel gemm of {nb} blocks");
    let mut scratch = MaybeUninit::<PanelScratch>::uninit();
    let dst = scratch.as_mut_ptr().cast::<u8>();
    let mut terms = ActTerms::new();
    let group = (TERMS / nb).min(GROUP);
    for g0 in (0..n_tok).step_by(group) {
        let gn = group.min(n_tok - g0);
        // SAFETY: tokens g0..g0 + gn < n_tok are inside the checked activations; gn * nb
        // <= TERMS.
        unsafe { terms.fill(g.a.wrapping_add(g0 * g.ar), g.ar, gn, nb) };
        for r0 in (0..n_rows).step_by(PANEL) {
            let valid = PANEL.min(n_rows - r0);
            // SAFETY: rows r0..r0 + valid are inside the checked weights; `dst` is the scratch.
            unsafe { p.unpack(g.w.wrapping_add(r0 * g.wr), g.wr, nb, valid, dst) };
            let mut t0 = 0;
            while t0 < gn {
                let n = P::TOKENS.min(gn - t0);
                let tok = g0 + t0;
                let t = PanelTile {
                    n,
                    panel: dst,
                    nb,
                    a: g.a.wrapping_add(tok * g.ar),
                    ar: g.ar,
                    e0: t0 * nb,
                    out: g.out.wrapping_add(tok * g.os + r0),
                    os: g.os,
                    valid,
                };
                // SAFETY: the panel was unpacked; tokens tok..tok + n are inside the group
                // (their terms written) and the checked activations; their cells r0..r0 +
                // valid are checked output cells.
                unsafe { p.tile(&t, &terms) };
                t0 += n;
            }
        }
    }
}

/// The public `vec_dot_*` and `gemm_*` of the three kinds, calling the invoking module's
/// `vec_dot::<K>` and `gemm::<K>` with the features `$features` (`$isa` and `$cpu` name the
/// ISA and its features in the docs).
macro_rules! nonlinear_entry_points {
    ($isa:literal, $features:literal, $cpu:literal) => {
        $crate::kernels::x86::nonlinear_tiles::nonlinear_entry_points!(
            @each $isa, $features, $cpu;
            IQ4_NL: vec_dot_iq4_nl, gemm_iq4_nl;
            MXFP4: vec_dot_mxfp4, gemm_mxfp4;
            IQ4_XS: vec_dot_iq4_xs, gemm_iq4_xs;
        );
    };
    (@each $isa:literal, $features:literal, $cpu:literal; $($k:ident: $vd:ident, $gm:ident;)*) => {$(
        #[doc = concat!($isa, " twin of the scalar `vec_dot` of the same name (bit-identical).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ". Lengths are checked (panics).")]
        #[target_feature(enable = $features)]
        pub unsafe fn $vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: same target features as the caller.
            unsafe { vec_dot::<{ $crate::kernels::x86::nonlinear_tiles::$k }>(n, w, a) }
        }

        #[doc = concat!($isa, " twin of the scalar `gemm` of the same name (bit-identical).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ". Lengths are checked (panics).")]
        #[target_feature(enable = $features)]
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], os: usize) {
            // SAFETY: same target features as the caller.
            unsafe { gemm::<{ $crate::kernels::x86::nonlinear_tiles::$k }>(k, w, n_rows, a, n_tok, out, os) }
        }
    )*};
}
pub(crate) use nonlinear_entry_points;

/// Tiles ahead of the one computing whose rows [`prefetch_ahead`] starts fetching.
pub(crate) const PREFETCH_TILES: usize = 1;

/// Starts fetching towards L2 bytes `from..from + len` of each of the `RM` rows that follow a
/// tile's `RM` rows at `w` ([`PREFETCH_TILES`] tiles on, rows `wr` bytes apart): a one- or
/// few-token tile calls it for each chunk of blocks it is about to read, so the next tile's
/// lines are in flight while this one computes. A row tile reads `RM` short rows at once (a
/// gpt-oss expert row is 24 lines), too many short streams for the hardware prefetchers to
/// keep memory busy on their own; the loads of each chunk then waited on memory latency.
/// Rows past the matrix's end are only hinted (a prefetch never faults); no bits change.
#[inline(always)]
pub(crate) fn prefetch_ahead<const RM: usize>(w: *const u8, wr: usize, from: usize, len: usize) {
    for r in 0..RM {
        let p = w.wrapping_add((r + RM * PREFETCH_TILES) * wr + from);
        crate::kernels::prefetch::lines_to_l2(p, len);
    }
}
