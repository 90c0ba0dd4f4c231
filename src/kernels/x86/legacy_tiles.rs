//! What the AVX2 and AVX-512 legacy-quant (Q4_0 .. Q8_0) row kernels share around their
//! register tiles: the checked GEMM's walk over panels and tiles ([`Gemm`], [`Gemm::tiles`]),
//! the choice of the const tile instance for a tile's size ([`tile_sizes!`]) and the public
//! `vec_dot_*` / `gemm_*` entry points ([`legacy_entry_points!`]). Each ISA keeps its own
//! microkernel (`tile`) and tile sizes; everything here is `#[inline(always)]` or a macro, so
//! it compiles into each ISA's `#[target_feature]` GEMM as if written there.

use crate::kernels::legacy_kind::{adt, wdt};
use crate::kernels::shape::check_gemm;

/// A checked legacy GEMM of kind `T`: `nb` blocks per row, weight rows `wr` bytes apart from
/// `w`, activation rows `ar` bytes apart from `a`, outputs `os` apart from `out`.
#[derive(Clone, Copy)]
pub(crate) struct Gemm {
    pub nb: usize,
    pub w: *const u8,
    pub wr: usize,
    pub a: *const u8,
    pub ar: usize,
    pub out: *mut f32,
    pub os: usize,
}

impl Gemm {
    /// Checks the lengths of a `gemm_*` call of kind `T` (panics, as `check_gemm`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new<const T: u8>(
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
            wdt(T),
            w.len(),
            n_rows,
            adt(T),
            a.len(),
            n_tok,
            out.len(),
            os,
        );
        Gemm {
            nb: k / 32,
            w: w.as_ptr(),
            wr,
            a: a.as_ptr(),
            ar,
            out: out.as_mut_ptr(),
            os,
        }
    }

    /// Calls `tile(g, rm, rn)` for every tile of at most `RM` rows x `RN` tokens of the
    /// `n_rows` x `n_tok` output, `g` moved to the tile's first row and token: panels of
    /// `panel` rows, in each the token tiles, in each the row tiles.
    ///
    /// With `self` from [`Gemm::new`] for these `n_rows` and `n_tok`, `tile` may read `rm`
    /// rows and `rn` tokens and write their `rm x rn` output cells from `g`.
    #[inline(always)]
    pub(crate) fn tiles<const RM: usize, const RN: usize>(
        &self,
        n_rows: usize,
        n_tok: usize,
        panel: usize,
        mut tile: impl FnMut(&Gemm, usize, usize),
    ) {
        for p0 in (0..n_rows).step_by(panel) {
            let p1 = (p0 + panel).min(n_rows);
            for t0 in (0..n_tok).step_by(RN) {
                let rn = RN.min(n_tok - t0);
                for r0 in (p0..p1).step_by(RM) {
                    let rm = RM.min(p1 - r0);
                    // r0 + rm <= n_rows and t0 + rn <= n_tok: the moved pointers stay inside
                    // the checked slices (wrapping_add: no claim made here).
                    let g = Gemm {
                        w: self.w.wrapping_add(r0 * self.wr),
                        a: self.a.wrapping_add(t0 * self.ar),
                        out: self.out.wrapping_add(t0 * self.os + r0),
                        ..*self
                    };
                    tile(&g, rm, rn);
                }
            }
        }
    }
}

/// `$tile::<$t, M, N>($args)` for the `(M, N)` of the list equal to `($rm, $rn)`, else
/// `$tile::<$t, 1, 1>` (the list names every larger size a GEMM makes).
macro_rules! tile_sizes {
    ($tile:ident::<$t:ident> $args:tt, ($rm:expr, $rn:expr), [$(($m:literal, $n:literal))*]) => {
        match ($rm, $rn) {
            $(($m, $n) => $tile::<$t, $m, $n> $args,)*
            _ => $tile::<$t, 1, 1> $args,
        }
    };
}
pub(crate) use tile_sizes;

/// The public `vec_dot_*` and `gemm_*` of the five kinds, calling the invoking module's
/// `vec_dot::<T>` and `gemm::<T>` with the features `$features` (`$isa` and `$cpu` name the
/// ISA and its features in the docs).
macro_rules! legacy_entry_points {
    ($isa:literal, $features:literal, $cpu:literal) => {
        $crate::kernels::x86::legacy_tiles::legacy_entry_points!(
            @each $isa, $features, $cpu;
            Q4_0: vec_dot_q4_0, gemm_q4_0;
            Q4_1: vec_dot_q4_1, gemm_q4_1;
            Q5_0: vec_dot_q5_0, gemm_q5_0;
            Q5_1: vec_dot_q5_1, gemm_q5_1;
            Q8_0: vec_dot_q8_0, gemm_q8_0;
        );
    };
    (@each $isa:literal, $features:literal, $cpu:literal; $($t:ident: $vd:ident, $gm:ident;)*) => {$(
        #[doc = concat!($isa, " twin of the scalar `vec_dot` of the same name.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ". Lengths are checked (panics).")]
        #[target_feature(enable = $features)]
        pub unsafe fn $vd(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: same target features as the caller.
            unsafe { vec_dot::<$t>(n, w, a) }
        }

        #[doc = concat!($isa, " register-tiled twin of the scalar `gemm` of the same name.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ". Lengths are checked (panics).")]
        #[target_feature(enable = $features)]
        pub unsafe fn $gm(k: usize, w: &[u8], n_rows: usize, a: &[u8], n_tok: usize, out: &mut [f32], out_stride: usize) {
            // SAFETY: same target features as the caller.
            unsafe { gemm::<$t>(k, w, n_rows, a, n_tok, out, out_stride) }
        }
    )*};
}
pub(crate) use legacy_entry_points;
