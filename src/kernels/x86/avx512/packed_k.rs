//! AVX-512 VNNI panel GEMMs of the K-quants (Q4_K, Q5_K, Q6_K x Q8_K) over load-time repacked
//! weights (`packed/kquant.rs`); twins of `scalar/packed_k.rs` with `lanes = 16`, and so
//! bit-identical to this ISA's GGUF-row `gemm` (`kquants.rs`).
//!
//! That row kernel keeps one zmm of 16 f32 partial sums per output, lane `l` fed by the
//! dwords `u` (4 values each) with `u % 16 == l`. Here lane `r` of a register is row `r` of
//! the panel, so the same sums are 16 registers `acc[l]` per token: a block's dword `u` is one
//! aligned load (plus nibble/bit-plane masking), one `vpdpbusd` against the broadcast
//! activation dword and one `vpdpwssd` by the per-row group scale into the integer lane
//! `u % 16`; each lane then gets the row kernel's `fma` (and masked `fnmadd` for the mins),
//! and the 16 registers are summed by the halving tree of `_mm512_reduce_add_ps`. No unpack
//! shuffles, no per-row horizontal sums: that is the gain over the row kernel.

use std::arch::x86_64::*;

use crate::kernels::packed::kquant::{scale_at, QH_AT};
use crate::kernels::packed::{PanelLayout, PANEL};
use crate::kernels::DType;

/// Kernel kinds (const generic): Q4_K, Q5_K, Q6_K.
pub(crate) const Q4K: u8 = 0;
pub(crate) const Q5K: u8 = 1;
pub(crate) const Q6K: u8 = 2;

fn dtype(t: u8) -> DType {
    match t {
        Q4K => DType::Q4_K,
        Q5K => DType::Q5_K,
        _ => DType::Q6_K,
    }
}

/// First qh chunk of a block (Q5_K, Q6_K).
const QH: usize = QH_AT / 64;
/// Q8_K block: f32 d, 256 i8 quants at 4, 16 i16 group sums at 260.
const Q8K_BYTES: usize = 292;
/// Tokens whose activations stay in cache while a call's panels stream past (prefill).
const TOKEN_GROUP: usize = 64;
/// Tokens sharing one unpacked weight dword (their 16 accumulators each live on the stack).
const TT: usize = 4;

#[inline(always)]
fn mask(valid: usize) -> __mmask16 {
    if valid >= PANEL {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    }
}

/// Per-block weight terms shared by all tokens: group scales as i32 lanes (scale in the low
/// 16 bits, zero above, as `vpdpwssd` wants them), and per lane `m < 8` the min pair
/// (Q4_K/Q5_K) or scale pair (Q6_K) of groups `2m, 2m + 1` as two i16 for `vpmaddwd`.
struct BlockTerms {
    scale: [__m512i; 16],
    pair: [__m512i; 8],
    d: __m512,
    dmin: __m512,
    has_min: __mmask16,
}

/// # Safety
/// CPU features as enabled; `sc` is a block's scale area of kind `T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_terms<const T: u8>(sc: *const u8) -> BlockTerms {
    let line = |at: usize| {
        // SAFETY: every line read lies inside the block's scale area (caller contract).
        unsafe { _mm_loadu_si128(sc.add(at) as *const __m128i) }
    };
    let lo16 = _mm512_set1_epi32(0xFFFF);
    let mut t = BlockTerms {
        scale: [_mm512_setzero_si512(); 16],
        pair: [_mm512_setzero_si512(); 8],
        // SAFETY: d (and dmin) are 16 f16 inside the scale area.
        d: _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(sc.add(scale_at::D) as *const __m256i) }),
        dmin: _mm512_setzero_ps(),
        has_min: 0,
    };
    if T == Q6K {
        for g in 0..16 {
            let s = _mm512_cvtepi8_epi32(line(scale_at::SC_Q6 + 16 * g));
            t.scale[g] = _mm512_and_si512(s, lo16);
        }
        for m in 0..8 {
            t.pair[m] =
                _mm512_or_si512(t.scale[2 * m], _mm512_slli_epi32::<16>(t.scale[2 * m + 1]));
        }
    } else {
        for j in 0..8 {
            let s = _mm512_cvtepu8_epi32(line(scale_at::SC_K4 + 16 * j));
            t.scale[2 * j] = s;
            t.scale[2 * j + 1] = s;
            let m = _mm512_cvtepu8_epi32(line(scale_at::MIN_K4 + 16 * j));
            t.pair[j] = _mm512_or_si512(m, _mm512_slli_epi32::<16>(m));
        }
        // SAFETY: as for d.
        let dmin = unsafe { _mm256_loadu_si256(sc.add(scale_at::DMIN) as *const __m256i) };
        t.dmin = _mm512_cvtph_ps(dmin);
        // The row kernel skips a block's mins when dmin == 0 (NaN compares unequal).
        t.has_min = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(t.dmin, _mm512_setzero_ps());
    }
    t
}

/// Weight dword `u = m + 8i` of the block at `q` (16 rows), unsigned (offset left out).
///
/// # Safety
/// CPU features as enabled; `q` is a block's 64-byte aligned quants of kind `T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn weight<const T: u8>(q: *const u8, m: usize, i: usize) -> __m512i {
    // SAFETY: every chunk index below is inside the kind's quant area (see packed/kquant.rs).
    let chunk = |c: usize| unsafe { _mm512_load_si512(q.add(64 * c) as *const __m512i) };
    let nib = _mm512_set1_epi8(0x0F);
    let nibble = |x: __m512i, high: bool| {
        let x = if high { _mm512_srli_epi16::<4>(x) } else { x };
        _mm512_and_si512(x, nib)
    };
    if T == Q6K {
        // u = 32h + 8qt + m: ql byte 64h + 32(qt % 2) + 4m.., nibble qt / 2; qh byte 32h + 4m..
        let (h, qt) = (i / 4, i % 4);
        let lo = nibble(chunk(16 * h + 8 * (qt % 2) + m), qt >= 2);
        let hb = _mm512_srlv_epi16(chunk(QH + 8 * h + m), _mm512_set1_epi16(2 * qt as i16));
        let hb = _mm512_and_si512(hb, _mm512_set1_epi8(3));
        _mm512_or_si512(lo, _mm512_slli_epi16::<4>(hb))
    } else {
        // u = 16k + l, l = m + 8(i % 2): qs dword 8k + m, high nibbles for odd i.
        let lo = nibble(chunk(8 * (i / 2) + m), i % 2 == 1);
        if T == Q4K {
            return lo;
        }
        let hb = _mm512_srlv_epi16(chunk(QH + m), _mm512_set1_epi16(i as i16));
        let hb = _mm512_and_si512(hb, _mm512_set1_epi8(1));
        _mm512_or_si512(lo, _mm512_slli_epi16::<4>(hb))
    }
}

/// One panel x `N` tokens (`N <= TT`) over all blocks; token `t`'s Q8_K row at `a + t * ar`,
/// its outputs at `out + t * os` (`valid` of them).
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l` (kind `T`), the `N`
/// activation rows and output cells are in range.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const N: usize>(
    l: &PanelLayout,
    panel: *const u8,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); 16]; N];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes);
        // SAFETY: block b's scale area lies inside the panel.
        let bt = unsafe { block_terms::<T>(panel.add(l.scales_at(b))) };
        let mut dyd = [_mm512_setzero_ps(); N];
        let mut dym = [_mm512_setzero_ps(); N];
        for t in 0..N {
            // SAFETY: token t's block b starts with its f32 d.
            let dy = unsafe { (a.add(t * ar + b * Q8K_BYTES) as *const f32).read_unaligned() };
            dyd[t] = _mm512_mul_ps(_mm512_set1_ps(dy), bt.d);
            dym[t] = _mm512_mul_ps(_mm512_set1_ps(dy), bt.dmin);
        }
        for m in 0..8 {
            // isum[t][0] is lane m, isum[t][1] lane m + 8.
            let mut isum = [[_mm512_setzero_si512(); 2]; N];
            for i in 0..8 {
                // SAFETY: q is block b's aligned quants.
                let w = unsafe { weight::<T>(q, m, i) };
                let u = m + 8 * i;
                for t in 0..N {
                    let qa = a.wrapping_add(t * ar + b * Q8K_BYTES + 4 + 4 * u);
                    // SAFETY: dword u of token t's block b quants.
                    let x = _mm512_set1_epi32(unsafe { (qa as *const i32).read_unaligned() });
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
                    isum[t][i % 2] = _mm512_dpwssd_epi32(isum[t][i % 2], dot, bt.scale[u / 4]);
                }
            }
            for t in 0..N {
                let bsp = a.wrapping_add(t * ar + b * Q8K_BYTES + 260 + 4 * m);
                // SAFETY: group sums 2m, 2m + 1 of token t's block b.
                let bs = _mm512_set1_epi32(unsafe { (bsp as *const i32).read_unaligned() });
                let mut lo = isum[t][0];
                if T == Q6K {
                    let corr = _mm512_madd_epi16(bs, bt.pair[m]);
                    lo = _mm512_sub_epi32(lo, _mm512_slli_epi32::<5>(corr));
                }
                acc[t][m] = _mm512_fmadd_ps(dyd[t], _mm512_cvtepi32_ps(lo), acc[t][m]);
                acc[t][m + 8] =
                    _mm512_fmadd_ps(dyd[t], _mm512_cvtepi32_ps(isum[t][1]), acc[t][m + 8]);
                if T != Q6K {
                    let mins = _mm512_cvtepi32_ps(_mm512_madd_epi16(bs, bt.pair[m]));
                    acc[t][m] = _mm512_mask3_fnmadd_ps(dym[t], mins, acc[t][m], bt.has_min);
                }
            }
        }
    }
    for t in 0..N {
        let mut s = acc[t];
        let mut n = 16;
        while n > 1 {
            n /= 2;
            for i in 0..n {
                s[i] = _mm512_add_ps(s[i], s[i + n]);
            }
        }
        // SAFETY: `valid` cells of token row t (caller contract).
        unsafe { _mm512_mask_storeu_ps(out.add(t * os), mask(valid), s[0]) };
    }
}

/// K-quant panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows`
/// of kind `T` and `a` Q8_K rows. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_packed_k<const T: u8>(
    k: usize,
    packed: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    os: usize,
) {
    let l = PanelLayout::new(dtype(T), k).expect("dtype with a panel layout");
    let ar = l.check_gemm(packed, n_rows, a.len(), n_tok, out.len(), os);
    if n_rows == 0 || n_tok == 0 {
        return;
    }
    let (pp, ap, op) = (packed.as_ptr(), a.as_ptr(), out.as_mut_ptr());
    for g0 in (0..n_tok).step_by(TOKEN_GROUP) {
        let g1 = (g0 + TOKEN_GROUP).min(n_tok);
        for p in 0..PanelLayout::panels(n_rows) {
            let valid = PANEL.min(n_rows - p * PANEL);
            let panel = pp.wrapping_add(p * l.panel_bytes);
            let mut t0 = g0;
            while t0 < g1 {
                let n = TT.min(g1 - t0);
                // SAFETY: lengths checked above; panel p and tokens t0..t0 + n are in range.
                unsafe {
                    let (a, o) = (ap.add(t0 * ar), op.add(t0 * os + p * PANEL));
                    match n {
                        1 => tile::<T, 1>(&l, panel, a, ar, o, os, valid),
                        2 => tile::<T, 2>(&l, panel, a, ar, o, os, valid),
                        3 => tile::<T, 3>(&l, panel, a, ar, o, os, valid),
                        _ => tile::<T, TT>(&l, panel, a, ar, o, os, valid),
                    }
                }
                t0 += n;
            }
        }
    }
}

/// Sets the K-quant rows' `packed` GEMMs in `t` (over the AVX2 ones, whose float order is
/// not this ISA's row kernels'): the VNNI versions, or none without VNNI.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL plus AVX2/FMA/F16C (VNNI is checked here): the
/// installed safe wrappers call the `#[target_feature]` GEMMs without re-checking.
pub(crate) unsafe fn install(t: &mut crate::kernels::table::Table) {
    use crate::kernels::table::PackedKernels;
    let vnni = crate::kernels::isa::has_avx512_vnni();
    macro_rules! set {
        ($($dt:ident: $kind:ident),*) => {$(
            if let Some(row) = t[DType::$dt as usize].as_mut() {
                row.packed = vnni.then_some(PackedKernels {
                    // SAFETY: `install`'s caller verified the CPU features.
                    gemm: |k, p, n, a, nt, o, os| unsafe { gemm_packed_k::<$kind>(k, p, n, a, nt, o, os) },
                });
            }
        )*};
    }
    set!(Q4_K: Q4K, Q5_K: Q5K, Q6_K: Q6K);
}
