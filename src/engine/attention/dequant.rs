//! Reading a Q8_0 cache (`engine.kv_type = "q8_0"`) in llama.cpp's one-row order (below
//! `LONG_FROM`): one K tile and one V tile at a time are widened back to f16 in the layouts its
//! kernels read (K `[head_dim][pos]`, V `[pos][head_dim]`), so they run unchanged. (The
//! long-context order reads the i8 values and scales directly: `long.rs`.)
//!
//! A value is `f16(scale * q)`: the product of an f16 scale and an i8 is exact in f32 (11 + 8
//! significant bits), so the only rounding is the final conversion (nearest even), the same in
//! the scalar twin and the SIMD kernels: they are bit-identical.

use crate::engine::kv_cache::kv_type::QK;
use crate::engine::kv_cache::LayerKv;
use half::f16;

use super::AttnIsa;

/// The dequantized tiles of one KV head's block, with the block they hold (so a kernel that
/// asks for the same block again, position by position, converts it once). Made once per
/// attention scratch; never allocates after [`DequantTiles::new`].
#[derive(Debug, Clone, Default)]
pub(super) struct DequantTiles {
    k: Vec<f16>,
    v: Vec<f16>,
    /// Value offset (in the layer's arrays) of the tiles held, if any.
    held: Option<usize>,
    kernel: Kernel,
}

/// The conversion kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Kernel {
    #[default]
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl DequantTiles {
    /// Room for one K and one V tile of `tile` values (0 for an f16 cache, which is read in
    /// place), converted with the widest kernel `isa` allows that covers `block_size`.
    pub(super) fn new(tile: usize, block_size: usize, isa: AttnIsa) -> DequantTiles {
        DequantTiles {
            k: vec![f16::ZERO; tile],
            v: vec![f16::ZERO; tile],
            held: None,
            kernel: Kernel::for_isa(isa, block_size),
        }
    }

    /// Uses the kernel of `isa` (benchmarks and tests: every kernel gives the same values).
    pub(super) fn force_isa(&mut self, isa: AttnIsa, block_size: usize) {
        self.kernel = Kernel::for_isa(isa, block_size);
    }

    /// Forgets the tiles held (the cache may have changed since they were converted).
    pub(super) fn reset(&mut self) {
        self.held = None;
    }

    /// The K and V tiles starting at value `base` of the Q8_0 arrays of `kv`, `bs` positions of
    /// `d` values each, widened to f16.
    ///
    /// Panics when `kv` is an f16 layer or the tiles do not fit (callers hand in tiles of the
    /// cache's shape, checked when the attention starts).
    pub(super) fn load(
        &mut self,
        kv: &LayerKv,
        base: usize,
        bs: usize,
        d: usize,
    ) -> (&[f16], &[f16]) {
        let n = bs * d;
        let LayerKv::Q8 {
            k,
            v,
            k_scale,
            v_scale,
        } = *kv
        else {
            panic!("DequantTiles::load reads a Q8_0 layer");
        };
        if self.held != Some(base) {
            let (kq, vq) = (&k[base..][..n], &v[base..][..n]);
            let (ks, vs) = (
                &k_scale[base / QK..][..n / QK],
                &v_scale[base / QK..][..n / QK],
            );
            let (ko, vo) = (&mut self.k[..n], &mut self.v[..n]);
            match self.kernel {
                Kernel::Scalar => {
                    k_tile(kq, ks, bs, ko);
                    v_tile(vq, vs, vo);
                }
                // SAFETY: `for_isa` picks Avx2 only when the CPU has AVX2, FMA and F16C and
                // `bs` is a multiple of 8; the slices have the lengths `k_tile` describes.
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => unsafe { x86::tiles_avx2([kq, vq], [ks, vs], bs, [ko, vo]) },
                // SAFETY: as above with AVX-512F, FMA and F16C and `bs` a multiple of 16.
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => unsafe { x86::tiles_avx512([kq, vq], [ks, vs], bs, [ko, vo]) },
            }
            self.held = Some(base);
        }
        (&self.k[..n], &self.v[..n])
    }
}

impl Kernel {
    fn for_isa(isa: AttnIsa, bs: usize) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if isa >= AttnIsa::Avx512 && AttnIsa::Avx512.supported() && bs.is_multiple_of(16) {
                return Kernel::Avx512;
            }
            if isa >= AttnIsa::Avx2 && AttnIsa::Avx2.supported() && bs.is_multiple_of(8) {
                return Kernel::Avx2;
            }
        }
        let _ = (isa, bs);
        Kernel::Scalar
    }
}

/// The scalar twin for a K tile: `q` is `[d][bs]` (`d` a multiple of [`QK`]), `s` its scales
/// `[d / QK][bs]`; `out[i * bs + p] = f16(s[(i / QK) * bs + p] * q[i * bs + p])`.
fn k_tile(q: &[i8], s: &[f16], bs: usize, out: &mut [f16]) {
    for (j, (o, &x)) in out.iter_mut().zip(q).enumerate() {
        let (i, p) = (j / bs, j % bs);
        *o = f16::from_f32(s[(i / QK) * bs + p].to_f32() * f32::from(x));
    }
}

/// The scalar twin for a V tile: `q` is `[bs][d]`, `s` its scales `[bs][d / QK]`, so value `j`
/// has scale `s[j / QK]`.
fn v_tile(q: &[i8], s: &[f16], out: &mut [f16]) {
    for (j, (o, &x)) in out.iter_mut().zip(q).enumerate() {
        *o = f16::from_f32(s[j / QK].to_f32() * f32::from(x));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The SIMD twins of `k_tile` / `v_tile`, one body over both widths ([`Simd`]): 16
    //! (AVX-512) or 8 (AVX2) values per step, sign-extended to i32, converted to f32 (exact),
    //! multiplied by their scales, converted to f16 with round-to-nearest-even, as
    //! `f16::from_f32`.

    use super::QK;
    use crate::engine::attention::simd::{Avx2, Avx512, Simd};
    use half::f16;

    /// The K and V tiles (see `k_tile` and `v_tile`) with AVX-512.
    ///
    /// # Safety
    /// AVX-512F, FMA and F16C; as [`tiles`] with `bs` a multiple of 16.
    #[target_feature(enable = "avx512f,fma,f16c")]
    pub(super) unsafe fn tiles_avx512(
        k: [&[i8]; 2],
        s: [&[f16]; 2],
        bs: usize,
        out: [&mut [f16]; 2],
    ) {
        // SAFETY: this function's contract.
        unsafe { tiles::<Avx512>(k, s, bs, out) }
    }

    /// The K and V tiles (see `k_tile` and `v_tile`) with AVX2.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as [`tiles`] with `bs` a multiple of 8.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tiles_avx2(
        k: [&[i8]; 2],
        s: [&[f16]; 2],
        bs: usize,
        out: [&mut [f16]; 2],
    ) {
        // SAFETY: this function's contract.
        unsafe { tiles::<Avx2>(k, s, bs, out) }
    }

    /// `[kq, vq]` with their scales `[ks, vs]` into `[ko, vo]`: the K tile `[d][bs]` (scales
    /// `[d / QK][bs]`) and the V tile `[bs][d]` (scales `[bs][d / QK]`).
    ///
    /// # Safety
    /// `S`'s features. (Lengths are asserted: `kq`, `vq` hold as many values as `ko`, `vo`, a
    /// multiple of `bs` and of [`QK`]; `ks`, `vs` one per [`QK`]; `bs` a multiple of
    /// `S::LANES`.)
    #[inline(always)]
    unsafe fn tiles<S: Simd>(
        [kq, vq]: [&[i8]; 2],
        [ks, vs]: [&[f16]; 2],
        bs: usize,
        [ko, vo]: [&mut [f16]; 2],
    ) {
        let (n, m) = (ko.len(), vo.len());
        assert!(kq.len() >= n && ks.len() * QK >= n && n.is_multiple_of(bs));
        assert!(vq.len() >= m && vs.len() * QK >= m && m.is_multiple_of(QK));
        assert!(bs.is_multiple_of(S::LANES));
        // SAFETY: every access is in bounds by the asserts: row i (< n / bs), columns
        // p..p + LANES <= bs of kq and ko, scales row i / QK < n / bs / QK, same columns;
        // V values j..j + LANES <= m (m a multiple of QK, hence of LANES), scale j / QK.
        unsafe {
            for i in 0..n / bs {
                for p in (0..bs).step_by(S::LANES) {
                    let sc = S::load_f16(ks.as_ptr().add((i / QK) * bs + p));
                    let x = S::load_i8(kq.as_ptr().add(i * bs + p));
                    S::store_f16(ko.as_mut_ptr().add(i * bs + p), S::mul(sc, x));
                }
            }
            for j in (0..m).step_by(S::LANES) {
                let sc = S::set1(vs.get_unchecked(j / QK).to_f32());
                let x = S::load_i8(vq.as_ptr().add(j));
                S::store_f16(vo.as_mut_ptr().add(j), S::mul(sc, x));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random-looking i8 values and f16 scales over the whole range, subnormal scales included.
    fn data(n: usize, seed: u32) -> (Vec<i8>, Vec<f16>) {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let q = (0..n).map(|_| next() as i8).collect();
        let s = (0..n / QK)
            .map(|i| match i % 4 {
                0 => f16::from_bits((next() & 0x7bff) as u16),
                1 => f16::from_bits((next() & 0x03ff) as u16), // subnormal
                2 => f16::from_f32((next() % 1000) as f32 * 1e-4),
                _ => f16::ZERO,
            })
            .collect();
        (q, s)
    }

    #[test]
    fn scalar_twin_is_scale_times_value() {
        let (bs, d) = (16, 64);
        let (q, s) = data(bs * d, 1);
        let mut out = vec![f16::ZERO; bs * d];
        k_tile(&q, &s, bs, &mut out);
        let (i, p) = (37, 5);
        let want = f16::from_f32(s[(i / QK) * bs + p].to_f32() * f32::from(q[i * bs + p]));
        assert_eq!(out[i * bs + p], want);
        v_tile(&q, &s, &mut out);
        assert_eq!(
            out[p * d + i],
            f16::from_f32(s[(p * d + i) / QK].to_f32() * f32::from(q[p * d + i]))
        );
    }

    #[test]
    fn simd_twins_are_bit_identical() {
        for &(bs, d) in &[(16, 64), (16, 128), (32, 96), (16, 256), (8, 64)] {
            let (q, s) = data(bs * d, (bs * d) as u32);
            let mut want_k = vec![f16::ZERO; bs * d];
            let mut want_v = want_k.clone();
            k_tile(&q, &s, bs, &mut want_k);
            v_tile(&q, &s, &mut want_v);
            // Only the scalar twin exists off x86-64.
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (want_k, want_v);
            #[cfg(target_arch = "x86_64")]
            for (isa, kernel) in [
                (AttnIsa::Avx2, Kernel::Avx2),
                (AttnIsa::Avx512, Kernel::Avx512),
            ] {
                if !isa.supported() {
                    crate::test_skip::skip(&format!("this CPU cannot run the {isa:?} dequant"));
                    continue;
                }
                if Kernel::for_isa(isa, bs) != kernel {
                    continue; // a block size this kernel does not take (8 for AVX-512)
                }
                let mut t = DequantTiles::new(bs * d, bs, isa);
                let kv = LayerKv::Q8 {
                    k: &q,
                    v: &q,
                    k_scale: &s,
                    v_scale: &s,
                };
                let (k, v) = t.load(&kv, 0, bs, d);
                let bits = |x: &[f16]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(k), bits(&want_k), "{isa:?} K bs={bs} d={d}");
                assert_eq!(bits(v), bits(&want_v), "{isa:?} V bs={bs} d={d}");
            }
        }
    }

    #[test]
    fn a_held_block_is_converted_once_until_reset() {
        let (bs, d) = (16, 64);
        let (mut q, s) = data(2 * bs * d, 7);
        let mut t = DequantTiles::new(bs * d, bs, AttnIsa::Scalar);
        let first = {
            let kv = LayerKv::Q8 {
                k: &q,
                v: &q,
                k_scale: &s,
                v_scale: &s,
            };
            t.load(&kv, bs * d, bs, d).0.to_vec()
        };
        q[bs * d..].iter_mut().for_each(|x| *x = x.wrapping_add(1));
        let kv = LayerKv::Q8 {
            k: &q,
            v: &q,
            k_scale: &s,
            v_scale: &s,
        };
        assert_eq!(t.load(&kv, bs * d, bs, d).0, &first[..]);
        t.reset();
        assert_ne!(t.load(&kv, bs * d, bs, d).0, &first[..]);
    }
}
