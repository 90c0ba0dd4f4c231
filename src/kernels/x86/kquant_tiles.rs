//! What the AVX2 and AVX-512 K-quant panel GEMMs (`avx2/packed_k.rs`, `avx512/packed_k.rs`)
//! share around their tiles: the kind codes, the checked call ([`checked`]: layout, shape and
//! activation table size) and a block's inputs ([`KBlock::at`]: where its quants and scales lie,
//! the tokens' Q8_K quants and table entries, and for a tile that streams the panel from memory
//! the prefetch of the block ahead). Everything is `#[inline(always)]`, so it compiles into
//! each ISA's `#[target_feature]` tiles as if written there.

use crate::kernels::cells::OutCells;
use crate::kernels::packed::driver::Shape;
use crate::kernels::packed::kquant::{ActTable, Q8K_BYTES, QH_AT};
use crate::kernels::packed::PanelLayout;
use crate::kernels::DType;

/// Kernel kinds (const generic): Q4_K, Q5_K, Q6_K.
pub(crate) const Q4K: u8 = 0;
pub(crate) const Q5K: u8 = 1;
pub(crate) const Q6K: u8 = 2;

pub(crate) fn dtype(t: u8) -> DType {
    match t {
        Q4K => DType::Q4_K,
        Q5K => DType::Q5_K,
        _ => DType::Q6_K,
    }
}

/// First qh chunk of a block (Q5_K).
pub(crate) const QH: usize = QH_AT / 64;
/// Activation table entries (token x block) of decode-sized calls, and of the others.
pub(crate) const SMALL: usize = 128;
pub(crate) const LARGE: usize = 1024;
const _: () = assert!(crate::kernels::packed::MAX_K / 256 <= LARGE);

/// The panel layout and checked shape of a `gemm_packed_k` call of kind `T` (panics on a
/// caller bug, as `Shape::packed`), and whether its activation table fits [`SMALL`] entries
/// (else [`LARGE`]: nb <= MAX_K / 256 <= LARGE); `None` when there is nothing to compute.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn checked<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: OutCells<'_>,
    os: usize,
) -> Option<(PanelLayout, Shape, bool)> {
    let l = PanelLayout::new(dtype(T), k).expect("dtype with a panel layout");
    let s = Shape::packed(&l, packed, n_rows, a, n_tok, out, os)?;
    let small = n_tok * l.nb <= SMALL;
    Some((l, s, small))
}

/// Block `b`'s inputs for a tile of `N` tokens over the panel at `panel`.
pub(crate) struct KBlock<'t, const N: usize> {
    /// The block's quants and scale area.
    pub q: *const u8,
    pub sc: *const u8,
    /// The quants of the block ahead to prefetch a line of per chunk load
    /// (`x86::prefetch_line`), null when the tile does not prefetch.
    pub pf: *const u8,
    /// Token `t`'s Q8_K quants of the block, its group-sum pairs and its scale `dy`.
    pub x: [*const u8; N],
    pub pairs: [&'t [i32; 8]; N],
    pub dy: [f32; N],
}

impl<'t, const N: usize> KBlock<'t, N> {
    /// Block `b` of the panel (layout `l`), token `t` reading the Q8_K row at
    /// `a + tk(t) * ar` and the table entries from `tab0 + tk(t) * nb`. With `PF` (a tile
    /// that streams the panel from memory) it starts the prefetch of the block ahead
    /// ([`super::prefetch_k_ahead`]) and returns its quants in `pf`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn at<const E: usize, const PF: bool>(
        l: &PanelLayout,
        panel: *const u8,
        b: usize,
        a: *const u8,
        ar: usize,
        tab: &'t ActTable<E>,
        tab0: usize,
        tk: impl Fn(usize) -> usize,
    ) -> Self {
        let nb = l.nb;
        let e = |t: usize| tab0 + tk(t) * nb + b;
        KBlock {
            q: panel.wrapping_add(b * l.quant_bytes),
            sc: panel.wrapping_add(l.scales_at(b)),
            pf: if PF {
                super::prefetch_k_ahead(l, panel, b)
            } else {
                std::ptr::null()
            },
            x: std::array::from_fn(|t| a.wrapping_add(tk(t) * ar + b * Q8K_BYTES + 4)),
            pairs: std::array::from_fn(|t| &tab.pair[e(t)]),
            dy: std::array::from_fn(|t| tab.dy[e(t)]),
        }
    }
}
