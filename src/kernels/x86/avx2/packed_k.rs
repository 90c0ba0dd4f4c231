//! AVX2 panel GEMMs of the K-quants (Q4_K, Q5_K, Q6_K x Q8_K) over load-time repacked
//! weights (`packed/kquant.rs`); twins of `scalar/packed_k.rs` with `lanes = 8`, and so
//! bit-identical to this ISA's GGUF-row `gemm` (`kquants.rs`).
//!
//! That row kernel keeps one ymm of 8 f32 partial sums per output, lane `m` fed by the dwords
//! `u` with `u % 8 == m`. Here a ymm holds 8 rows (half a panel: bytes `32h..32h + 32` of each
//! 64-byte chunk), so the same sums are 8 registers `acc[m]` per token. A weight dword is one
//! aligned load (plus masking); `vpmaddubsw` with the broadcast activation dword gives two
//! i16 pair sums per row (at most 2 * 63 * 128 = 16128: no saturation, even for a -128
//! activation), `vpmaddwd` by the row's group scale (held twice, as an i16 pair) sums them
//! into the row's i32 lane, exactly as the row kernel's `scaled_sum`.

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
/// Tokens sharing one unpacked weight dword.
const TT: usize = 2;

/// Per-block weight terms of one half panel shared by all tokens: each group's scale twice
/// per i32 lane (an i16 pair for `vpmaddwd`), and per lane `m` the min pair (Q4_K/Q5_K) or
/// scale pair (Q6_K) of groups `2m, 2m + 1`.
struct BlockTerms {
    scale: [__m256i; 16],
    pair: [__m256i; 8],
    d: __m256,
    dmin: __m256,
}

/// # Safety
/// CPU features as enabled; `sc` is a block's scale area of kind `T`, `h` the half panel.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
unsafe fn block_terms<const T: u8>(sc: *const u8, h: usize) -> BlockTerms {
    let line = |at: usize| {
        // SAFETY: 8 bytes of a 16-byte line inside the block's scale area (caller contract).
        unsafe { _mm_loadl_epi64(sc.add(at + 8 * h) as *const __m128i) }
    };
    let f16s = |at: usize| {
        // SAFETY: 8 f16 of the 16 at `at` inside the scale area.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sc.add(at + 16 * h) as *const __m128i) })
    };
    let twice = |x: __m256i| _mm256_or_si256(x, _mm256_slli_epi32::<16>(x));
    let lo16 = _mm256_set1_epi32(0xFFFF);
    let mut t = BlockTerms {
        scale: [_mm256_setzero_si256(); 16],
        pair: [_mm256_setzero_si256(); 8],
        d: f16s(scale_at::D),
        dmin: _mm256_setzero_ps(),
    };
    if T == Q6K {
        let mut low = [_mm256_setzero_si256(); 16];
        for g in 0..16 {
            low[g] = _mm256_and_si256(_mm256_cvtepi8_epi32(line(scale_at::SC_Q6 + 16 * g)), lo16);
            t.scale[g] = twice(low[g]);
        }
        for m in 0..8 {
            t.pair[m] = _mm256_or_si256(low[2 * m], _mm256_slli_epi32::<16>(low[2 * m + 1]));
        }
    } else {
        for j in 0..8 {
            let s = twice(_mm256_cvtepu8_epi32(line(scale_at::SC_K4 + 16 * j)));
            t.scale[2 * j] = s;
            t.scale[2 * j + 1] = s;
            t.pair[j] = twice(_mm256_cvtepu8_epi32(line(scale_at::MIN_K4 + 16 * j)));
        }
        t.dmin = f16s(scale_at::DMIN);
    }
    t
}

/// Weight dword `u = m + 8i` of 8 rows (`q` = the block's quants plus `32h`), unsigned.
///
/// # Safety
/// CPU features as enabled; `q` is 32-byte aligned inside a block's quants of kind `T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weight<const T: u8>(q: *const u8, m: usize, i: usize) -> __m256i {
    // SAFETY: every chunk index below is inside the kind's quant area (see packed/kquant.rs).
    let chunk = |c: usize| unsafe { _mm256_load_si256(q.add(64 * c) as *const __m256i) };
    let nib = _mm256_set1_epi8(0x0F);
    let nibble = |x: __m256i, high: bool| {
        let x = if high { _mm256_srli_epi16::<4>(x) } else { x };
        _mm256_and_si256(x, nib)
    };
    if T == Q6K {
        let (h, qt) = (i / 4, i % 4);
        let lo = nibble(chunk(16 * h + 8 * (qt % 2) + m), qt >= 2);
        let hb = _mm256_srl_epi16(chunk(QH + 8 * h + m), _mm_cvtsi32_si128(2 * qt as i32));
        let hb = _mm256_and_si256(hb, _mm256_set1_epi8(3));
        _mm256_or_si256(lo, _mm256_slli_epi16::<4>(hb))
    } else {
        let lo = nibble(chunk(8 * (i / 2) + m), i % 2 == 1);
        if T == Q4K {
            return lo;
        }
        let hb = _mm256_srl_epi16(chunk(QH + m), _mm_cvtsi32_si128(i as i32));
        let hb = _mm256_and_si256(hb, _mm256_set1_epi8(1));
        _mm256_or_si256(lo, _mm256_slli_epi16::<4>(hb))
    }
}

/// Half panel `h` x `N` tokens over all blocks; token `t`'s Q8_K row at `a + t * ar`, its
/// outputs at `out + t * os` (`valid` <= 8 of them, rows `8h..`).
///
/// # Safety
/// CPU features as enabled; `panel` is a whole aligned panel of `l` (kind `T`), the `N`
/// activation rows and output cells are in range.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const T: u8, const N: usize>(
    l: &PanelLayout,
    panel: *const u8,
    h: usize,
    a: *const u8,
    ar: usize,
    out: *mut f32,
    os: usize,
    valid: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); 8]; N];
    for b in 0..l.nb {
        let q = panel.wrapping_add(b * l.quant_bytes + 32 * h);
        // SAFETY: block b's scale area lies inside the panel.
        let bt = unsafe { block_terms::<T>(panel.add(l.scales_at(b)), h) };
        let mut dyd = [_mm256_setzero_ps(); N];
        let mut dym = [_mm256_setzero_ps(); N];
        for t in 0..N {
            // SAFETY: token t's block b starts with its f32 d.
            let dy = unsafe { (a.add(t * ar + b * Q8K_BYTES) as *const f32).read_unaligned() };
            dyd[t] = _mm256_mul_ps(_mm256_set1_ps(dy), bt.d);
            dym[t] = _mm256_mul_ps(_mm256_set1_ps(dy), bt.dmin);
        }
        for m in 0..8 {
            let mut isum = [_mm256_setzero_si256(); N];
            for i in 0..8 {
                // SAFETY: q is 32-byte aligned inside block b's quants.
                let w = unsafe { weight::<T>(q, m, i) };
                let u = m + 8 * i;
                for t in 0..N {
                    let qa = a.wrapping_add(t * ar + b * Q8K_BYTES + 4 + 4 * u);
                    // SAFETY: dword u of token t's block b quants.
                    let x = _mm256_set1_epi32(unsafe { (qa as *const i32).read_unaligned() });
                    let p = _mm256_maddubs_epi16(w, x);
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, bt.scale[u / 4]));
                }
            }
            for t in 0..N {
                let bsp = a.wrapping_add(t * ar + b * Q8K_BYTES + 260 + 4 * m);
                // SAFETY: group sums 2m, 2m + 1 of token t's block b.
                let bs = _mm256_set1_epi32(unsafe { (bsp as *const i32).read_unaligned() });
                let mut s = isum[t];
                if T == Q6K {
                    let corr = _mm256_madd_epi16(bs, bt.pair[m]);
                    s = _mm256_sub_epi32(s, _mm256_slli_epi32::<5>(corr));
                }
                acc[t][m] = _mm256_fmadd_ps(dyd[t], _mm256_cvtepi32_ps(s), acc[t][m]);
                if T != Q6K {
                    let mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, bt.pair[m]));
                    acc[t][m] = _mm256_fnmadd_ps(dym[t], mins, acc[t][m]);
                }
            }
        }
    }
    for t in 0..N {
        let mut s = acc[t];
        let mut n = 8;
        while n > 1 {
            n /= 2;
            for i in 0..n {
                s[i] = _mm256_add_ps(s[i], s[i + n]);
            }
        }
        let mut v = [0f32; 8];
        // SAFETY: `v` holds the 8 f32s the store writes.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), s[0]) };
        // SAFETY: `valid` cells of token row t (caller contract).
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * os), valid) };
    }
}

/// K-quant panel GEMM: `out[t * out_stride + r] = dot(row r, activation row t)` for
/// `r < n_rows`, `t < n_tok`, with `packed` the 64-byte aligned panels of rows `0..n_rows`
/// of kind `T` and `a` Q8_K rows. Lengths are checked (panics).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
            let panel = pp.wrapping_add(p * l.panel_bytes);
            for h in 0..2 {
                let r0 = p * PANEL + 8 * h;
                if r0 >= n_rows {
                    break;
                }
                let valid = 8.min(n_rows - r0);
                let mut t0 = g0;
                while t0 < g1 {
                    let n = TT.min(g1 - t0);
                    // SAFETY: lengths checked above; panel p, rows r0.., tokens t0..t0 + n
                    // are in range.
                    unsafe {
                        let (a, o) = (ap.add(t0 * ar), op.add(t0 * os + r0));
                        if n == 1 {
                            tile::<T, 1>(&l, panel, h, a, ar, o, os, valid)
                        } else {
                            tile::<T, TT>(&l, panel, h, a, ar, o, os, valid)
                        }
                    }
                    t0 += n;
                }
            }
        }
    }
}

/// Sets the K-quant rows' `packed` GEMMs in `t`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C: the installed safe wrappers call the
/// `#[target_feature]` GEMMs without re-checking.
pub(crate) unsafe fn install(t: &mut crate::kernels::table::Table) {
    use crate::kernels::table::PackedKernels;
    macro_rules! set {
        ($($dt:ident: $kind:ident),*) => {$(
            if let Some(row) = t[DType::$dt as usize].as_mut() {
                row.packed = Some(PackedKernels {
                    // SAFETY: `install`'s caller verified AVX2, FMA and F16C.
                    gemm: |k, p, n, a, nt, o, os| unsafe { gemm_packed_k::<$kind>(k, p, n, a, nt, o, os) },
                });
            }
        )*};
    }
    set!(Q4_K: Q4K, Q5_K: Q5K, Q6_K: Q6K);
}
