//! The "panel" layout: weight rows repacked once at load so a SIMD GEMM reads 16 rows side by
//! side with aligned 64-byte loads (llama.cpp's interleaved repacking, kiln's own layout).
//!
//! Rows are grouped in panels of [`PANEL`] rows. A panel of `nb = k / 32` blocks is:
//!
//! ```text
//! quants: nb x QB bytes   block b, 64-byte chunk j: bytes 4r..4r+4 = dword j of row r's quants
//! scales: nb x SB bytes   block b: 16 f16 d (row r at 2r), then for Q4_1 16 f16 m
//! padding to a multiple of 64 bytes
//! ```
//!
//! * Q4_0 / Q4_1: QB = 256 (4 chunks of the 16 nibble bytes; low nibbles of dword j are
//!   values 4j..4j+4, high nibbles values 16+4j..16+4j+4), SB = 32 / 64.
//! * Q8_0: QB = 512 (8 chunks of the 32 quant bytes, each byte xor 0x80, i.e. q + 128 as an
//!   unsigned byte, ready for `vpdpbusd`), SB = 32.
//! * Q5_0 / Q5_1: QB = 320 (the Q4 nibble chunks, then one chunk of each row's 32-bit `qh`
//!   at bytes 4r..4r+4), SB = 32 / 64 (d, then for Q5_1 m).
//!
//! The scales sit after all quants of the panel (not after each block) so every quant chunk is
//! 64-byte aligned while the scales stay f16: the packed copy is exactly as big as the GGUF
//! rows (plus the padding), which matters because decode streams all weights once per token.
//! Rows past `n_rows` in the last panel repeat the last row; GEMMs mask those outputs.
//!
//! The K-quants (Q4_K, Q5_K, Q6_K: 256-value blocks, Q8_K activations) have their own
//! quant and scale areas in the same frame: see `packed/kquant.rs`.

use super::DType;

pub(crate) mod driver;
pub mod kquant;
pub mod lines;
/// The block-sum tiles' activation terms (only the x86 tiles read a table).
#[cfg(target_arch = "x86_64")]
pub(crate) mod terms;

pub use lines::Lines;

/// Rows per panel (one zmm of i32 lanes).
pub const PANEL: usize = 16;
/// Values per block of every packed type.
const QK: usize = 32;
/// Longest row with a panel layout: the panel GEMMs keep per-(token, block) activation terms
/// in fixed stack tables of 4096 blocks.
pub const MAX_K: usize = 32 * 4096;

/// One 64-byte aligned chunk of packed data (the unit of [`Lines`]).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Line(pub [u8; 64]);

/// Sizes of the panel layout of one dtype and row length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PanelLayout {
    pub dtype: DType,
    /// Blocks per row (`k / 32`; `k / 256` for the K-quants, see `packed/kquant.rs`).
    pub nb: usize,
    /// Quant bytes per block and panel (256 or 512).
    pub quant_bytes: usize,
    /// Scale bytes per block and panel (32, or 64 with the minima).
    pub scale_bytes: usize,
    /// Bytes of one whole panel, a multiple of 64.
    pub panel_bytes: usize,
}

impl PanelLayout {
    /// The layout of `k`-value rows of `dtype`, or `None` if `dtype` has no panel layout
    /// (only Q4_0, Q4_1 and Q8_0 do) or `k` is not a positive multiple of 32 up to [`MAX_K`].
    pub fn new(dtype: DType, k: usize) -> Option<PanelLayout> {
        let (quant_bytes, scale_bytes) = match dtype {
            DType::Q4_0 => (256, 32),
            DType::Q4_1 => (256, 64),
            DType::Q8_0 => (512, 32),
            DType::Q5_0 => (320, 32),
            DType::Q5_1 => (320, 64),
            _ => return kquant::layout(dtype, k),
        };
        if k == 0 || !k.is_multiple_of(QK) || k > MAX_K {
            return None;
        }
        let nb = k / QK;
        let panel_bytes = (nb * (quant_bytes + scale_bytes)).div_ceil(64) * 64;
        Some(PanelLayout {
            dtype,
            nb,
            quant_bytes,
            scale_bytes,
            panel_bytes,
        })
    }

    /// Byte offset of block `b`'s scales inside a panel.
    pub fn scales_at(&self, b: usize) -> usize {
        self.nb * self.quant_bytes + b * self.scale_bytes
    }

    /// Panels needed for `n_rows` rows.
    pub fn panels(n_rows: usize) -> usize {
        n_rows.div_ceil(PANEL)
    }

    /// Checks a packed GEMM call: `packed` must start 64-byte aligned and hold the panels of
    /// `n_rows` rows, `a` `n_tok` activation rows, `out` every cell. Returns the activation
    /// row bytes. Panics on a violation (a caller bug, as with `check_gemm`).
    pub fn check_gemm(
        &self,
        packed: &[u8],
        n_rows: usize,
        a: usize,
        n_tok: usize,
        out: usize,
        out_stride: usize,
    ) -> usize {
        let (adt, qk) = match self.dtype {
            DType::Q4_1 | DType::Q5_1 => (DType::Q8_1, QK),
            DType::Q4_K | DType::Q5_K | DType::Q6_K => (DType::Q8_K, kquant::QK_K),
            _ => (DType::Q8_0, QK),
        };
        let ar = super::shape::row_bytes(adt, self.nb * qk);
        if n_rows == 0 || n_tok == 0 {
            return ar;
        }
        let need = Self::panels(n_rows) * self.panel_bytes;
        assert!(
            packed.len() >= need,
            "packed gemm: {n_rows} rows need {need} bytes, got {}",
            packed.len()
        );
        assert!(
            (packed.as_ptr() as usize).is_multiple_of(64),
            "packed gemm: panels must be 64-byte aligned"
        );
        assert!(a >= n_tok * ar, "packed gemm: activations too short");
        assert!(
            n_tok == 1 || out_stride >= n_rows,
            "packed gemm: out_stride {out_stride} < n_rows {n_rows}"
        );
        assert!(
            out >= (n_tok - 1) * out_stride + n_rows,
            "packed gemm: out too short"
        );
        ar
    }
}

/// Weights repacked into panels ([`PanelLayout`]), 64-byte aligned.
#[derive(Clone)]
pub struct PackedWeights {
    pub layout: PanelLayout,
    pub n_rows: usize,
    lines: Lines,
}

impl PackedWeights {
    /// All panels as bytes (panel p at `p * layout.panel_bytes`).
    pub fn bytes(&self) -> &[u8] {
        self.lines.bytes()
    }

    /// The panels from the one holding row `r0` (a multiple of [`PANEL`]) on.
    pub fn from_row(&self, r0: usize) -> &[u8] {
        invariant!(r0.is_multiple_of(PANEL));
        &self.bytes()[r0 / PANEL * self.layout.panel_bytes..]
    }
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeights")
            .field("layout", &self.layout)
            .field("n_rows", &self.n_rows)
            .finish_non_exhaustive()
    }
}

/// Repacks `n_rows` GGUF rows of `k` values (`rows`, row after row) into panels, or `None` if
/// the dtype/`k` has no panel layout or `rows` is shorter than `n_rows` rows.
pub fn pack(dtype: DType, k: usize, rows: &[u8], n_rows: usize) -> Option<PackedWeights> {
    let layout = PanelLayout::new(dtype, k)?;
    if kquant::is_kquant(dtype) {
        return kquant::pack(&layout, rows, n_rows).map(|lines| PackedWeights {
            layout,
            n_rows,
            lines,
        });
    }
    let bb = dtype.bytes_for(QK as u64)? as usize;
    let rb = layout.nb * bb;
    if n_rows == 0 || rows.len() < n_rows * rb {
        return None;
    }
    let n_panels = PanelLayout::panels(n_rows);
    let mut lines = Lines::with_capacity(n_panels * layout.panel_bytes / 64);
    let mut buf = vec![0u8; layout.panel_bytes];
    let has_min = matches!(dtype, DType::Q4_1 | DType::Q5_1);
    // Q5 blocks: f16 d, (f16 m,) u32 qh, 16 nibble bytes.
    let qh_at = matches!(dtype, DType::Q5_0 | DType::Q5_1).then_some(if has_min { 4 } else { 2 });
    // Quant bytes start after the f16 d (and f16 m for Q4_1/Q5_1, and qh for Q5).
    let qoff = if has_min { 4 } else { 2 } + if qh_at.is_some() { 4 } else { 0 };
    let flip = if dtype == DType::Q8_0 { 0x80 } else { 0 };
    let dwords = if qh_at.is_some() {
        4
    } else {
        layout.quant_bytes / 64
    };
    for p in 0..n_panels {
        for r in 0..PANEL {
            let row = (p * PANEL + r).min(n_rows - 1);
            for b in 0..layout.nb {
                let blk = &rows[row * rb + b * bb..][..bb];
                for j in 0..dwords {
                    for i in 0..4 {
                        buf[b * layout.quant_bytes + j * 64 + 4 * r + i] =
                            blk[qoff + 4 * j + i] ^ flip;
                    }
                }
                if let Some(h) = qh_at {
                    let at = b * layout.quant_bytes + 256 + 4 * r;
                    buf[at..at + 4].copy_from_slice(&blk[h..h + 4]);
                }
                let s = layout.scales_at(b);
                buf[s + 2 * r..s + 2 * r + 2].copy_from_slice(&blk[0..2]);
                if has_min {
                    buf[s + 32 + 2 * r..s + 32 + 2 * r + 2].copy_from_slice(&blk[2..4]);
                }
            }
        }
        lines.push(&buf);
    }
    Some(PackedWeights {
        layout,
        n_rows,
        lines,
    })
}
