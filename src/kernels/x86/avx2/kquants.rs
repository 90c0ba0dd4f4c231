//! AVX2 (+FMA) K-quant dot products and Q8_K quantization; twins of `scalar::kquants`.
//!
//! Every weight type is first unpacked to 256 unsigned bytes (eight registers of 32 values in
//! value order, the Q3_K/Q6_K offsets left out); [`scaled_sum`] then multiplies them with the
//! Q8_K bytes (`vpmaddubsw`) and the 16-value sub-block scales (`vpmaddwd`). Offsets and mins
//! are applied through Q8_K's block sums. The per-block integer sums equal the scalar ones
//! exactly; only the final float accumulation order differs. Types without an AVX2 version
//! here (dequantization) use the scalar reference.
//!
//! Only the public entry points carry `#[target_feature]`; the helpers are `#[inline(always)]`
//! without it so that they (and the intrinsics inside) inline into the entry points (a
//! `#[target_feature]` helper stays an out-of-line call, which cost 2.5x here). Helpers must
//! therefore only be called from entry points whose features cover theirs (AVX2+FMA+F16C;
//! the AVX-512 module reuses them).

use std::arch::x86_64::*;
use std::mem::offset_of;

use crate::kernels::blocks::kquants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, KBlock, QK_K,
};
use crate::kernels::row::Table;
use crate::kernels::scalar::kquants as scalar;
use crate::kernels::shape::{check_gemm, check_vec_dot};
use crate::kernels::DType;

/// Eight registers holding one block's 256 unsigned values in value order.
pub(crate) type Unpacked = [__m256i; 8];

/// Per-16-value-group coefficients of one block (scales, or mins): 16 i8 lanes.
pub(crate) type Groups = __m128i;

/// The f16 at `p` as f32, via F16C (`half`'s run-time dispatch would cost a call here).
///
/// # Safety
/// F16C must be available; `p` must point to 2 readable bytes.
#[inline(always)]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): F16C must be
    // available; `p` must point to 2 readable bytes.
    unsafe {
        let bits = u16::from_le(p.cast::<u16>().read_unaligned());
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }
}

#[inline(always)]
fn f32_at(p: *const u8) -> f32 {
    // SAFETY: callers pass a pointer to 4 readable bytes inside a checked block.
    f32::from_bits(u32::from_le(unsafe { p.cast::<u32>().read_unaligned() }))
}

/// Horizontal sum of 8 f32 lanes.
///
/// # Safety
/// AVX must be available.
#[inline(always)]
pub(crate) unsafe fn hsum_f32(v: __m256) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX must be
    // available.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// `sum_v scale[v / 16] * u[v] * q8[v]` over one block as 8 i32 lanes (exact: maddubs pairs
/// stay below 2 * 63 * 128 for values < 64).
///
/// # Safety
/// AVX2 must be available; `q8` must point to 256 readable bytes.
#[inline(always)]
pub(crate) unsafe fn scaled_sum(u: &Unpacked, q8: *const u8, scales: Groups) -> __m256i {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `q8` must point to 256 readable bytes.
    unsafe {
        // Scales as i16, groups 0..8 and 8..16, each copied to both 128-bit lanes; register k
        // (groups 2k, 2k+1) takes i16 element 2k % 8 in its low lane and 2k % 8 + 1 in its high one.
        let s16 = _mm256_cvtepi8_epi16(scales);
        let halves = [
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s16)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(s16)),
        ];
        let mut acc = _mm256_setzero_si256();
        for (k, &uk) in u.iter().enumerate() {
            let q = _mm256_loadu_si256(q8.add(32 * k).cast());
            let p = _mm256_maddubs_epi16(uk, q);
            let b = (4 * (k % 4)) as i8;
            let ctrl = _mm256_setr_epi8(
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b,
                b + 1,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
                b + 2,
                b + 3,
            );
            let s = _mm256_shuffle_epi8(halves[k / 4], ctrl);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
        }
        acc
    }
}

/// The four 2-bit planes of 32 packed bytes: values `32s + l` at bits `2s`.
///
/// # Safety
/// AVX2 must be available.
#[inline(always)]
unsafe fn planes_2bit(q: __m256i) -> [__m256i; 4] {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available.
    unsafe {
        let m3 = _mm256_set1_epi8(3);
        [
            _mm256_and_si256(q, m3),
            _mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
            _mm256_and_si256(_mm256_srli_epi16(q, 4), m3),
            _mm256_and_si256(_mm256_srli_epi16(q, 6), m3),
        ]
    }
}

/// Q2_K block values 0..=3.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q2_K block.
#[inline(always)]
pub(crate) unsafe fn unpack_q2k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q2_K block.
    unsafe {
        let qs = x.add(offset_of!(BlockQ2K, qs));
        let a = planes_2bit(_mm256_loadu_si256(qs.cast()));
        let b = planes_2bit(_mm256_loadu_si256(qs.add(32).cast()));
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    }
}

/// Q3_K block values as unsigned 0..=7 (the stored value plus 4).
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q3_K block.
#[inline(always)]
pub(crate) unsafe fn unpack_q3k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q3_K block.
    unsafe {
        let qs = x.add(offset_of!(BlockQ3K, qs));
        let hm = _mm256_loadu_si256(x.add(offset_of!(BlockQ3K, hmask)).cast());
        let a = planes_2bit(_mm256_loadu_si256(qs.cast()));
        let b = planes_2bit(_mm256_loadu_si256(qs.add(32).cast()));
        let one = _mm256_set1_epi8(1);
        let mut out = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
        for (m, o) in out.iter_mut().enumerate() {
            // Bit m of hmask[l] is the third bit of value 32m + l.
            let h = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(m as i32)), one);
            *o = _mm256_or_si256(*o, _mm256_slli_epi16(h, 2));
        }
        out
    }
}

/// Low/high nibbles of 4 x 32 bytes: Q4_K/Q5_K value order.
///
/// # Safety
/// AVX2 must be available; `qs` must point to 128 readable bytes.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `qs` must point to 128 readable bytes.
    unsafe {
        let m = _mm256_set1_epi8(0xF);
        let mut out = [_mm256_setzero_si256(); 8];
        for p in 0..4 {
            let q = _mm256_loadu_si256(qs.add(32 * p).cast());
            out[2 * p] = _mm256_and_si256(q, m);
            out[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
        }
        out
    }
}

/// Q4_K block values 0..=15.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q4_K block.
#[inline(always)]
pub(crate) unsafe fn unpack_q4k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q4_K block.
    unsafe { nibbles(x.add(offset_of!(BlockQ4K, qs))) }
}

/// Q5_K block values 0..=31.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q5_K block.
#[inline(always)]
pub(crate) unsafe fn unpack_q5k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q5_K block.
    unsafe {
        let mut out = nibbles(x.add(offset_of!(BlockQ5K, qs)));
        let qh = _mm256_loadu_si256(x.add(offset_of!(BlockQ5K, qh)).cast());
        let one = _mm256_set1_epi8(1);
        for (m, o) in out.iter_mut().enumerate() {
            let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(m as i32)), one);
            *o = _mm256_or_si256(*o, _mm256_slli_epi16(h, 4));
        }
        out
    }
}

/// Q6_K block values 0..=63 (the stored value plus 32).
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q6_K block.
#[inline(always)]
pub(crate) unsafe fn unpack_q6k(x: *const u8) -> Unpacked {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q6_K block.
    unsafe {
        let (ql, qh) = (
            x.add(offset_of!(BlockQ6K, ql)),
            x.add(offset_of!(BlockQ6K, qh)),
        );
        let (m4, m3) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
        let mut out = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            let l0 = _mm256_loadu_si256(ql.add(64 * h).cast());
            let l1 = _mm256_loadu_si256(ql.add(64 * h + 32).cast());
            let hb = _mm256_loadu_si256(qh.add(32 * h).cast());
            let hi = |s: i32| {
                let v = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(s)), m3);
                _mm256_slli_epi16(v, 4)
            };
            out[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), hi(0));
            out[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), hi(2));
            out[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi(4));
            out[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi(6));
        }
        out
    }
}

/// Scales and mins of a Q4_K/Q5_K block (12 packed bytes at `p`) expanded to 16-value groups.
///
/// # Safety
/// AVX2 must be available; `p` must point to 12 readable bytes.
#[inline(always)]
pub(crate) unsafe fn groups_k4(p: *const u8) -> (Groups, Groups) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `p` must point to 12 readable bytes.
    unsafe {
        // Word-parallel form of `scales_mins_k4`: bytes 0..4 hold scales 0..4 and bytes 4..8 mins
        // 0..4 in their low 6 bits; bytes 8..12 hold the low nibbles of scales (low) and mins
        // (high) 4..8, whose top 2 bits are the top bits of bytes 0..4 (scales) and 4..8 (mins).
        let w = p.cast::<[u32; 3]>().read_unaligned().map(u32::from_le);
        let (m6, m4, m2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
        let sc_lo = w[0] & m6;
        let sc_hi = (w[2] & m4) | (((w[0] >> 6) & m2) << 4);
        let mn_lo = w[1] & m6;
        let mn_hi = ((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4);
        let sc = _mm_cvtsi64_si128((sc_lo as u64 | (sc_hi as u64) << 32) as i64);
        let mn = _mm_cvtsi64_si128((mn_lo as u64 | (mn_hi as u64) << 32) as i64);
        // Each 32-value sub-block is two 16-value groups.
        (_mm_unpacklo_epi8(sc, sc), _mm_unpacklo_epi8(mn, mn))
    }
}

/// Scales (low nibbles) and mins (high nibbles) of a Q2_K block (16 bytes at `p`).
///
/// # Safety
/// AVX2 must be available; `p` must point to 16 readable bytes.
#[inline(always)]
pub(crate) unsafe fn groups_q2k(p: *const u8) -> (Groups, Groups) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `p` must point to 16 readable bytes.
    unsafe {
        let v = _mm_loadu_si128(p.cast());
        let m4 = _mm_set1_epi8(0xF);
        (
            _mm_and_si128(v, m4),
            _mm_and_si128(_mm_srli_epi16(v, 4), m4),
        )
    }
}

/// The 16 signed scales of a Q3_K block (12 packed bytes at `p`).
///
/// # Safety
/// AVX2 must be available; `p` must point to 12 readable bytes.
#[inline(always)]
pub(crate) unsafe fn groups_q3k(p: *const u8) -> Groups {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `p` must point to 12 readable bytes.
    unsafe {
        // Word-parallel form of `scales_q3k`: scale g has its low nibble in nibble g / 8 of byte
        // g % 8 and its top 2 bits at bit 2 * (g / 4) of byte 8 + g % 4.
        let w = p.cast::<[u32; 3]>().read_unaligned().map(u32::from_le);
        let (m4, m2) = (0x0F0F_0F0Fu32, 0x0303_0303u32);
        let g0 = (w[0] & m4) | ((w[2] & m2) << 4);
        let g1 = (w[1] & m4) | (((w[2] >> 2) & m2) << 4);
        let g2 = ((w[0] >> 4) & m4) | (((w[2] >> 4) & m2) << 4);
        let g3 = ((w[1] >> 4) & m4) | (((w[2] >> 6) & m2) << 4);
        let v = _mm_setr_epi32(g0 as i32, g1 as i32, g2 as i32, g3 as i32);
        _mm_sub_epi8(v, _mm_set1_epi8(32))
    }
}

/// One weight block made ready for any number of Q8_K activation blocks.
pub(crate) struct Prepared {
    /// The 256 values, unsigned (offset `-off` left out).
    pub u: Unpacked,
    /// Scale of each 16-value group.
    pub gs: Groups,
    /// Min of each 16-value group (zero for the types without mins).
    pub gm: Groups,
    pub d: f32,
    pub dmin: f32,
    /// The values' offset: the true value is `u + off` (-4 for Q3_K, -32 for Q6_K, else 0).
    pub off: i32,
}

/// Q2_K block `x` ready for dot products.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q2_K block.
#[inline(always)]
pub(crate) unsafe fn prep_q2k(x: *const u8) -> Prepared {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q2_K block.
    unsafe {
        let (gs, gm) = groups_q2k(x.add(offset_of!(BlockQ2K, scales)));
        Prepared {
            u: unpack_q2k(x),
            gs,
            gm,
            d: f16_at(x.add(offset_of!(BlockQ2K, d))),
            dmin: f16_at(x.add(offset_of!(BlockQ2K, dmin))),
            off: 0,
        }
    }
}

/// Q3_K block `x` ready for dot products.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q3_K block.
#[inline(always)]
pub(crate) unsafe fn prep_q3k(x: *const u8) -> Prepared {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q3_K block.
    unsafe {
        Prepared {
            u: unpack_q3k(x),
            gs: groups_q3k(x.add(offset_of!(BlockQ3K, scales))),
            gm: _mm_setzero_si128(),
            d: f16_at(x.add(offset_of!(BlockQ3K, d))),
            dmin: 0.0,
            off: -4,
        }
    }
}

/// Q4_K block `x` ready for dot products.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q4_K block.
#[inline(always)]
pub(crate) unsafe fn prep_q4k(x: *const u8) -> Prepared {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q4_K block.
    unsafe {
        let (gs, gm) = groups_k4(x.add(offset_of!(BlockQ4K, scales)));
        Prepared {
            u: unpack_q4k(x),
            gs,
            gm,
            d: f16_at(x.add(offset_of!(BlockQ4K, d))),
            dmin: f16_at(x.add(offset_of!(BlockQ4K, dmin))),
            off: 0,
        }
    }
}

/// Q5_K block `x` ready for dot products.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q5_K block.
#[inline(always)]
pub(crate) unsafe fn prep_q5k(x: *const u8) -> Prepared {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q5_K block.
    unsafe {
        let (gs, gm) = groups_k4(x.add(offset_of!(BlockQ5K, scales)));
        Prepared {
            u: unpack_q5k(x),
            gs,
            gm,
            d: f16_at(x.add(offset_of!(BlockQ5K, d))),
            dmin: f16_at(x.add(offset_of!(BlockQ5K, dmin))),
            off: 0,
        }
    }
}

/// Q6_K block `x` ready for dot products.
///
/// # Safety
/// AVX2 must be available; `x` must point to a readable Q6_K block.
#[inline(always)]
pub(crate) unsafe fn prep_q6k(x: *const u8) -> Prepared {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `x` must point to a readable Q6_K block.
    unsafe {
        Prepared {
            u: unpack_q6k(x),
            gs: x
                .add(offset_of!(BlockQ6K, scales))
                .cast::<Groups>()
                .read_unaligned(),
            gm: _mm_setzero_si128(),
            d: f16_at(x.add(offset_of!(BlockQ6K, d))),
            dmin: 0.0,
            off: -32,
        }
    }
}

/// The integer parts of one block pair, unreduced: (`scale * (u + off) * q8` summed into 8
/// lanes, `min_g * bsum_g` summed into 8 lanes).
///
/// # Safety
/// AVX2 must be available; `y` must point to a readable Q8_K block.
#[inline(always)]
pub(crate) unsafe fn block_sums(p: &Prepared, y: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available; `y` must point to a readable Q8_K block.
    unsafe {
        let bsums = _mm256_loadu_si256(y.add(offset_of!(BlockQ8K, bsums)).cast());
        let mut isum = scaled_sum(&p.u, y.add(offset_of!(BlockQ8K, qs)), p.gs);
        if p.off != 0 {
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(bsums, offset_scales(p)));
        }
        let gm = _mm256_cvtepi8_epi16(p.gm);
        (isum, _mm256_madd_epi16(bsums, gm))
    }
}

/// `off * scale_g` as 16 i16 lanes (|off * scale| <= 32 * 128 fits).
///
/// # Safety
/// AVX2 must be available.
#[inline(always)]
pub(crate) unsafe fn offset_scales(p: &Prepared) -> __m256i {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 must be
    // available.
    unsafe {
        let gs = _mm256_cvtepi8_epi16(p.gs);
        _mm256_mullo_epi16(gs, _mm256_set1_epi16(p.off as i16))
    }
}

/// `acc + dy * (d * isum - dmin * mins)`.
///
/// # Safety
/// AVX2 and FMA must be available.
#[inline(always)]
unsafe fn accumulate(acc: __m256, p: &Prepared, dy: f32, sums: (__m256i, __m256i)) -> __m256 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 and FMA must
    // be available.
    unsafe {
        let acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * p.d), _mm256_cvtepi32_ps(sums.0), acc);
        _mm256_fnmadd_ps(_mm256_set1_ps(dy * p.dmin), _mm256_cvtepi32_ps(sums.1), acc)
    }
}

/// Tokens per register tile in [`gemm_with`]: each weight block is unpacked once per tile.
const TILE: usize = 4;

/// Dot product of one weight row with one Q8_K row.
///
/// # Safety
/// AVX2 and FMA must be available; `prep` must be one of the `prep_*` functions for blocks of
/// `bytes` bytes; `w` and `a` must hold `n / 256` blocks (checked by the caller).
#[inline(always)]
pub(crate) unsafe fn vec_dot_with(
    n: usize,
    w: &[u8],
    a: &[u8],
    bytes: usize,
    prep: impl Fn(*const u8) -> Prepared,
) -> f32 {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 and FMA must
    // be available; `prep` must be one of the `prep_*` functions for blocks of `bytes` bytes; `w`
    // and `a` must hold `n / 256` blocks (checked by the caller).
    unsafe {
        let nb = n / QK_K;
        let mut acc = _mm256_setzero_ps();
        for i in 0..nb {
            let p = prep(w.as_ptr().add(i * bytes));
            let y = a.as_ptr().add(i * BlockQ8K::BYTES);
            acc = accumulate(acc, &p, f32_at(y), block_sums(&p, y));
        }
        hsum_f32(acc)
    }
}

/// `out[t * out_stride + r] = dot(w row r, a row t)`, tiled over [`TILE`] tokens.
///
/// # Safety
/// AVX2 and FMA must be available; `prep` must be the `prep_*` function of `dt`. Lengths
/// are checked (panics on a caller bug).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn gemm_with(
    k: usize,
    w: &[u8],
    n_rows: usize,
    a: &[u8],
    n_tok: usize,
    out: &mut [f32],
    out_stride: usize,
    dt: DType,
    prep: impl Fn(*const u8) -> Prepared,
) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): AVX2 and FMA must
    // be available; `prep` must be the `prep_*` function of `dt`. Lengths are checked (panics on a
    // caller bug).
    unsafe {
        let (w_row, a_row) = check_gemm(
            k,
            dt,
            w.len(),
            n_rows,
            DType::Q8_K,
            a.len(),
            n_tok,
            out.len(),
            out_stride,
        );
        let (nb, bytes) = (k / QK_K, dt.block_bytes());
        // Token tiles outside, rows inside: each output row (token) is written sequentially.
        for t0 in (0..n_tok).step_by(TILE) {
            let tn = TILE.min(n_tok - t0);
            for r in 0..n_rows {
                let mut acc = [_mm256_setzero_ps(); TILE];
                for i in 0..nb {
                    let p = prep(w.as_ptr().add(r * w_row + i * bytes));
                    for (t, acc_t) in acc.iter_mut().enumerate().take(tn) {
                        let y = a.as_ptr().add((t0 + t) * a_row + i * BlockQ8K::BYTES);
                        *acc_t = accumulate(*acc_t, &p, f32_at(y), block_sums(&p, y));
                    }
                }
                for (t, acc_t) in acc.iter().enumerate().take(tn) {
                    out[(t0 + t) * out_stride + r] = hsum_f32(*acc_t);
                }
            }
        }
    }
}

macro_rules! avx2_entry_points {
    ($($dot:ident, $gemm:ident, $dt:ident, $prep:ident;)*) => {$(
        /// AVX2 twin of the scalar dot product of the same name (weights `w`, Q8_K `a`).
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C. Lengths are checked (panics like the scalar twin).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $dot(n: usize, w: &[u8], a: &[u8]) -> f32 {
            check_vec_dot(n, DType::$dt, w.len(), DType::Q8_K, a.len());
            // SAFETY: this function's features cover the helpers' (AVX2, FMA, F16C); the check
            // above made `w` and `a` hold `n / 256` blocks of the sizes `$prep` and the Q8_K
            // reads expect.
            unsafe { vec_dot_with(n, w, a, DType::$dt.block_bytes(), |x| $prep(x)) }
        }

        /// Tiled AVX2 gemm for this weight type against Q8_K rows (see `TypeKernels::gemm`).
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C. Lengths are checked.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $gemm(
            k: usize,
            w: &[u8],
            n_rows: usize,
            a: &[u8],
            n_tok: usize,
            out: &mut [f32],
            out_stride: usize,
        ) {
            // SAFETY: this function's features cover the helpers' (AVX2, FMA, F16C);
            // `gemm_with` checks the lengths before reading, and `$prep` is `$dt`'s.
            unsafe { gemm_with(k, w, n_rows, a, n_tok, out, out_stride, DType::$dt, |x| $prep(x)) }
        }
    )*};
}

avx2_entry_points! {
    vec_dot_q2_k_q8_k, gemm_q2_k_q8_k, Q2_K, prep_q2k;
    vec_dot_q3_k_q8_k, gemm_q3_k_q8_k, Q3_K, prep_q3k;
    vec_dot_q4_k_q8_k, gemm_q4_k_q8_k, Q4_K, prep_q4k;
    vec_dot_q5_k_q8_k, gemm_q5_k_q8_k, Q5_K, prep_q5k;
    vec_dot_q6_k_q8_k, gemm_q6_k_q8_k, Q6_K, prep_q6k;
}

/// AVX2 twin of [`scalar::quantize_row_q8_k`], bit-identical to it.
///
/// # Safety
/// The CPU must support AVX2. Lengths are checked (panics like the scalar twin).
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) {
    // SAFETY: the caller guarantees this function's contract (`# Safety` above): The CPU must
    // support AVX2. Lengths are checked (panics like the scalar twin).
    unsafe {
        assert!(
            src.len().is_multiple_of(QK_K),
            "quantize_row_q8_k: {} values",
            src.len()
        );
        let nb = src.len() / QK_K;
        assert!(
            dst.len() >= nb * BlockQ8K::BYTES,
            "quantize_row_q8_k: output too short"
        );
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        for (i, x) in src.chunks_exact(QK_K).enumerate() {
            let (mut vmax, mut nan) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for c in 0..QK_K / 8 {
                let v = _mm256_loadu_ps(x.as_ptr().add(8 * c));
                vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, abs_mask));
                nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            }
            let amax = {
                let s = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
                let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
                _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
            };
            let out = dst.as_mut_ptr().add(i * BlockQ8K::BYTES);
            // NaN input or an all-zero block: defer to the reference for identical results.
            let has_nan = _mm256_movemask_ps(nan) != 0;
            let found = x.iter().find(|v| v.abs() == amax);
            let Some(&max) = found.filter(|_| amax > 0.0 && !has_nan) else {
                let b = scalar::q8k_block(x);
                out.cast::<BlockQ8K>().write_unaligned(b);
                continue;
            };
            let iscale = -127.0f32 / max;
            let vs = _mm256_set1_ps(iscale);
            let qs = out.add(offset_of!(BlockQ8K, qs));
            for c in 0..QK_K / 32 {
                let mut q = [_mm256_setzero_si256(); 4];
                for (k, qk) in q.iter_mut().enumerate() {
                    let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(32 * c + 8 * k)), vs);
                    // cvtps rounds half to even under the default MXCSR mode, like the scalar twin.
                    *qk = _mm256_cvtps_epi32(v);
                }
                let p01 = _mm256_packs_epi32(q[0], q[1]);
                let p23 = _mm256_packs_epi32(q[2], q[3]);
                let p = _mm256_packs_epi16(p01, p23);
                // packs interleave 128-bit lanes: restore value order.
                let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(qs.add(32 * c).cast(), p);
            }
            let q8 = qs.cast::<i8>();
            let bsums = out.add(offset_of!(BlockQ8K, bsums)).cast::<i16>();
            for g in 0..16 {
                let v = _mm_cvtepi8_epi16(_mm_loadu_si128(q8.add(16 * g).cast()));
                let v2 = _mm_cvtepi8_epi16(_mm_loadu_si128(q8.add(16 * g + 8).cast()));
                let s = _mm_madd_epi16(_mm_add_epi16(v, v2), _mm_set1_epi16(1));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
                bsums.add(g).write_unaligned(_mm_cvtsi128_si32(s) as i16);
            }
            out.cast::<f32>().write_unaligned(1.0 / iscale);
        }
    }
}

/// Installs the AVX2 K-quant kernels (dot products, tiled gemms, Q8_K quantization) in `t`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C: the installed safe wrappers call the
/// `#[target_feature]` functions above without re-checking.
pub(crate) unsafe fn install(t: &mut Table) {
    macro_rules! set {
        ($($dt:ident: $dot:ident, $gemm:ident;)*) => {$(
            if let Some(r) = t[DType::$dt as usize].as_mut() {
                // SAFETY: `install`'s caller guarantees AVX2, FMA and F16C.
                r.vec_dot = |n, w, a| unsafe { $dot(n, w, a) };
                // SAFETY: the same guarantee covers the gemm's features.
                r.gemm = |k, w, nr, a, nt, o, s| unsafe { $gemm(k, w, nr, a, nt, o, s) };
            }
        )*};
    }
    set! {
        Q2_K: vec_dot_q2_k_q8_k, gemm_q2_k_q8_k;
        Q3_K: vec_dot_q3_k_q8_k, gemm_q3_k_q8_k;
        Q4_K: vec_dot_q4_k_q8_k, gemm_q4_k_q8_k;
        Q5_K: vec_dot_q5_k_q8_k, gemm_q5_k_q8_k;
        Q6_K: vec_dot_q6_k_q8_k, gemm_q6_k_q8_k;
    }
    if let Some(r) = t[DType::Q8_K as usize].as_mut() {
        // SAFETY: `install`'s caller guarantees AVX2.
        r.from_f32 = Some(|x, q| unsafe { quantize_row_q8_k(x, q) });
    }
}
