//! The 4-bit non-linear formats: IQ4_NL, IQ4_XS and MXFP4.
//!
//! Mirrors `block_iq4_nl`, `block_iq4_xs` and `block_mxfp4` in ggml's `ggml/src/ggml-common.h`
//! and their dequantizers in `ggml/src/ggml-quants.c`. A 4-bit code is not a number but an
//! index into a 16-entry table of i8 values ([`KVALUES_IQ4NL`], [`KVALUES_MXFP4`]); nibble
//! order is Q4_0's: byte `j` of a 32-value group holds value `j` in its low nibble and value
//! `j + 16` in its high nibble.
//!
//! - IQ4_NL (18 bytes / 32 values): f16 `d`, 16 bytes of codes; value = `d * KVALUES_IQ4NL[q]`.
//! - IQ4_XS (136 bytes / 256 values): f16 `d`, u16 `scales_h`, 4 bytes `scales_l`, 128 bytes of
//!   codes (eight groups of 32, 16 bytes each); group `g` has the 6-bit scale
//!   `ls = low nibble g of scales_l | (bits 2g..2g+2 of scales_h) << 4` and
//!   value = `(d * (ls - 32)) * KVALUES_IQ4NL[q]`.
//! - MXFP4 (17 bytes / 32 values): one E8M0 exponent byte `e`, 16 bytes of E2M1 codes;
//!   value = `KVALUES_MXFP4[q] * 2^(e - 128)` (the table holds the E2M1 values doubled, so the
//!   scale is halved: [`e8m0_to_f32_half`]).

use super::f16_to_f32_at;

/// IQ4_NL and IQ4_XS's value table (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// MXFP4's E2M1 values, doubled (`kvalues_mxfp4`): codes 0..8 are 0, 0.5, 1, 1.5, 2, 3, 4, 6
/// times two; bit 3 is the sign.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Bytes of one IQ4_NL block: f16 `d`, then 16 bytes of codes.
pub const IQ4_NL_BYTES: usize = 18;
/// Bytes of one MXFP4 block: the E8M0 byte `e`, then 16 bytes of codes.
pub const MXFP4_BYTES: usize = 17;
/// Bytes of one IQ4_XS super-block: `d` (2), `scales_h` (2), `scales_l` (4), codes (128).
pub const IQ4_XS_BYTES: usize = 136;
/// Values per IQ4_XS super-block.
pub const IQ4_XS_VALUES: usize = 256;

/// `block_iq4_nl`, for documentation and the size check; kernels read the bytes in place.
#[repr(C)]
pub struct BlockIq4Nl {
    pub d: half::f16,
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == IQ4_NL_BYTES);

/// `block_iq4_xs`.
#[repr(C)]
pub struct BlockIq4Xs {
    pub d: half::f16,
    pub scales_h: u16,
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == IQ4_XS_BYTES);

/// `block_mxfp4`.
#[repr(C)]
pub struct BlockMxfp4 {
    pub e: u8,
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == MXFP4_BYTES);

/// `2^(e - 128)` as f32, bit for bit as ggml's `ggml_e8m0_to_fp32_half`: subnormal for
/// `e < 2` (`e = 0`: 2^-128, `e = 1`: 2^-127), normal up to `e = 254` (2^126). `e = 255`
/// (E8M0's NaN) gives 2^127, as in ggml, which does not treat NaN either.
#[inline(always)]
pub const fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// The 6-bit scale of group `g` (0..8) of the IQ4_XS super-block `b`, minus 32 (-32..=31).
#[inline(always)]
pub fn iq4_xs_scale(b: &[u8], g: usize) -> i32 {
    let h = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + g / 2] >> (4 * (g % 2))) & 0x0F;
    let hi = ((h >> (2 * g)) & 3) as u8;
    (lo | (hi << 4)) as i32 - 32
}

/// The f16 `d` of an IQ4_NL block or IQ4_XS super-block, as f32.
#[inline(always)]
pub fn d_of(b: &[u8]) -> f32 {
    f16_to_f32_at(b, 0)
}

/// Code `j` (0..32) of the 16 code bytes `qs` of a 32-value group.
#[inline(always)]
pub fn code(qs: &[u8], j: usize) -> usize {
    if j < 16 {
        (qs[j] & 0x0F) as usize
    } else {
        (qs[j - 16] >> 4) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::DType;

    #[test]
    fn sizes_match_dtype_table() {
        assert_eq!(IQ4_NL_BYTES, DType::IQ4_NL.block_bytes());
        assert_eq!(IQ4_XS_BYTES, DType::IQ4_XS.block_bytes());
        assert_eq!(MXFP4_BYTES, DType::MXFP4.block_bytes());
        assert_eq!(IQ4_XS_VALUES, DType::IQ4_XS.block_elems());
    }

    #[test]
    fn e8m0_half_is_a_power_of_two() {
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(254), 2f32.powi(126));
        assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
    }

    #[test]
    fn iq4_xs_scales_unpack() {
        let mut b = [0u8; IQ4_XS_BYTES];
        // group 0: low 0xF, high 0b11 -> 63; group 1: low 0x0, high 0b00 -> 0; group 7: 0x25.
        b[2..4].copy_from_slice(&(0b10_00_00_00_00_00_00_11u16).to_le_bytes());
        b[4] = 0x0F;
        b[7] = 0x50;
        assert_eq!(iq4_xs_scale(&b, 0), 63 - 32);
        assert_eq!(iq4_xs_scale(&b, 1), -32);
        assert_eq!(iq4_xs_scale(&b, 7), 0x25 - 32);
    }
}
