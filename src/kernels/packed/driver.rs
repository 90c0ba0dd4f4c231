//! The loop every panel GEMM shares: token groups, panels, row slices, token tiles.
//!
//! A panel GEMM computes `out[t * os + r] = dot(row r, activation row t)`. What differs
//! between instruction sets is only the innermost tile (one panel, or a slice of it, times a
//! few tokens over all blocks) and the per-(token, block) activation terms some tiles read from
//! a table. [`run`] owns the rest, in this order:
//!
//! ```text
//! for each token group (at most PanelTile::TOKEN_GROUP tokens, and what the terms hold):
//!     fill the group's activation terms (once, shared by every panel)
//!     for each panel of PANEL rows:
//!         let the tile prepare the panel (PanelTile::prepare: itself, or an unpacked copy)
//!         for each slice of PanelTile::ROWS rows that exists:
//!             for each token tile i of the group (PanelTile::tokens of the tokens left):
//!                 if the tile wants it: prefetch share i of the next panel
//!                 PanelTile::tile
//! ```
//!
//! A group's activations stay in L1 while every panel streams past, and a panel (or the
//! slice) stays in L1 while the group's token tiles reuse it. The order does not change any
//! output's arithmetic (each output is one tile's), so every ISA stays bit-identical to its
//! scalar twin whatever the tiling.
//!
//! [`run`] is `#[inline(always)]` and so are the tiles' trait methods: they are inlined into
//! the ISA's `#[target_feature]` entry point, so the loop and the `#[target_feature]` kernels
//! it calls are compiled with that entry point's features (a generic function cannot carry
//! `#[target_feature]` itself), one monomorphized copy per tile: the loop costs what the
//! hand-written copies it replaced did.

use super::{PanelLayout, PANEL};

/// Tokens whose activations stay in L1 while a call's panels stream past (prefill).
pub const TOKEN_GROUP: usize = 64;

/// Per-(token, block) activation terms of one token group, computed once per group and read
/// by every panel's tiles: entry `t * nb + b` for the group's token `t`, block `b`.
pub(crate) trait GroupTerms {
    /// Most tokens of `nb` blocks one fill holds (at least 1 for any valid `nb`).
    fn capacity(&self, nb: usize) -> usize;

    /// Fills the entries of the `n` activation rows at `a` (`ar` bytes apart, `nb` blocks
    /// each).
    ///
    /// # Safety
    /// `a` points to `n` readable rows of `ar` bytes; `n <= self.capacity(nb)`; the CPU has
    /// the features of the tile the terms belong to.
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize);
}

/// No table: the tile reads everything it needs from the activation rows.
pub(crate) struct NoTerms;

impl GroupTerms for NoTerms {
    #[inline(always)]
    fn capacity(&self, _nb: usize) -> usize {
        usize::MAX
    }

    #[inline(always)]
    unsafe fn fill(&mut self, _a: *const u8, _ar: usize, _n: usize, _nb: usize) {}
}

/// One tile call: `n` tokens times the `valid` rows of slice `sub` of a panel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tile {
    /// Tokens of the tile (what [`PanelTile::tokens`] chose).
    pub n: usize,
    /// The whole panel (64-byte aligned), as [`PanelTile::prepare`] returned it.
    pub panel: *const u8,
    /// Slice of the panel: rows `sub * ROWS..(sub + 1) * ROWS`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only AVX2 tiles slice panels
    pub sub: usize,
    /// The tile's first activation row; the others follow `ar` bytes apart.
    pub a: *const u8,
    pub ar: usize,
    /// The tile's first token's first entry in the group's terms (`t0 * nb`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // NEON's tiles have no terms
    pub e0: usize,
    /// The first output cell of the slice for the tile's first token; token rows `os` apart.
    pub out: *mut f32,
    pub os: usize,
    /// Rows of the slice that exist (`1..=ROWS`); the others must not be stored.
    pub valid: usize,
}

/// An instruction set's tile: the part of a panel GEMM that is not the loop.
pub(crate) trait PanelTile {
    /// The activation terms the tile reads.
    type Terms: GroupTerms;
    /// Rows one tile covers: [`PANEL`] or a divisor of it (AVX2's ymm half panel).
    const ROWS: usize = PANEL;
    /// Most tokens per group.
    const TOKEN_GROUP: usize = TOKEN_GROUP;
    /// Most tokens per tile; a group of `n` tokens counts `n.div_ceil(TOKENS)` tiles when the
    /// next panel's prefetch is shared out ([`PanelTile::prefetch_next`]).
    const TOKENS: usize;

    /// Tokens the next tile takes when `left` (>= 1) tokens of the group remain: `1..=left`.
    #[inline(always)]
    fn tokens(&self, left: usize) -> usize {
        Self::TOKENS.min(left)
    }

    /// Whether a tile of `n` tokens prefetches its share of the next panel (tiles of several
    /// tokens reuse a panel from L1, so its first tile would otherwise wait on memory for
    /// every block of the next one; single-token tiles prefetch within their own stream).
    #[inline(always)]
    fn prefetch_next(&self, _n: usize) -> bool {
        false
    }

    /// The panel this token group's tiles read in place of `panel`: `panel` itself, or a
    /// form of it the tile unpacked into `terms` (called once per panel and token group,
    /// before the panel's first tile, so an unpack is shared by all the group's tiles).
    ///
    /// # Safety
    /// `panel` is a whole readable panel of the call; the CPU has the tile's features.
    #[inline(always)]
    unsafe fn prepare(&self, panel: *const u8, _terms: &mut Self::Terms) -> *const u8 {
        panel
    }

    /// Computes the tile's outputs.
    ///
    /// # Safety
    /// The CPU features the tile's kernels need; `t` as [`run`] builds it (a whole panel,
    /// `t.n` activation rows, their entries in `terms`, `t.valid` cells per output row).
    unsafe fn tile(&self, t: &Tile, terms: &Self::Terms);
}

/// One panel GEMM call: `n_rows` rows in panels of `panel_bytes` at `w`, `n_tok` activation
/// rows of `nb` blocks `ar` bytes apart at `a`, outputs at `out` with rows `os` apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub w: *const u8,
    pub panel_bytes: usize,
    pub nb: usize,
    pub n_rows: usize,
    pub a: *const u8,
    pub ar: usize,
    pub n_tok: usize,
    pub out: *mut f32,
    pub os: usize,
}

impl Shape {
    /// The checked shape of a call over panels of `l` ([`PanelLayout::check_gemm`], which
    /// panics on a caller bug), or `None` when there is nothing to compute.
    #[inline(always)]
    pub fn packed(
        l: &PanelLayout,
        packed: &[u8],
        n_rows: usize,
        a: &[u8],
        n_tok: usize,
        mut out: crate::kernels::cells::OutCells<'_>,
        os: usize,
    ) -> Option<Shape> {
        let ar = l.check_gemm(packed, n_rows, a.len(), n_tok, out.len(), os);
        (n_rows > 0 && n_tok > 0).then_some(Shape {
            w: packed.as_ptr(),
            panel_bytes: l.panel_bytes,
            nb: l.nb,
            n_rows,
            a: a.as_ptr(),
            ar,
            n_tok,
            out: out.as_mut_ptr(),
            os,
        })
    }
}

/// Prefetches share `i` of `n` of the `bytes` at `next` (the panel after the current one).
/// Prefetches never fault, so the address past the last panel needs no bound.
#[inline(always)]
fn prefetch_share(next: *const u8, bytes: usize, i: usize, n: usize) {
    let lines = bytes / 64;
    for c in i * lines / n..(i + 1) * lines / n {
        crate::kernels::prefetch::to_l1(next.wrapping_add(64 * c));
    }
}

/// Runs the loop of the module docs with tile `k` and `terms`.
///
/// # Safety
/// `s` describes readable panels, activation rows and writable outputs of the sizes it names
/// (as [`Shape::packed`] checks); `s.nb >= 1`, and `terms.capacity(s.nb) >= 1`; the CPU
/// has the features `k`'s tiles need.
#[inline(always)]
pub(crate) unsafe fn run<K: PanelTile>(k: &K, terms: &mut K::Terms, s: &Shape) {
    const { assert!(K::ROWS > 0 && PANEL.is_multiple_of(K::ROWS) && K::TOKENS > 0) };
    let nb = s.nb;
    let group = terms.capacity(nb).min(K::TOKEN_GROUP);
    invariant!(group >= 1);
    for g0 in (0..s.n_tok).step_by(group) {
        let gn = group.min(s.n_tok - g0);
        // SAFETY: tokens g0..g0 + gn < n_tok are inside `a` (caller contract); gn fits.
        unsafe { terms.fill(s.a.wrapping_add(g0 * s.ar), s.ar, gn, nb) };
        let tiles = gn.div_ceil(K::TOKENS);
        for p in 0..PanelLayout::panels(s.n_rows) {
            let panel = s.w.wrapping_add(p * s.panel_bytes);
            // SAFETY: panel p < panels(n_rows) is whole inside the weights (caller contract).
            let tiled = unsafe { k.prepare(panel, terms) };
            for sub in 0..PANEL / K::ROWS {
                let r0 = p * PANEL + sub * K::ROWS;
                if r0 >= s.n_rows {
                    break;
                }
                let valid = K::ROWS.min(s.n_rows - r0);
                let (mut t0, mut i) = (0, 0);
                while t0 < gn {
                    let n = k.tokens(gn - t0);
                    invariant!((1..=gn - t0).contains(&n));
                    if k.prefetch_next(n) {
                        prefetch_share(panel.wrapping_add(s.panel_bytes), s.panel_bytes, i, tiles);
                    }
                    let tok = g0 + t0;
                    let t = Tile {
                        n,
                        panel: tiled,
                        sub,
                        a: s.a.wrapping_add(tok * s.ar),
                        ar: s.ar,
                        e0: t0 * nb,
                        out: s.out.wrapping_add(tok * s.os + r0),
                        os: s.os,
                        valid,
                    };
                    // SAFETY: panel p, rows r0..r0 + valid, tokens tok..tok + n (inside the
                    // group, so inside the terms) and their output cells are in range.
                    unsafe { k.tile(&t, terms) };
                    t0 += n;
                    i += 1;
                }
            }
        }
    }
}
