//! The vector operations the attention kernels (the long-context order, and llama.cpp's order
//! in `ggml_order/simd_twin.rs`) are written against, once for every x86 width: [`Avx512`] (16 f32 lanes) and [`Avx2`] (8 lanes). A kernel is one generic
//! body over [`Simd`], marked `#[inline(always)]` and called from a thin
//! `#[target_feature]` wrapper per width, so each instantiation compiles with its width's
//! instructions. Every operation is lane-wise (or an exact maximum), so a kernel computes the
//! same bits whatever the width: only how many positions one register holds changes.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// One x86 vector width.
///
/// # Safety
/// Every method is `unsafe`: the CPU must support the width's features
/// (AVX-512F + FMA + F16C, or AVX2 + FMA + F16C), and pointers must be valid for
/// [`Simd::LANES`] values.
pub(super) trait Simd: Copy {
    /// A register of [`Simd::LANES`] f32.
    type V: Copy;
    /// f32 lanes per register.
    const LANES: usize;
    /// Query rows whose four partial score sums stay in registers at once.
    const SCORE_ROWS: usize;
    /// Query rows, and registers per row, of the weighted-V accumulation kept in registers.
    const V_ROWS: usize;
    const V_W: usize;
    /// Query rows of a Q8_0 score pass (two partial sums and a total per row in registers).
    const SCORE_ROWS_Q8: usize;

    unsafe fn zero() -> Self::V;
    unsafe fn set1(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// [`Simd::LANES`] f16 values widened to f32.
    unsafe fn load_f16(p: *const half::f16) -> Self::V;
    /// [`Simd::LANES`] i8 values widened to f32 (exact).
    unsafe fn load_i8(p: *const i8) -> Self::V;
    /// `a * b + c`, rounded once.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// Lanes outside `a..b` set to negative infinity.
    ///
    /// # Safety
    /// The trait's contract.
    unsafe fn mask_outside(x: Self::V, a: usize, b: usize) -> Self::V;
    /// The largest lane (`-inf` when all are).
    ///
    /// # Safety
    /// The trait's contract.
    unsafe fn hmax(x: Self::V) -> f32;
    /// [`super::exp_fast::exp_fast`] lane by lane, bit-identical to it.
    ///
    /// # Safety
    /// The trait's contract.
    unsafe fn exp_fast(x: Self::V) -> Self::V;
    /// The C library's `expf` lane by lane, for lanes `<= 0` or NaN ([`super::expf`]).
    unsafe fn expf_nonpositive(x: Self::V) -> Self::V;
    /// Each lane rounded to f16 (to nearest, ties to even) and widened back.
    unsafe fn round_f16(x: Self::V) -> Self::V;
    /// Each lane rounded to f16 as [`Simd::round_f16`] rounds, stored at `p` ([`Simd::LANES`]
    /// writable f16): `load_f16(p)` then gives `round_f16(x)`.
    unsafe fn store_f16(p: *mut half::f16, x: Self::V);

    /// Half a register's lanes as f64 (two of these hold one [`Simd::V`]).
    type W: Copy;
    /// The lanes of `x` as f64: the low half, then the high half.
    unsafe fn widen(x: Self::V) -> [Self::W; 2];
    /// `w + widen(x)`, lane by lane in f64.
    unsafe fn add_wide(w: [Self::W; 2], x: Self::V) -> [Self::W; 2];
    /// The f64 lanes of `w` rounded to f32, in [`Simd::widen`]'s order.
    unsafe fn narrow(w: [Self::W; 2]) -> Self::V;
}

/// [`Simd::exp_fast`]'s arithmetic between the width's clamp and its exponent bits, one body
/// for both widths (lane-wise adds and multiplies, no fma, in the order of
/// [`super::exp_fast::exp_fast`]): for clamped lanes `xc` it returns `z = xc * log2(e) +
/// ROUND` (whose low bits hold `n`) and `y ~ e^r`, `r = xc - n * ln 2`, so that
/// `e^xc = y * 2^n`.
///
/// # Safety
/// `S`'s features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn exp_fast_poly<S: Simd>(xc: S::V) -> (S::V, S::V) {
    use super::exp_fast::*;
    // SAFETY: `S`'s features (this function's contract).
    unsafe {
        let c = |v: f32| S::set1(v);
        let z = S::add(S::mul(xc, c(LOG2E)), c(ROUND));
        let n = S::sub(z, c(ROUND));
        let r = S::sub(S::sub(xc, S::mul(n, c(LN2_HI))), S::mul(n, c(LN2_LO)));
        let mut p = c(P[0]);
        for &k in &P[1..] {
            p = S::add(S::mul(p, r), c(k));
        }
        p = S::add(S::mul(p, r), c(0.5));
        let y = S::add(S::add(S::mul(p, S::mul(r, r)), r), c(1.0));
        (z, y)
    }
}

/// The [`Simd`] operations that are one intrinsic of the width each (`$v` its register):
/// `zero`, `set1`, `load`, `store`, `fma`, `add`, `mul`, `sub`, in that order.
#[cfg(target_arch = "x86_64")]
macro_rules! lanewise {
    ($v:ty: $zero:ident, $set1:ident, $load:ident, $store:ident, $fma:ident, $add:ident, $mul:ident, $sub:ident) => {
        #[inline(always)]
        unsafe fn zero() -> $v {
            // SAFETY: the features of this width (the trait's contract).
            unsafe { $zero() }
        }
        #[inline(always)]
        unsafe fn set1(x: f32) -> $v {
            // SAFETY: the features of this width (the trait's contract).
            unsafe { $set1(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> $v {
            // SAFETY: the caller passes `LANES` readable f32.
            unsafe { $load(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: $v) {
            // SAFETY: the caller passes `LANES` writable f32.
            unsafe { $store(p, v) }
        }
        #[inline(always)]
        unsafe fn fma(a: $v, b: $v, c: $v) -> $v {
            // SAFETY: the features of this width (the trait's contract).
            unsafe { $fma(a, b, c) }
        }
        #[inline(always)]
        unsafe fn add(a: $v, b: $v) -> $v {
            // SAFETY: as above.
            unsafe { $add(a, b) }
        }
        #[inline(always)]
        unsafe fn mul(a: $v, b: $v) -> $v {
            // SAFETY: as above.
            unsafe { $mul(a, b) }
        }
        #[inline(always)]
        unsafe fn sub(a: $v, b: $v) -> $v {
            // SAFETY: as above.
            unsafe { $sub(a, b) }
        }
    };
}

/// AVX-512F with FMA and F16C: 16 lanes.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx512;

// SAFETY: every method below has the trait's contract (see # Safety on [`Simd`]).
#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;
    const SCORE_ROWS: usize = 6;
    const V_ROWS: usize = 4;
    const V_W: usize = 4;
    const SCORE_ROWS_Q8: usize = 8;

    lanewise! {
        __m512:
        _mm512_setzero_ps, _mm512_set1_ps, _mm512_loadu_ps, _mm512_storeu_ps,
        _mm512_fmadd_ps, _mm512_add_ps, _mm512_mul_ps, _mm512_sub_ps
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const half::f16) -> __m512 {
        // SAFETY: the caller passes 16 readable f16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_i8(p: *const i8) -> __m512 {
        // SAFETY: the caller passes 16 readable i8.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))) }
    }
    #[inline(always)]
    unsafe fn mask_outside(x: __m512, a: usize, b: usize) -> __m512 {
        // SAFETY: the features of this width (the trait's contract).
        unsafe {
            let hi = if b >= 16 { u16::MAX } else { (1u16 << b) - 1 };
            let lo = if a >= 16 { u16::MAX } else { (1u16 << a) - 1 };
            _mm512_mask_blend_ps(hi & !lo, _mm512_set1_ps(f32::NEG_INFINITY), x)
        }
    }
    #[inline(always)]
    unsafe fn hmax(x: __m512) -> f32 {
        // SAFETY: the features of this width (the trait's contract).
        unsafe { _mm512_reduce_max_ps(x) }
    }
    #[inline(always)]
    unsafe fn exp_fast(x: __m512) -> __m512 {
        use super::exp_fast::*;
        // SAFETY: AVX-512F (this impl's contract).
        unsafe {
            let c = _mm512_set1_ps;
            let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, c(FLOOR));
            let xc =
                _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, c(FLOOR)), c(FLOOR), x);
            let xc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(xc, c(0.0)), c(0.0), xc);
            let (z, y) = exp_fast_poly::<Self>(xc);
            let e = _mm512_sub_epi32(
                _mm512_castps_si512(z),
                _mm512_set1_epi32(ROUND.to_bits() as i32),
            );
            let pow2n = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                e,
                _mm512_set1_epi32(127),
            )));
            _mm512_maskz_mov_ps(keep, _mm512_mul_ps(y, pow2n))
        }
    }

    /// # Safety
    /// The trait's contract: the CPU supports AVX-512F.
    #[inline(always)]
    unsafe fn expf_nonpositive(x: __m512) -> __m512 {
        // SAFETY: AVX-512F (this impl's contract).
        unsafe { super::expf::expf16_nonpositive(x) }
    }
    #[inline(always)]
    unsafe fn round_f16(x: __m512) -> __m512 {
        // SAFETY: AVX-512F (this impl's contract).
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(x))
        }
    }
    #[inline(always)]
    unsafe fn store_f16(p: *mut half::f16, x: __m512) {
        // SAFETY: AVX-512F; the caller passes 16 writable f16.
        unsafe {
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
            _mm256_storeu_si256(p.cast(), h)
        }
    }

    type W = __m512d;
    #[inline(always)]
    unsafe fn widen(x: __m512) -> [__m512d; 2] {
        // SAFETY: AVX-512F (this impl's contract).
        unsafe {
            [
                _mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(x),
                ))),
            ]
        }
    }
    #[inline(always)]
    unsafe fn add_wide(w: [__m512d; 2], x: __m512) -> [__m512d; 2] {
        // SAFETY: AVX-512F (this impl's contract).
        unsafe {
            let x = Self::widen(x);
            [_mm512_add_pd(w[0], x[0]), _mm512_add_pd(w[1], x[1])]
        }
    }
    #[inline(always)]
    unsafe fn narrow(w: [__m512d; 2]) -> __m512 {
        // SAFETY: AVX-512F (this impl's contract).
        unsafe {
            let lo = _mm512_castps256_ps512(_mm512_cvtpd_ps(w[0]));
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castps_pd(lo),
                _mm256_castps_pd(_mm512_cvtpd_ps(w[1])),
            ))
        }
    }
}

/// AVX2 with FMA and F16C: 8 lanes.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx2;

// SAFETY: every method below has the trait's contract (see # Safety on [`Simd`]).
#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;
    const SCORE_ROWS: usize = 3;
    const V_ROWS: usize = 3;
    const V_W: usize = 3;
    const SCORE_ROWS_Q8: usize = 4;

    lanewise! {
        __m256:
        _mm256_setzero_ps, _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm256_fmadd_ps, _mm256_add_ps, _mm256_mul_ps, _mm256_sub_ps
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const half::f16) -> __m256 {
        // SAFETY: the caller passes 8 readable f16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_i8(p: *const i8) -> __m256 {
        // SAFETY: the caller passes 8 readable i8 (one 64-bit load).
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))) }
    }
    #[inline(always)]
    unsafe fn mask_outside(x: __m256, a: usize, b: usize) -> __m256 {
        // SAFETY: the features of this width (the trait's contract).
        unsafe {
            let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let (a, b) = (a.min(8) as i32, b.min(8) as i32);
            // Lane i is inside when a <= i < b, i.e. i > a - 1 and b > i.
            let inside = _mm256_and_si256(
                _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(a - 1)),
                _mm256_cmpgt_epi32(_mm256_set1_epi32(b), idx),
            );
            _mm256_blendv_ps(
                _mm256_set1_ps(f32::NEG_INFINITY),
                x,
                _mm256_castsi256_ps(inside),
            )
        }
    }
    #[inline(always)]
    unsafe fn hmax(x: __m256) -> f32 {
        // SAFETY: the features of this width (the trait's contract).
        unsafe {
            let m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m));
            _mm_cvtss_f32(m)
        }
    }
    #[inline(always)]
    unsafe fn exp_fast(x: __m256) -> __m256 {
        use super::exp_fast::*;
        // SAFETY: AVX2 (this impl's contract).
        unsafe {
            let c = _mm256_set1_ps;
            let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, c(FLOOR));
            let xc = _mm256_blendv_ps(c(FLOOR), x, _mm256_cmp_ps::<_CMP_GT_OQ>(x, c(FLOOR)));
            let xc = _mm256_blendv_ps(c(0.0), xc, _mm256_cmp_ps::<_CMP_LT_OQ>(xc, c(0.0)));
            let (z, y) = exp_fast_poly::<Self>(xc);
            let e = _mm256_sub_epi32(
                _mm256_castps_si256(z),
                _mm256_set1_epi32(ROUND.to_bits() as i32),
            );
            let pow2n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                e,
                _mm256_set1_epi32(127),
            )));
            _mm256_and_ps(keep, _mm256_mul_ps(y, pow2n))
        }
    }
    /// # Safety
    /// The trait's contract: the CPU supports AVX2 and FMA.
    #[inline(always)]
    unsafe fn expf_nonpositive(x: __m256) -> __m256 {
        // SAFETY: AVX2 and FMA (this impl's contract).
        unsafe { super::expf::expf8_nonpositive(x) }
    }
    #[inline(always)]
    unsafe fn round_f16(x: __m256) -> __m256 {
        // SAFETY: F16C (this impl's contract).
        unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
    #[inline(always)]
    unsafe fn store_f16(p: *mut half::f16, x: __m256) {
        // SAFETY: F16C; the caller passes 8 writable f16.
        unsafe { _mm_storeu_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }

    type W = __m256d;
    #[inline(always)]
    unsafe fn widen(x: __m256) -> [__m256d; 2] {
        // SAFETY: AVX2 (this impl's contract).
        unsafe {
            [
                _mm256_cvtps_pd(_mm256_castps256_ps128(x)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn add_wide(w: [__m256d; 2], x: __m256) -> [__m256d; 2] {
        // SAFETY: AVX2 (this impl's contract).
        unsafe {
            let x = Self::widen(x);
            [_mm256_add_pd(w[0], x[0]), _mm256_add_pd(w[1], x[1])]
        }
    }
    #[inline(always)]
    unsafe fn narrow(w: [__m256d; 2]) -> __m256 {
        // SAFETY: AVX2 (this impl's contract).
        unsafe { _mm256_set_m128(_mm256_cvtpd_ps(w[1]), _mm256_cvtpd_ps(w[0])) }
    }
}
