//! Scalar twin of the K-quant panel GEMMs (`x86/avx512/packed_k.rs`, `x86/avx2/packed_k.rs`,
//! `aarch64/neon/packed_k.rs`), read from the panel bytes of `packed/kquant.rs`.
//!
//! Every ISA computes the same bits, in the order of llama.cpp's repacked K-quant GEMV and GEMM
//! (`ggml_gemv_q4_K_8x8_q8_K`, `ggml_gemm_q4_K_8x8_q8_K`): per output, two f32 sums over the
//! 256-value blocks `b`,
//!
//! ```text
//! isum_b = sum_g scale_g * sum_{v in g} w_v * q_v   (+ Q6_K: -32 * sum_g scale_g * bsum_g)
//! msum_b = sum_j min_j * (bsum_2j + bsum_2j+1)       (Q4_K / Q5_K: the 8 sub-blocks' mins)
//! A = fma(d_a * d, isum_b, A)          M = fma(d_a * dmin, msum_b, M)       block after block
//! out = A - M
//! ```
//!
//! Q4_K steps per pair of sub-blocks instead of per block (`isum_b,j`, `msum_b,j` over
//! sub-blocks 2j and 2j+1, four fmas each per block): llama.cpp's repacked GEMM
//! (`ggml_gemm_q4_K_8x8_q8_K`, the path its prompt batches take, 4 rows at a time) adds each
//! 64-value step into the float sums, while its single-row GEMV sums the block first.
//!
//! Q6_K (not repacked by llama.cpp on x86) follows its prompt path instead, the tiled K-quant
//! matmul (`ggml-cpu/tiled`, taken for batches of 8 rows and more): `A = fma(f32(isum_b) * d,
//! d_a, A)`, `out = A` (its `buf += result * d1` contracted to an fma by the compiler, as the
//! reference binary shows). Its single-row `ggml_vec_dot_q6_K_q8_K` keeps eight lane sums
//! instead: kiln gives a token the same result in any batch, so it follows one of the two, the
//! one the prompt rows take.
//!
//! `w` the unsigned quants (Q6_K's offset left out), `q` the Q8_K quants, `g` a sub-block (32
//! values for Q4_K/Q5_K, 16 for Q6_K). The integer sums are exact in i32 (at most
//! 256 * 63 * 128 * 128 in magnitude), so SIMD kernels may form them in any order; only the
//! float steps above are fixed. One accumulator per output, no lanes: the same on every ISA.

use crate::kernels::blocks::f16_to_f32_at;
use crate::kernels::packed::kquant::{scale_at, QH_AT};
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
            // Chunks A, B, C of step 8h + l / 4 (packed/kquant.rs).
            let (h, qt, l) = (v / 128, (v % 128) / 32, v % 32);
            let abc = |c: usize| q[64 * (3 * (8 * h + l / 4) + c) + 4 * r + l % 4] as i32;
            let (a, b, c) = (abc(0), abc(1), abc(2));
            match qt {
                0 => a & 0x3F,
                1 => b & 0x3F,
                2 => c & 0x3F,
                _ => b >> 6 | (c >> 6) << 2 | (a >> 6) << 4,
            }
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
fn dot(l: &PanelLayout, panel: &[u8], r: usize, a: &[u8]) -> f32 {
    let dt = l.dtype;
    let (mut acc, mut accm) = (0f32, 0f32);
    for b in 0..l.nb {
        let y = &a[b * Q8K_BYTES..(b + 1) * Q8K_BYTES];
        let dy = f32::from_le_bytes(y[0..4].try_into().expect("4 bytes"));
        let qa = |v: usize| y[4 + v] as i8 as i32;
        let bs = |g: usize| i16::from_le_bytes([y[260 + 2 * g], y[261 + 2 * g]]) as i32;
        let q = &panel[b * l.quant_bytes..(b + 1) * l.quant_bytes];
        let sc = &panel[l.scales_at(b)..l.scales_at(b) + l.scale_bytes];
        let sum = |g: usize| -> i32 {
            (16 * g..16 * g + 16)
                .map(|v| value(dt, q, r, v) * qa(v))
                .sum()
        };
        let d = f16_to_f32_at(sc, scale_at::D + 2 * r);
        if dt == DType::Q6_K {
            let mut isum = 0i32;
            for g in 0..16 {
                let (scale, _) = group(dt, sc, r, g);
                isum += scale * (sum(g) - 32 * bs(g));
            }
            acc = (isum as f32 * d).mul_add(dy, acc);
            continue;
        }
        let dmin = f16_to_f32_at(sc, scale_at::DMIN + 2 * r);
        // Q4_K: one step per pair of sub-blocks (groups 4j..4j+4); Q5_K: one per block.
        let steps = if dt == DType::Q4_K { 4 } else { 1 };
        for j in 0..steps {
            let (mut isum, mut msum) = (0i32, 0i32);
            for g in (16 / steps * j)..(16 / steps * (j + 1)) {
                let (scale, min) = group(dt, sc, r, g);
                isum += scale * sum(g);
                msum += min * bs(g);
            }
            acc = (dy * d).mul_add(isum as f32, acc);
            accm = (dy * dmin).mul_add(msum as f32, accm);
        }
    }
    if dt == DType::Q6_K {
        acc
    } else {
        acc - accm
    }
}

/// K-quant panel GEMM, scalar: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, in the float order of the module docs. `packed` holds the
/// 64-byte aligned panels of rows `0..n_rows` of `dtype` (Q4_K, Q5_K or Q6_K), `a` Q8_K rows.
/// Panics on lengths that don't fit (a caller bug) or a dtype without a K panel layout.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed_k(
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
    assert!(
        crate::kernels::packed::kquant::is_kquant(dtype),
        "{dtype} is no K-quant"
    );
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
