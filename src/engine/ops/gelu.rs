//! GEGLU: `h = gelu(gate) * up` with the tanh-approximated GELU, computed as llama.cpp's CPU
//! backend does (`ggml_vec_geglu_f32` with `GGML_GELU_FP16`): the gate is rounded to f16 and
//! looked up in a 65536-entry table of f16 GELU values, except below -10 (0) and from 10 on
//! (the gate itself). The table is ggml's, value for value: each entry is
//! `f16(0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))))` with the inner `1 + a x x` fused
//! (GCC contracts it into one multiply-add) and `tanhf` from the C library; NaN entries are the
//! x86 default NaN with the input's sign.
//!
//! The version that runs follows the kernel instruction set ([`crate::kernels::isa()`], which
//! `KILN_ISA` steers): AVX-512 and AVX2 convert 16 / 8 gates to f16 at once (`vcvtps2ph`, the
//! rounding `half` uses), gather their table entries and convert back (`vcvtph2ps`), bit-identical
//! to the portable version; scalar and NEON run the portable one.

use crate::kernels::isa::{self, Isa};
use half::f16;
use std::sync::LazyLock;

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// ggml's `ggml_gelu_f32` for one value.
fn gelu_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())
}

/// Entries of [`TABLE`]: one per f16 bit pattern, plus one so a 32-bit gather at the last entry
/// stays inside the table.
const TABLE_LEN: usize = (1 << 16) + 1;

/// `TABLE[bits]` = the f16 GELU of the f16 value with those bits (the last entry is padding).
static TABLE: LazyLock<Box<[u16; TABLE_LEN]>> = LazyLock::new(|| {
    let mut t = Box::new([0u16; TABLE_LEN]);
    for (i, e) in t.iter_mut().enumerate().take(1 << 16) {
        let x = f16::from_bits(i as u16).to_f32();
        let y = gelu_f32(x);
        // A NaN (from a NaN or -inf input) is the x86 default NaN with the input's sign.
        *e = if y.is_nan() {
            (i as u16 & 0x8000) | 0x7e00
        } else {
            f16::from_f32(y).to_bits()
        };
    }
    t
});

/// Writes `gelu(gate[i]) * up[i]` into `out[i]`, with the version of the kernel instruction
/// set. All three have the same length.
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    geglu_with(crate::kernels::isa(), gate, up, out);
}

/// [`geglu`] with the version for `isa`: [`geglu_avx512`] for AVX-512, [`geglu_avx2`] for AVX2
/// and AVX-VNNI, [`geglu_scalar`] otherwise; all bit-identical. Panics when the slices' lengths
/// differ or this CPU lacks `isa`.
pub fn geglu_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "geglu lengths"
    );
    assert!(isa::supported(isa), "geglu: this CPU lacks {isa}");
    match isa {
        // SAFETY: Isa::Avx512 is supported (checked above), which includes AVX-512F and F16C.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { geglu_avx512(gate, up, out) },
        // SAFETY: Isa::Avx2 / AvxVnni is supported (checked above), which includes AVX2 and F16C.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { geglu_avx2(gate, up, out) },
        _ => geglu_scalar(gate, up, out),
    }
}

/// The portable version, one value at a time.
pub fn geglu_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let table = &**TABLE;
    for ((o, &x), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = geglu_one(table, x, u);
    }
}

fn geglu_one(table: &[u16; TABLE_LEN], x: f32, u: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x * u
    } else {
        f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32() * u
    }
}

/// 16 lanes of [`geglu_scalar`] at a time, bit-identical to it; the tail runs the scalar code.
///
/// # Safety
/// The CPU must support AVX-512F (and F16C, which every AVX-512 CPU has; [`Isa::Avx512`]
/// checks both).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c")]
pub unsafe fn geglu_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let table = &**TABLE;
    let n = out.len().min(gate.len()).min(up.len());
    let full = n - n % 16;
    let (lo, hi) = (_mm512_set1_ps(-10.0), _mm512_set1_ps(10.0));
    for i in (0..full).step_by(16) {
        // SAFETY: i + 16 <= full <= the length of all three slices.
        let (x, u) = unsafe {
            (
                _mm512_loadu_ps(gate.as_ptr().add(i)),
                _mm512_loadu_ps(up.as_ptr().add(i)),
            )
        };
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
        let idx = _mm512_cvtepu16_epi32(h);
        // SAFETY: every index is < 2^16 and the table has 2^16 + 1 entries, so the 4 bytes read
        // at `2 * idx` lie inside it.
        let g = unsafe { _mm512_i32gather_epi32::<2>(idx, table.as_ptr().cast()) };
        let y = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)), u);
        let y = _mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, hi),
            y,
            _mm512_mul_ps(x, u),
        );
        let y = _mm512_maskz_mov_ps(!_mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, lo), y);
        // SAFETY: i + 16 <= full <= out.len().
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i), y) };
    }
    for i in full..n {
        out[i] = geglu_one(table, gate[i], up[i]);
    }
}

/// 8 lanes of [`geglu_scalar`] at a time, bit-identical to it; the tail runs the scalar code.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn geglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let table = &**TABLE;
    let n = out.len().min(gate.len()).min(up.len());
    let full = n - n % 8;
    let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
    let low16 = _mm256_set1_epi32(0xffff);
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= the length of all three slices.
        let (x, u) = unsafe {
            (
                _mm256_loadu_ps(gate.as_ptr().add(i)),
                _mm256_loadu_ps(up.as_ptr().add(i)),
            )
        };
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
        let idx = _mm256_cvtepu16_epi32(h);
        // SAFETY: every index is < 2^16 and the table has 2^16 + 1 entries, so the 4 bytes read
        // at `2 * idx` lie inside it.
        let g = unsafe { _mm256_i32gather_epi32::<2>(table.as_ptr().cast(), idx) };
        let g = _mm256_and_si256(g, low16);
        let packed = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256::<1>(g));
        let y = _mm256_mul_ps(_mm256_cvtph_ps(packed), u);
        let y = _mm256_blendv_ps(y, _mm256_mul_ps(x, u), _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
        let y = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, lo), y);
        // SAFETY: i + 8 <= full <= out.len().
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), y) };
    }
    for i in full..n {
        out[i] = geglu_one(table, gate[i], up[i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is llama.cpp's `ggml_table_gelu_f16` byte for byte (its sha256, dumped from
    /// the reference build's libggml-cpu after `ggml_cpu_init`, little-endian u16s; see
    /// scripts/reference/README.md).
    #[test]
    fn table_is_ggmls() {
        use sha2::{Digest, Sha256};
        use std::fmt::Write;
        let bytes: Vec<u8> = TABLE[..1 << 16]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let digest = Sha256::digest(&bytes);
        let mut hex = String::new();
        for b in digest {
            let _ = write!(hex, "{b:02x}");
        }
        assert_eq!(
            hex,
            "5eceda6f287dec9dc0bcfa24516d6744a031a5c52d1984688b4558aeb1daf909"
        );
    }

    #[test]
    fn edges_follow_ggml() {
        let mut out = [0.0; 4];
        geglu(&[-10.0, -11.0, 10.0, 0.0], &[2.0; 4], &mut out);
        assert_eq!(out, [0.0, 0.0, 20.0, 0.0]);
        let mut o = [0.0];
        geglu(&[1.0], &[1.0], &mut o);
        assert!((o[0] - 0.8412).abs() < 1e-3, "{}", o[0]);
    }

    /// Every ISA this CPU runs gives the portable version's bits (any NaN for a NaN), through
    /// the vector bodies and the tails: odd lengths, the cut points -10 and 10 and their
    /// neighbours, values that round across f16 boundaries, f16 overflow, infinities and NaN.
    #[test]
    fn every_isa_is_bit_identical_to_scalar() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut cases: Vec<(Vec<f32>, Vec<f32>)> = [0, 1, 7, 9, 15, 17, 33, 2049]
            .iter()
            .map(|&n| {
                let g: Vec<f32> = (0..n).map(|_| next() * 14.0).collect();
                let u: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
                (g, u)
            })
            .collect();
        let mut g = vec![
            -10.0f32,
            10.0,
            f32::from_bits((-10.0f32).to_bits() - 1),
            f32::from_bits((-10.0f32).to_bits() + 1),
            f32::from_bits(10.0f32.to_bits() - 1),
            f32::from_bits(10.0f32.to_bits() + 1),
            0.0,
            -0.0,
            1e-8,
            -1e-8,
            65504.0,
            70000.0,
            -70000.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        // Halfway between neighbouring f16 values (ties round to even) across the table's range.
        g.extend((0..600).map(|i| {
            let h = f16::from_f32(-9.9 + i as f32 * 0.033);
            (h.to_f32() + f16::from_bits(h.to_bits() + 1).to_f32()) / 2.0
        }));
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + i as f32 * 0.25).collect();
        cases.push((g, u));
        for (g, u) in &cases {
            let mut want = vec![0.0; g.len()];
            geglu_scalar(g, u, &mut want);
            for isa in Isa::tested() {
                let mut got = vec![1.5; g.len()];
                geglu_with(isa, g, u, &mut got);
                for (i, (w, o)) in want.iter().zip(&got).enumerate() {
                    assert!(
                        w.to_bits() == o.to_bits() || (w.is_nan() && o.is_nan()),
                        "{isa} length {} [{i}] gate {}: {w} vs {o}",
                        g.len(),
                        g[i]
                    );
                }
            }
        }
    }
}
