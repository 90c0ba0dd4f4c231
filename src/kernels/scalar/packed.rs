//! Scalar twins of the panel GEMMs (`x86/avx512/packed.rs`): the same arithmetic, in the same
//! order, read from the packed bytes ([`crate::kernels::packed`]). The SIMD versions must match
//! these bit for bit, and these match the GGUF-layout kernels they replace:
//!
//! * Q4_1 x Q8_1, Q5_0 x Q8_0 and Q8_0 x Q8_0 in llama.cpp's order (`legacy_kind::ggml_lanes`,
//!   `scalar/legacy.rs`'s `dot_lanes`): eight partial sums per output (lane `i` = the exact sum
//!   of the signed products of values `4i..4i+4` of each block), `acc_i = fma(d_w * d_a,
//!   f32(sum_i), acc_i)` block after block, (Q4_1: `summs = fma(m_w, s_a, summs)`), then
//!   `((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3))` (+ `summs`).
//! * Q4_0 x Q8_0 as the row-lanes GEMM (`x86/avx512/lanes.rs`): the exact integer block sum
//!   `-8 * sum(a) + sum(u * a)` (u the unsigned weight), then `acc = fma(f32(sum), d_w * d_a,
//!   acc)`.
//! * Q5_1 x Q8_1 as the row-lanes GEMM too: `acc = fma(f32(sum(u * a)), d_w * d_a, acc)`, then
//!   `acc = fma(m_w, s_a, acc)`.

use crate::kernels::blocks::f16_to_f32_at;
use crate::kernels::packed::{PanelLayout, PANEL};
use crate::kernels::DType;

/// Unsigned weight `v` (0..32) of row `r` in block `b` of a panel, and its dword index in
/// ggml's Q4_1 order (`v / 4`).
fn weight(l: &PanelLayout, panel: &[u8], b: usize, r: usize, v: usize) -> i32 {
    let q = &panel[b * l.quant_bytes..];
    if l.dtype == DType::Q8_0 {
        q[(v / 4) * 64 + 4 * r + v % 4] as i32
    } else {
        let (j, hi) = ((v % 16) / 4, v >= 16);
        let byte = q[j * 64 + 4 * r + v % 4];
        let nibble = (if hi { byte >> 4 } else { byte & 0xF }) as i32;
        if matches!(l.dtype, DType::Q5_0 | DType::Q5_1) {
            let qh = u32::from_le_bytes(q[256 + 4 * r..260 + 4 * r].try_into().expect("4 bytes"));
            nibble | ((((qh >> v) & 1) as i32) << 4)
        } else {
            nibble
        }
    }
}

/// One output: row `r` of `panel` times the activation row `a` (Q8_0 or Q8_1 blocks).
fn dot(l: &PanelLayout, panel: &[u8], r: usize, a: &[u8]) -> f32 {
    let q8_1 = matches!(l.dtype, DType::Q4_1 | DType::Q5_1);
    let ab = if q8_1 { 36 } else { 34 };
    let qa = if q8_1 { 4 } else { 2 };
    if l.dtype == DType::Q5_1 {
        let mut acc = 0f32;
        for b in 0..l.nb {
            let blk = &a[b * ab..(b + 1) * ab];
            let sum: i32 = (0..QK)
                .map(|v| weight(l, panel, b, r, v) * blk[qa + v] as i8 as i32)
                .sum();
            let s = l.scales_at(b);
            let (dw, mw) = (
                f16_to_f32_at(panel, s + 2 * r),
                f16_to_f32_at(panel, s + 32 + 2 * r),
            );
            let (da, sa) = (f16_to_f32_at(blk, 0), f16_to_f32_at(blk, 2));
            acc = (sum as f32).mul_add(dw * da, acc);
            acc = mw.mul_add(sa, acc);
        }
        acc
    } else if matches!(l.dtype, DType::Q4_1 | DType::Q5_0 | DType::Q8_0) {
        // Stored weights are unsigned: Q8_0 as q + 128, Q5_0 as q + 16 (Q4_1 has no offset).
        let offset = match l.dtype {
            DType::Q8_0 => 128,
            DType::Q5_0 => 16,
            _ => 0,
        };
        let mut acc = [0f32; 8];
        let mut summs = 0f32;
        for b in 0..l.nb {
            let blk = &a[b * ab..(b + 1) * ab];
            let s = l.scales_at(b);
            let dw = f16_to_f32_at(panel, s + 2 * r);
            let scale = dw * f16_to_f32_at(blk, 0);
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let p: i32 = (4 * i..4 * i + 4)
                    .map(|v| (weight(l, panel, b, r, v) - offset) * blk[qa + v] as i8 as i32)
                    .sum();
                *acc_i = scale.mul_add(p as f32, *acc_i);
            }
            if q8_1 {
                let (mw, sa) = (f16_to_f32_at(panel, s + 32 + 2 * r), f16_to_f32_at(blk, 2));
                summs = mw.mul_add(sa, summs);
            }
        }
        let h = crate::kernels::scalar::legacy::hsum8(&acc);
        if q8_1 {
            h + summs
        } else {
            h
        }
    } else {
        let offset = 8; // Q4_0
        let mut acc = 0f32;
        for b in 0..l.nb {
            let blk = &a[b * ab..(b + 1) * ab];
            let q = |v: usize| blk[qa + v] as i8 as i32;
            let sum_a: i32 = (0..QK).map(q).sum();
            let sum: i32 = -offset * sum_a
                + (0..QK)
                    .map(|v| weight(l, panel, b, r, v) * q(v))
                    .sum::<i32>();
            let dw = f16_to_f32_at(panel, l.scales_at(b) + 2 * r);
            acc = (sum as f32).mul_add(dw * f16_to_f32_at(blk, 0), acc);
        }
        acc
    }
}

const QK: usize = 32;

/// Panel GEMM, scalar: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`; `packed` holds the panels of rows `0..n_rows` (64-byte aligned)
/// of `dtype` (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0), `a` activation rows in the dtype's `vec_dot_type`.
/// Panics on lengths that don't fit (a caller bug) or a dtype without a panel layout.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    dtype: DType,
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    mut out: crate::kernels::cells::OutCells<'_>,
    out_stride: usize,
) {
    let l = PanelLayout::new(dtype, k).expect("dtype with a panel layout");
    let ar = l.check_gemm(packed, n_rows, a.len(), n_tok, out.len(), out_stride);
    for t in 0..n_tok {
        let at = &a[t * ar..(t + 1) * ar];
        for r in 0..n_rows {
            let panel = &packed[r / PANEL * l.panel_bytes..][..l.panel_bytes];
            // SAFETY: t < n_tok and r < n_rows: a cell of this call (`check_gemm` held
            // the extent to every such cell).
            unsafe { out.write(t * out_stride + r, dot(&l, panel, r % PANEL, at)) };
        }
    }
}
