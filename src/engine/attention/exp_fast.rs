//! The `exp` of the long-context attention order: [`exp_fast`] and the constants its SIMD
//! twins (`super::simd`) share, so every vector width rounds it alike.

/// Below this the result is 0 (e^-87.3 ~ 1.2e-38).
pub(super) const FLOOR: f32 = -87.3;
pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^15.
pub(super) const LN2_HI: f32 = 0.693_359_4;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
pub(super) const ROUND: f32 = 12_582_912.0;
/// The polynomial in `r`, highest degree first, then 0.5.
pub(super) const P: [f32; 5] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
];

/// `e^x` for `x <= 0` in f32, about 1 ulp (Cephes `expf`: `x = n ln2 + r`, a degree-6
/// polynomial in `r`, times `2^n` built from its bits), in separate multiplies and adds so every
/// width rounds it alike ([`super::simd::Simd::exp_fast`]). 0 below -87.3, for `-inf` and NaN;
/// positive `x` is taken as 0.
pub(super) fn exp_fast(x: f32) -> f32 {
    let keep = x >= FLOOR;
    let xc = if x > FLOOR { x } else { FLOOR };
    let xc = if xc < 0.0 { xc } else { 0.0 };
    let z = xc * LOG2E + ROUND;
    let n = z - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = P[0];
    for &k in &P[1..] {
        p = p * r + k;
    }
    p = p * r + 0.5;
    let y = (p * (r * r) + r) + 1.0;
    let pow2n = f32::from_bits(z.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    if keep {
        y * pow2n
    } else {
        0.0
    }
}
