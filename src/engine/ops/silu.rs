//! SiLU in place, for the recurrent mixers: `x = silu(x)` (their convolutions' outputs) and
//! `x *= silu(gate)` (their gated outputs), with the vector lanes of [`super::swiglu`], so
//! every ISA gives the scalar [`silu`]'s bits. The version that runs follows the kernel
//! instruction set ([`crate::kernels::isa()`], which `KILN_ISA` steers): AVX-512, AVX2, else
//! (scalar, NEON) the portable one.

use super::swiglu::silu;
use crate::kernels::isa::{self, Isa};

/// `x[i] = silu(x[i])`, with the version of the kernel instruction set.
pub fn silu_in_place(x: &mut [f32]) {
    silu_in_place_with(crate::kernels::isa(), x);
}

/// `x[i] = x[i] * silu(gate[i])`, with the version of the kernel instruction set. Panics when
/// the lengths differ.
pub fn mul_silu_in_place(x: &mut [f32], gate: &[f32]) {
    mul_silu_in_place_with(crate::kernels::isa(), x, gate);
}

/// [`silu_in_place`] with the version for `isa`; panics when this CPU lacks it.
pub fn silu_in_place_with(isa: Isa, x: &mut [f32]) {
    map_with::<false>(isa, x, &[]);
}

/// [`mul_silu_in_place`] with the version for `isa`; panics when the lengths differ or this
/// CPU lacks `isa`.
pub fn mul_silu_in_place_with(isa: Isa, x: &mut [f32], gate: &[f32]) {
    assert_eq!(x.len(), gate.len(), "mul_silu lengths");
    map_with::<true>(isa, x, gate);
}

/// `x = x * silu(gate)` when `MUL`, else `x = silu(x)` (`gate` unused).
fn map_with<const MUL: bool>(isa: Isa, x: &mut [f32], gate: &[f32]) {
    assert!(isa::supported(isa), "silu: this CPU lacks {isa}");
    match isa {
        // SAFETY: Isa::Avx512 is supported (checked above), which includes AVX-512F.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { map_avx512::<MUL>(x, gate) },
        // SAFETY: Isa::Avx2 / AvxVnni is supported (checked above), which includes AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { map_avx2::<MUL>(x, gate) },
        _ => map_scalar::<MUL>(x, gate, 0),
    }
}

/// The portable version from value `from` on (the vector versions' tail).
fn map_scalar<const MUL: bool>(x: &mut [f32], gate: &[f32], from: usize) {
    if MUL {
        for (v, &g) in x[from..].iter_mut().zip(&gate[from..]) {
            *v *= silu(g);
        }
    } else {
        for v in &mut x[from..] {
            *v = silu(*v);
        }
    }
}

/// # Safety
/// The CPU must support AVX-512F; `gate` is as long as `x` when `MUL`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn map_avx512<const MUL: bool>(x: &mut [f32], gate: &[f32]) {
    use super::swiglu::silu_avx512_lanes;
    use std::arch::x86_64::*;
    let full = x.len() - x.len() % 16;
    let p = x.as_mut_ptr();
    for i in (0..full).step_by(16) {
        // SAFETY: i + 16 <= full <= x.len() (and gate.len() when MUL).
        unsafe {
            let v = _mm512_loadu_ps(p.add(i));
            let out = if MUL {
                _mm512_mul_ps(v, silu_avx512_lanes(_mm512_loadu_ps(gate.as_ptr().add(i))))
            } else {
                silu_avx512_lanes(v)
            };
            _mm512_storeu_ps(p.add(i), out);
        }
    }
    map_scalar::<MUL>(x, gate, full);
}

/// # Safety
/// The CPU must support AVX2 and FMA; `gate` is as long as `x` when `MUL`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn map_avx2<const MUL: bool>(x: &mut [f32], gate: &[f32]) {
    use super::swiglu::silu_avx2_lanes;
    use std::arch::x86_64::*;
    let full = x.len() - x.len() % 8;
    for i in (0..full).step_by(8) {
        let p = x.as_mut_ptr();
        // SAFETY: i + 8 <= full <= x.len() (and gate.len() when MUL).
        let (v, g) = unsafe {
            let v = _mm256_loadu_ps(p.add(i));
            let g = if MUL {
                _mm256_loadu_ps(gate.as_ptr().add(i))
            } else {
                v
            };
            (v, g)
        };
        // SAFETY: same target features.
        let Some(s) = (unsafe { silu_avx2_lanes(g) }) else {
            // A lane outside the vector version's range: these 8 in the portable code.
            let (xs, gs) = (
                &mut x[i..i + 8],
                if MUL { &gate[i..i + 8] } else { &[][..] },
            );
            map_scalar::<MUL>(xs, gs, 0);
            continue;
        };
        let out = if MUL { _mm256_mul_ps(v, s) } else { s };
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(p.add(i), out) };
    }
    map_scalar::<MUL>(x, gate, full);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ISA this CPU runs gives the portable version's bits (any NaN for a NaN).
    #[test]
    fn every_isa_is_bit_identical_to_scalar() {
        let mut g: Vec<f32> = (0..401).map(|i| (i as f32 - 200.0) * 0.7731).collect();
        g.extend([
            0.0, -0.0, 1e-38, 3e38, -3e38, 88.7, -88.7, 133.5, -133.5, 1e6, -1e6,
        ]);
        g.extend((0..37).map(|i| (i as f32 * 0.37).sin() * 5.0));
        let x: Vec<f32> = (0..g.len())
            .map(|i| [1.0, -2.5, 1e20, -1e-20, 3.0][i % 5])
            .collect();
        let same = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        };
        for n in [0, 1, 7, 9, 17, 33, g.len()] {
            let mut want_s = g[..n].to_vec();
            silu_in_place_with(Isa::Scalar, &mut want_s);
            let mut want_m = x[..n].to_vec();
            mul_silu_in_place_with(Isa::Scalar, &mut want_m, &g[..n]);
            for isa in Isa::tested() {
                let mut got = g[..n].to_vec();
                silu_in_place_with(isa, &mut got);
                assert!(same(&want_s, &got), "{isa} silu, length {n}");
                let mut got = x[..n].to_vec();
                mul_silu_in_place_with(isa, &mut got, &g[..n]);
                assert!(same(&want_m, &got), "{isa} mul_silu, length {n}");
            }
        }
        // And the portable version is SiLU.
        let mut v = vec![1.0f32, -1.0];
        silu_in_place_with(Isa::Scalar, &mut v);
        assert!((v[0] - 0.731_058_6).abs() < 1e-6 && (v[1] + 0.268_941_4).abs() < 1e-6);
    }
}
