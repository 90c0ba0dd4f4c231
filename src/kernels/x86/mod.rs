//! x86-64 SIMD kernels: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, VNNI).

pub mod avx2;
pub mod avx512;
mod kquant_tiles;
mod legacy_tiles;
mod nonlinear_tiles;

use crate::kernels::packed::PanelLayout;
use crate::kernels::prefetch;

/// Starts the prefetch of the K-quant block [`PF_BLOCKS`] ahead of block `b` of the panel at
/// `panel` in the order a tile streams them (past the panel's last block: the next panel's
/// first blocks): its scale lines now, and returns where its quants are, for the block kernels
/// to prefetch one line per quant chunk they load ([`prefetch_line`]). The AVX-512 and AVX2
/// decode-sized tiles call it once per block. The lines go to L2 (`kernels::prefetch`).
///
/// Spread over the block's work, the prefetches keep the memory stream going while the block
/// unpacks; issued all at once at the block's start (~50 lines) they queue up behind the
/// core's miss buffers and stall the loads behind them. Single-threaded, Llama-3.2-1B
/// layers from memory (`examples/gemv_bw`, 2026-11-26, L1 prefetches): Q6_K 21.6 GB/s with
/// the burst, 28.5 spread, against a 35 GB/s plain read.
/// The target follows the stream across panels: a panel's quants are followed by its scales,
/// so "N blocks ahead" in address order would land in the scale area already read near a
/// panel's end, and the next panel's first blocks would go unfetched: following the stream
/// took Q4_K / Q5_K / Q6_K decode from 25.6 / 25.0 / 28.2 to 29.8 / 31.3 / 31.3 GB/s (AVX-512;
/// AVX2 22.3 / 18.7 / 23.5 to 25.1 / 26.1 / 29.4) against a ~33 GB/s plain read (same process,
/// one thread, 2026-11-26).
#[inline(always)]
pub(crate) fn prefetch_k_ahead(l: &PanelLayout, panel: *const u8, b: usize) -> *const u8 {
    let v = b + PF_BLOCKS;
    let (panel, v) = if v < l.nb {
        (panel, v)
    } else if v < 2 * l.nb {
        (panel.wrapping_add(l.panel_bytes), v - l.nb)
    } else {
        (panel.wrapping_add(v / l.nb * l.panel_bytes), v % l.nb)
    };
    prefetch::lines_to_l2(panel.wrapping_add(l.scales_at(v)), l.scale_bytes);
    panel.wrapping_add(v * l.quant_bytes)
}

/// Prefetches line `c` of the block quants at `pf` (from [`prefetch_k_ahead`]); nothing when
/// `pf` is null (tiles of many tokens, whose blocks stay in cache while the tokens pass).
#[inline(always)]
pub(crate) fn prefetch_line(pf: *const u8, c: usize) {
    if !pf.is_null() {
        prefetch::to_l2(pf.wrapping_add(64 * c));
    }
}

/// Prefetches the quants of the 32-value panel block [`PF_BLOCKS_32`] blocks ahead of the block
/// quants at `q` (`quant_bytes` per block; past a panel's last block the address falls in the
/// panel's scales and the next panel's first blocks). The AVX-512 and AVX2 decode-sized tiles
/// of Q4_0 .. Q8_0 call it once per block; prefetches never fault, so no bounds are needed.
#[inline(always)]
pub(crate) fn prefetch_ahead(q: *const u8, quant_bytes: usize) {
    prefetch::lines_to_l2(q.wrapping_add(PF_BLOCKS_32 * quant_bytes), quant_bytes);
}

/// How many blocks ahead the 32-value kinds' decode-sized tiles prefetch (32: 8-17 KiB). With
/// L2 prefetches, SmolLM2-135M decode on Zen 4 (2 threads, tg128, 2026-11-27): Q4_1 184-206 ->
/// 230-238 tok/s from 8 blocks ahead to 24-48, Q8_0 141 -> 188-191 (16 to 32 alike).
const PF_BLOCKS_32: usize = 32;

/// How many blocks ahead decode-sized K-quant tiles prefetch (4: 9.5-13.5 KiB of the stream).
/// With L2 prefetches, 3 to 16 blocks ran alike single-threaded; in the engine (Zen 4, 2
/// threads, 2026-11-27) Llama-3.2-1B Q4_K_M tg64 39.4 -> 45.3-46.4 tok/s (2 blocks ahead into L1
/// before; 8 ahead: 43.3-44.4), SmolLM2-135M Q4_K_M tg128 181-189 -> 231-248.
const PF_BLOCKS: usize = 4;
