//! Panel layout of the K-quants (Q4_K, Q5_K, Q6_K): 256-value blocks, Q8_K activations.
//!
//! Same frame as the 32-value types ([`super::PanelLayout`]: 16 rows per panel, all quants
//! of the panel, then all scales, padding to 64 bytes). Per block and panel:
//!
//! ```text
//! quants  64-byte chunk c: bytes 4r..4r+4 = dword c of row r's quant arrays (GGUF bytes as is)
//!   Q4_K: chunks 0..32 = qs                      (2048 bytes)
//!   Q5_K: chunks 0..32 = qs, 32..40 = qh          (2560 bytes)
//!   Q6_K: chunks 3s, 3s+1, 3s+2 = A, B, C of step s = 8h + j (h < 2, j < 8)  (3072 bytes)
//! scales  (pre-decoded, row r at byte r of each 16-byte line)
//!   Q4_K / Q5_K: 16 f16 d | 16 f16 dmin | 8 lines of the 6-bit scales | 8 lines of mins (320)
//!   Q6_K:        16 f16 d | 16 lines of the signed 8-bit scales                        (288)
//! ```
//!
//! "Dword u" of a block (values 4u..4u+4) is where a kernel's integer lane structure is
//! defined (see `scalar/packed_k.rs`). Q4_K/Q5_K chunks keep GGUF's bit planes; Q6_K's are
//! re-cut so each step's four values cost few operations to unpack (no bigger than GGUF's
//! `ql`/`qh`): byte `4r + i` of step `s = 8h + j`'s chunks holds row r's 6-bit values
//! `v_t` = value `128h + 32t + 4j + i` (t < 4) as
//!
//! ```text
//! A = v0 | (v3 >> 4) << 6      B = v1 | (v3 & 3) << 6      C = v2 | (v3 >> 2 & 3) << 6
//! ```
//!
//! so `v0..v2` are one mask each and `v3 = B >> 6 | (C >> 6) << 2 | (A >> 6) << 4`.
//! Everything else is the GGUF bytes as is (Q4_K: +64 bytes of decoded scales per block-panel).

use super::driver::GroupTerms;
use super::{PanelLayout, MAX_K, PANEL};
use crate::kernels::blocks::kquants::scales_mins_k4;
use crate::kernels::DType;

/// Values per K-quant block.
pub const QK_K: usize = 256;

/// Byte offsets inside a block's scale area.
pub mod scale_at {
    /// 16 f16 super-block scales.
    pub const D: usize = 0;
    /// 16 f16 super-block mins (Q4_K / Q5_K).
    pub const DMIN: usize = 32;
    /// Q4_K / Q5_K: 8 lines of 16 sub-block scales (line j = sub-block j, byte r = row r).
    pub const SC_K4: usize = 64;
    /// Q4_K / Q5_K: 8 lines of 16 sub-block mins.
    pub const MIN_K4: usize = 192;
    /// Q6_K: 16 lines of 16 signed group scales (line g = 16-value group g).
    pub const SC_Q6: usize = 32;
}

/// Byte offset of the qh chunks inside a block's quants (Q5_K).
pub const QH_AT: usize = 32 * 64;

/// Whether `dtype` uses this layout.
pub fn is_kquant(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_K | DType::Q5_K | DType::Q6_K)
}

/// The layout of `k`-value rows, `None` unless `dtype` is Q4_K/Q5_K/Q6_K and `k` a positive
/// multiple of 256 up to [`MAX_K`].
pub(super) fn layout(dtype: DType, k: usize) -> Option<PanelLayout> {
    let (quant_bytes, scale_bytes) = match dtype {
        DType::Q4_K => (2048, 320),
        DType::Q5_K => (2560, 320),
        DType::Q6_K => (3072, 288),
        _ => return None,
    };
    if k == 0 || !k.is_multiple_of(QK_K) || k > MAX_K {
        return None;
    }
    let nb = k / QK_K;
    Some(PanelLayout {
        dtype,
        nb,
        quant_bytes,
        scale_bytes,
        panel_bytes: (nb * (quant_bytes + scale_bytes)).div_ceil(64) * 64,
    })
}

/// Where a GGUF block's quant arrays start and how many dwords each has, in chunk order
/// (Q4_K, Q5_K).
fn quant_arrays(dtype: DType) -> &'static [(usize, usize)] {
    // (byte offset in the GGUF block, dwords); offsets from ggml-common.h's block structs.
    match dtype {
        DType::Q4_K => &[(16, 32)],
        DType::Q5_K => &[(48, 32), (16, 8)],
        _ => unreachable!("not a 4/5-bit K-quant"),
    }
}

/// Writes row `r`'s bytes of the Q6_K chunks A, B, C (module docs) of GGUF block `blk`
/// (`ql[128]`, `qh[64]`, ...) into the block's quants `q`.
fn pack_q6_quants(blk: &[u8], q: &mut [u8], r: usize) {
    let (ql, qh) = (&blk[..128], &blk[128..192]);
    for h in 0..2 {
        for l in 0..32 {
            let (lo, hi, bits) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
            let v = [
                lo & 0xF | (bits & 3) << 4,
                hi & 0xF | (bits >> 2 & 3) << 4,
                lo >> 4 | (bits >> 4 & 3) << 4,
                hi >> 4 | (bits >> 6) << 4,
            ];
            let s = 8 * h + l / 4;
            let at = |c: usize| 64 * (3 * s + c) + 4 * r + l % 4;
            q[at(0)] = v[0] | (v[3] >> 4) << 6;
            q[at(1)] = v[1] | (v[3] & 3) << 6;
            q[at(2)] = v[2] | (v[3] >> 2 & 3) << 6;
        }
    }
}

/// Repacks `n_rows` GGUF rows into the panels of `l` (a K-quant layout), or `None` if `rows`
/// is shorter than `n_rows` rows.
pub(super) fn pack(l: &PanelLayout, rows: &[u8], n_rows: usize) -> Option<super::Lines> {
    let bb = l.dtype.block_bytes();
    let rb = l.nb * bb;
    if n_rows == 0 || rows.len() < n_rows * rb {
        return None;
    }
    let n_panels = PanelLayout::panels(n_rows);
    let mut lines = super::Lines::with_capacity(n_panels * l.panel_bytes / 64);
    let mut buf = vec![0u8; l.panel_bytes];
    for p in 0..n_panels {
        for r in 0..PANEL {
            let row = (p * PANEL + r).min(n_rows - 1);
            for b in 0..l.nb {
                let blk = &rows[row * rb + b * bb..][..bb];
                let q = &mut buf[b * l.quant_bytes..(b + 1) * l.quant_bytes];
                if l.dtype == DType::Q6_K {
                    pack_q6_quants(blk, q, r);
                } else {
                    let mut c = 0;
                    for &(at, dwords) in quant_arrays(l.dtype) {
                        for j in 0..dwords {
                            q[c * 64 + 4 * r..c * 64 + 4 * r + 4]
                                .copy_from_slice(&blk[at + 4 * j..at + 4 * j + 4]);
                            c += 1;
                        }
                    }
                }
                let s = l.scales_at(b);
                let sc = &mut buf[s..s + l.scale_bytes];
                if l.dtype == DType::Q6_K {
                    // block_q6_K: ql[128], qh[64], scales[16] (i8), d (f16).
                    sc[scale_at::D + 2 * r..][..2].copy_from_slice(&blk[208..210]);
                    for g in 0..16 {
                        sc[scale_at::SC_Q6 + 16 * g + r] = blk[192 + g];
                    }
                } else {
                    // block_q4_K / block_q5_K: d, dmin (f16), scales[12], then the quants.
                    sc[scale_at::D + 2 * r..][..2].copy_from_slice(&blk[0..2]);
                    sc[scale_at::DMIN + 2 * r..][..2].copy_from_slice(&blk[2..4]);
                    let (s6, m6) = scales_mins_k4(blk[4..16].try_into().expect("12 bytes"));
                    for j in 0..8 {
                        sc[scale_at::SC_K4 + 16 * j + r] = s6[j];
                        sc[scale_at::MIN_K4 + 16 * j + r] = m6[j];
                    }
                }
            }
        }
        lines.push(&buf);
    }
    Some(lines)
}

/// Bytes of a Q8_K block: f32 d, 256 i8 quants at 4, 16 i16 group sums at [`Q8K_BSUMS`].
pub const Q8K_BYTES: usize = 292;
/// Where a Q8_K block's group sums start.
pub const Q8K_BSUMS: usize = 4 + QK_K;

/// Per (token, block) activation terms of the K-quant panel GEMMs, computed once per token
/// group ([`crate::kernels::packed::driver`]) and shared by all panels: the Q8_K scale `dy` and group-sum pairs
/// as i16 pairs (`lo | hi << 16`, what `vpmaddwd`/`vpdpwssd` take): Q4_K/Q5_K pair `i < 4` =
/// the 32-value sums of sub-blocks `2i, 2i + 1`; Q6_K pair `m < 8` = the 16-value sums of
/// groups `2m, 2m + 1`.
pub struct ActTable<const N: usize> {
    pub dy: [f32; N],
    pub pair: [[i32; 8]; N],
    dtype: DType,
}

impl<const N: usize> ActTable<N> {
    /// An empty table for the activations of `dtype` weights (Q4_K, Q5_K or Q6_K).
    pub fn new(dtype: DType) -> Self {
        ActTable {
            dy: [0.0; N],
            pair: [[0; 8]; N],
            dtype,
        }
    }

    /// Fills entries `t * nb + b` for the `n` Q8_K rows of `a` (`ar` bytes apart, `nb` blocks
    /// each). Panics if `n * nb > N` or `a` is short.
    pub fn fill_rows(&mut self, a: &[u8], ar: usize, n: usize, nb: usize) {
        assert!(n * nb <= N, "activation table of {N} entries");
        for t in 0..n {
            for b in 0..nb {
                let y = &a[t * ar + b * Q8K_BYTES..][..Q8K_BYTES];
                let bs = |g: usize| {
                    i16::from_le_bytes([y[Q8K_BSUMS + 2 * g], y[Q8K_BSUMS + 2 * g + 1]]) as i32
                };
                let e = t * nb + b;
                self.dy[e] = f32::from_le_bytes(y[0..4].try_into().expect("4 bytes"));
                let pack = |lo: i32, hi: i32| (lo & 0xFFFF) | (hi << 16);
                if self.dtype == DType::Q6_K {
                    for m in 0..8 {
                        self.pair[e][m] = pack(bs(2 * m), bs(2 * m + 1));
                    }
                } else {
                    let s = |j: usize| bs(2 * j) + bs(2 * j + 1);
                    for i in 0..4 {
                        self.pair[e][i] = pack(s(2 * i), s(2 * i + 1));
                    }
                }
            }
        }
    }
}

impl<const N: usize> GroupTerms for ActTable<N> {
    #[inline(always)]
    fn capacity(&self, nb: usize) -> usize {
        N / nb
    }

    /// # Safety
    /// [`GroupTerms::fill`]'s contract.
    #[inline(always)]
    unsafe fn fill(&mut self, a: *const u8, ar: usize, n: usize, nb: usize) {
        // SAFETY: `n` rows of `ar` bytes are readable at `a` (caller contract).
        let rows = unsafe { std::slice::from_raw_parts(a, n * ar) };
        self.fill_rows(rows, ar, n, nb);
    }
}
