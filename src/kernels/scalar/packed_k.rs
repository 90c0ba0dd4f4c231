//! Scalar twins of the K-quant panel GEMMs (`x86/avx512/packed_k.rs`, `x86/avx2/packed_k.rs`),
//! read from the panel bytes of `packed/kquant.rs`.
//!
//! The float order is that of the same ISA's GGUF-row K-quant `gemm` (`x86/*/kquants.rs`), so
//! a panel GEMM equals the row `gemm` bit for bit. Those keep `lanes` f32 accumulators per
//! output (16 on AVX-512, 8 on AVX2); per 256-value block, with `u` the block's dwords
//! (values `4u..4u+4`) and `g = u / 4` their 16-value group:
//!
//! ```text
//! isum[u % lanes] += scale_g * sum(w * q)              exact i32 (w unsigned, offset left out)
//! isum[l] += off * (scale_2l * bsum_2l + scale_2l+1 * bsum_2l+1)        l < 8 (Q6_K: off -32)
//! acc[l] = fma(d_a * d, isum[l], acc[l])                                every lane
//! acc[l] = fma(-(d_a * dmin), min_2l * bsum_2l + min_2l+1 * bsum_2l+1, acc[l])   l < 8
//! ```
//!
//! the mins step only for Q4_K/Q5_K (AVX-512 skips it for a row whose dmin is 0), and at the
//! end the lanes are summed by halving (`acc[l] + acc[l + lanes/2]`, ...), as
//! `_mm512_reduce_add_ps` and AVX2's `hsum_f32` do.

use crate::kernels::blocks::f16_to_f32_at;
use crate::kernels::packed::kquant::{scale_at, QH_AT, QK_K};
use crate::kernels::packed::{PanelLayout, PANEL};
use crate::kernels::DType;

/// Bytes of a Q8_K block: f32 d, 256 i8 quants, 16 i16 group sums.
const Q8K_BYTES: usize = 292;

/// Unsigned value `v` (0..256) of row `r` in the block whose quants start at `q`.
fn value(dt: DType, q: &[u8], r: usize, v: usize) -> i32 {
    let at = |idx: usize, base: usize| q[base + idx / 4 * 64 + 4 * r + idx % 4];
    let nibbles = |idx: usize, high: bool| {
        let b = at(idx, 0);
        (if high { b >> 4 } else { b & 0xF }) as i32
    };
    match dt {
        DType::Q4_K | DType::Q5_K => {
            let lo = nibbles(32 * (v / 64) + v % 32, (v % 64) >= 32);
            if dt == DType::Q4_K {
                lo
            } else {
                lo | ((((at(v % 32, QH_AT) >> (v / 32)) & 1) as i32) << 4)
            }
        }
        DType::Q6_K => {
            let (h, l, qt) = (v / 128, v % 32, (v % 128) / 32);
            let lo = nibbles(64 * h + 32 * (qt % 2) + l, qt >= 2);
            lo | ((((at(32 * h + l, QH_AT) >> (2 * qt)) & 3) as i32) << 4)
        }
        _ => unreachable!("not a K-quant"),
    }
}

/// Scale and min of 16-value group `g` of row `r` (`sc` = the block's scale area).
fn group(dt: DType, sc: &[u8], r: usize, g: usize) -> (i32, i32) {
    if dt == DType::Q6_K {
        (sc[scale_at::SC_Q6 + 16 * g + r] as i8 as i32, 0)
    } else {
        let j = g / 2;
        (
            sc[scale_at::SC_K4 + 16 * j + r] as i32,
            sc[scale_at::MIN_K4 + 16 * j + r] as i32,
        )
    }
}

/// One output: row `r` of `panel` times the Q8_K activation row `a`.
fn dot(l: &PanelLayout, lanes: usize, panel: &[u8], r: usize, a: &[u8]) -> f32 {
    let dt = l.dtype;
    let off = if dt == DType::Q6_K { -32 } else { 0 };
    let mut acc = [0f32; 16];
    for b in 0..l.nb {
        let y = &a[b * Q8K_BYTES..(b + 1) * Q8K_BYTES];
        let dy = f32::from_le_bytes(y[0..4].try_into().expect("4 bytes"));
        let qa = |v: usize| y[4 + v] as i8 as i32;
        let bs = |g: usize| i16::from_le_bytes([y[260 + 2 * g], y[261 + 2 * g]]) as i32;
        let q = &panel[b * l.quant_bytes..(b + 1) * l.quant_bytes];
        let sc = &panel[l.scales_at(b)..l.scales_at(b) + l.scale_bytes];
        let mut isum = [0i32; 16];
        for u in 0..QK_K / 4 {
            let s: i32 = (4 * u..4 * u + 4).map(|v| value(dt, q, r, v) * qa(v)).sum();
            isum[u % lanes] += group(dt, sc, r, u / 4).0 * s;
        }
        for (i, is) in isum.iter_mut().enumerate().take(8) {
            *is += off * (group(dt, sc, r, 2 * i).0 * bs(2 * i))
                + off * (group(dt, sc, r, 2 * i + 1).0 * bs(2 * i + 1));
        }
        let d = f16_to_f32_at(sc, scale_at::D + 2 * r);
        for (a, &is) in acc.iter_mut().zip(&isum).take(lanes) {
            *a = (dy * d).mul_add(is as f32, *a);
        }
        if dt != DType::Q6_K {
            let dmin = f16_to_f32_at(sc, scale_at::DMIN + 2 * r);
            if lanes == 8 || dmin != 0.0 {
                for (i, a) in acc.iter_mut().enumerate().take(8) {
                    let m = group(dt, sc, r, 2 * i).1 * bs(2 * i)
                        + group(dt, sc, r, 2 * i + 1).1 * bs(2 * i + 1);
                    *a = (-(dy * dmin)).mul_add(m as f32, *a);
                }
            }
        }
    }
    let mut n = lanes;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            acc[i] += acc[i + n];
        }
    }
    acc[0]
}

/// K-quant panel GEMM, scalar: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, in the float order of the ISA whose row kernels keep `lanes`
/// accumulators (16: AVX-512, 8: AVX2). `packed` holds the 64-byte aligned panels of rows
/// `0..n_rows` of `dtype` (Q4_K, Q5_K or Q6_K), `a` Q8_K rows. Panics on lengths that don't
/// fit (a caller bug), a dtype without a K panel layout, or other `lanes`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed_k(
    dtype: DType,
    lanes: usize,
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    assert!(lanes == 8 || lanes == 16, "lanes: {lanes}");
    let l = PanelLayout::new(dtype, k).expect("dtype with a panel layout");
    assert!(
        crate::kernels::packed::kquant::is_kquant(dtype),
        "{dtype} is no K-quant"
    );
    let ar = l.check_gemm(packed, n_rows, a.len(), n_tok, out.len(), out_stride);
    for t in 0..n_tok {
        let at = &a[t * ar..(t + 1) * ar];
        for r in 0..n_rows {
            let panel = &packed[r / PANEL * l.panel_bytes..][..l.panel_bytes];
            out[t * out_stride + r] = dot(&l, lanes, panel, r % PANEL, at);
        }
    }
}
