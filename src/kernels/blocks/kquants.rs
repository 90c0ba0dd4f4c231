//! Block layouts of ggml's K-quants ("super-blocks" of 256 values).
//!
//! Mirrors the `block_q*_K` structs of `ggml/src/ggml-common.h` (QK_K = 256) byte for byte, so a
//! GGUF tensor's bytes are read in place. f16 fields are `half::f16`; multi-byte fields are
//! little-endian, as in GGUF. Row bytes carry no alignment promise, so blocks are read with
//! [`read_block`] (an unaligned copy) rather than by casting the slice.

use half::f16;

/// Values per K-quant super-block (`QK_K`).
pub const QK_K: usize = 256;

/// 2-bit weights: 16 sub-blocks of 16 values, 4-bit scale and 4-bit min per sub-block.
///
/// `x = d * (scales[g] & 0xF) * q - dmin * (scales[g] >> 4)`, q in 0..=3.
/// `qs[32*h + l]` holds, for half `h` (128 values), value `128h + 32s + l` in bits `2s..2s+2`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// 3-bit weights: 16 sub-blocks of 16 values with signed 6-bit scales (stored biased by 32).
///
/// The low two bits of each value are packed like Q2_K's `qs`; the third bit of value
/// `32m + l` (m in 0..8) is bit `m` of `hmask[l]`. A set bit means q in 0..=3, a clear bit
/// q - 4. Scale `g` has its low 4 bits in nibble `g / 8` of `scales[g % 8]` and its high
/// 2 bits in bits `2*(g/4)..` of `scales[8 + g % 4]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// 4-bit weights: 8 sub-blocks of 32 values, 6-bit scale and 6-bit min per sub-block
/// (packed in `scales`, see [`scale_min_k4`]).
///
/// `x = d * sc[j] * q - dmin * m[j]`; `qs[32*p + l]` holds value `64p + l` in its low nibble
/// and value `64p + 32 + l` in its high nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// 5-bit weights: Q4_K plus a fifth bit per value; value `64p + l` has its high bit in
/// bit `2p` of `qh[l]`, value `64p + 32 + l` in bit `2p + 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// 6-bit weights: 16 sub-blocks of 16 values with signed 8-bit scales; `x = d * sc * (q - 32)`.
///
/// For half `h` (128 values) and `l < 32`: `ql[64h + l]` holds values `128h + l` (low nibble)
/// and `128h + 64 + l` (high nibble), `ql[64h + 32 + l]` values `128h + 32 + l` and
/// `128h + 96 + l`; `qh[32h + l]` holds their top two bits at shifts 0, 4, 2, 6 respectively
/// (value `128h + 32s + l` at shift `2s`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// 8-bit activations for K-quant dot products: `x = d * qs`, plus `bsums[g]` = sum of
/// `qs[16g..16g+16]`, which lets a weight's min/offset term be applied once per sub-block.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

/// A K-quant block type: plain old data whose every bit pattern is a valid value.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only integer / `f16` / `f32` fields and no padding.
pub unsafe trait KBlock: Copy {
    /// Size in bytes (equal to the dtype table's `block_bytes`).
    const BYTES: usize;
}

// SAFETY: all five structs are #[repr(C)], made of u8/i8/i16/f16/f32 fields, and their sizes
// (asserted above) equal the sum of their fields, so they have no padding.
unsafe impl KBlock for BlockQ2K {
    const BYTES: usize = 84;
}
// SAFETY: as above.
unsafe impl KBlock for BlockQ3K {
    const BYTES: usize = 110;
}
// SAFETY: as above.
unsafe impl KBlock for BlockQ4K {
    const BYTES: usize = 144;
}
// SAFETY: as above.
unsafe impl KBlock for BlockQ5K {
    const BYTES: usize = 176;
}
// SAFETY: as above.
unsafe impl KBlock for BlockQ6K {
    const BYTES: usize = 210;
}
// SAFETY: as above.
unsafe impl KBlock for BlockQ8K {
    const BYTES: usize = 292;
}

/// Block `i` of `bytes` (copied out, so `bytes` needs no alignment).
///
/// Panics if `bytes` holds fewer than `i + 1` blocks.
#[inline(always)]
pub fn read_block<B: KBlock>(bytes: &[u8], i: usize) -> B {
    let src = &bytes[i * B::BYTES..(i + 1) * B::BYTES];
    // SAFETY: `src` is exactly `size_of::<B>()` readable bytes (KBlock::BYTES equals the struct
    // size), `read_unaligned` has no alignment requirement, and every bit pattern is a valid `B`.
    unsafe { src.as_ptr().cast::<B>().read_unaligned() }
}

/// Store `block` as block `i` of `bytes`.
///
/// Panics if `bytes` holds fewer than `i + 1` blocks.
#[inline(always)]
pub fn write_block<B: KBlock>(bytes: &mut [u8], i: usize, block: &B) {
    let dst = &mut bytes[i * B::BYTES..(i + 1) * B::BYTES];
    // SAFETY: `dst` is exactly `size_of::<B>()` writable bytes, the write is unaligned, and `B`
    // has no padding, so every byte written is initialized.
    unsafe { dst.as_mut_ptr().cast::<B>().write_unaligned(*block) }
}

/// Scale and min of sub-block `j` (0..8) from Q4_K/Q5_K's 12 packed bytes: sub-blocks 0..4 use
/// the low 6 bits of bytes `j` (scale) and `j + 4` (min); sub-blocks 4..8 take their low 4 bits
/// from the nibbles of byte `j + 4` and their high 2 bits from the top bits of bytes `j - 4`
/// (scale) and `j` (min).
#[inline(always)]
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All 8 (scale, min) pairs of a Q4_K/Q5_K block, as `([sc; 8], [m; 8])`.
#[inline(always)]
pub fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = scale_min_k4(j, q);
    }
    (sc, m)
}

/// Inverse of [`scales_mins_k4`]: pack 6-bit scales and mins (each < 64) into 12 bytes.
pub fn pack_scales_mins_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (sc[j] & 63, m[j] & 63);
        if j < 4 {
            q[j] |= ls;
            q[j + 4] |= lm;
        } else {
            q[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            q[j - 4] |= (ls >> 4) << 6;
            q[j] |= (lm >> 4) << 6;
        }
    }
    q
}

/// The 16 signed scales (-32..=31) of a Q3_K block from its 12 packed bytes.
#[inline(always)]
pub fn scales_q3k(q: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (g, o) in out.iter_mut().enumerate() {
        let low = (q[g % 8] >> (4 * (g / 8))) & 0xF;
        let high = (q[8 + g % 4] >> (2 * (g / 4))) & 3;
        *o = ((low | (high << 4)) as i8) - 32;
    }
    out
}

/// Inverse of [`scales_q3k`]: pack 16 scales in -32..=31 into 12 bytes.
pub fn pack_scales_q3k(s: &[i8; 16]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for (g, &v) in s.iter().enumerate() {
        let l = (v.clamp(-32, 31) + 32) as u8;
        q[g % 8] |= (l & 0xF) << (4 * (g / 8));
        q[8 + g % 4] |= (l >> 4) << (2 * (g / 4));
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::DType;

    #[test]
    fn sizes_match_the_dtype_table() {
        assert_eq!(BlockQ2K::BYTES, DType::Q2_K.block_bytes());
        assert_eq!(BlockQ3K::BYTES, DType::Q3_K.block_bytes());
        assert_eq!(BlockQ4K::BYTES, DType::Q4_K.block_bytes());
        assert_eq!(BlockQ5K::BYTES, DType::Q5_K.block_bytes());
        assert_eq!(BlockQ6K::BYTES, DType::Q6_K.block_bytes());
        assert_eq!(BlockQ8K::BYTES, DType::Q8_K.block_bytes());
        for d in [
            DType::Q2_K,
            DType::Q3_K,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
        ] {
            assert_eq!(d.block_elems(), QK_K);
        }
    }

    #[test]
    fn scale_packing_round_trips() {
        let sc: [u8; 8] = [0, 1, 17, 63, 32, 5, 48, 62];
        let m: [u8; 8] = [63, 0, 9, 33, 16, 61, 2, 40];
        assert_eq!(scales_mins_k4(&pack_scales_mins_k4(&sc, &m)), (sc, m));
        let s3: [i8; 16] = [
            -32, -1, 0, 31, 5, -17, 12, 30, -9, 3, 7, -30, 15, 16, -16, 1,
        ];
        assert_eq!(scales_q3k(&pack_scales_q3k(&s3)), s3);
    }
}
