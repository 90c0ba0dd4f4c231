//! The 32-value block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Mirrors `block_q4_0` .. `block_q8_1` in ggml's `ggml/src/ggml-common.h`.
//! Nibble order (Q4/Q5): byte `j` of `qs` holds value `j` in its low nibble and value
//! `j + 16` in its high nibble. Q5's fifth bits live in `qh` (a little-endian u32):
//! bit `j` is the high bit of value `j`.

use half::f16;

/// Values per block for every legacy format.
pub const QK: usize = 32;

/// Q4_0: value = d * (q - 8), q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Q4_1: value = d * q + m, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// Q5_0: value = d * (q - 16), q in 0..32 (low 4 bits in `qs`, bit 4 in `qh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// Q5_1: value = d * q + m, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// Q8_0: value = d * q, q in -127..=127 (the weight format and Q4_0/Q5_0/Q8_0's activations).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// Q8_1: value = d * q; `s = d * sum(q)` (Q4_1/Q5_1's activations: `s` folds the
/// weights' minimum into one multiply-add per block).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

fn h(b: &[u8], off: usize) -> f16 {
    f16::from_le_bytes([b[off], b[off + 1]])
}

fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[off..off + N]);
    out
}

fn iarr(b: &[u8], off: usize) -> [i8; QK] {
    std::array::from_fn(|i| b[off + i] as i8)
}

/// Safe (de)serialization of one block from/to its GGUF bytes.
pub trait Block: Sized + Copy {
    /// Size in bytes (equal to `size_of::<Self>()` and to the dtype table's `block_bytes`).
    const BYTES: usize;
    /// Parses the first `BYTES` bytes of `b`. Panics if `b` is shorter.
    fn read(b: &[u8]) -> Self;
    /// Writes the block into the first `BYTES` bytes of `out`. Panics if `out` is shorter.
    fn write(&self, out: &mut [u8]);
}

impl Block for BlockQ4_0 {
    const BYTES: usize = 18;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            qs: arr(b, 2),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..18].copy_from_slice(&self.qs);
    }
}

impl Block for BlockQ4_1 {
    const BYTES: usize = 20;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            m: h(b, 2),
            qs: arr(b, 4),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..20].copy_from_slice(&self.qs);
    }
}

impl Block for BlockQ5_0 {
    const BYTES: usize = 22;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            qh: arr(b, 2),
            qs: arr(b, 6),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..6].copy_from_slice(&self.qh);
        out[6..22].copy_from_slice(&self.qs);
    }
}

impl Block for BlockQ5_1 {
    const BYTES: usize = 24;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            m: h(b, 2),
            qh: arr(b, 4),
            qs: arr(b, 8),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..8].copy_from_slice(&self.qh);
        out[8..24].copy_from_slice(&self.qs);
    }
}

impl Block for BlockQ8_0 {
    const BYTES: usize = 34;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            qs: iarr(b, 2),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, q) in out[2..34].iter_mut().zip(self.qs) {
            *o = q as u8;
        }
    }
}

impl Block for BlockQ8_1 {
    const BYTES: usize = 36;
    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        Self {
            d: h(b, 0),
            s: h(b, 2),
            qs: iarr(b, 4),
        }
    }
    #[inline(always)]
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.s.to_le_bytes());
        for (o, q) in out[4..36].iter_mut().zip(self.qs) {
            *o = q as u8;
        }
    }
}

impl BlockQ5_0 {
    /// The 5-bit value `j` (0..32).
    #[inline(always)]
    pub fn q(&self, j: usize) -> u8 {
        q5(&self.qs, &self.qh, j)
    }
}

impl BlockQ5_1 {
    /// The 5-bit value `j` (0..32).
    #[inline(always)]
    pub fn q(&self, j: usize) -> u8 {
        q5(&self.qs, &self.qh, j)
    }
}

/// The 4-bit value `j` (0..32) of a nibble array.
#[inline(always)]
pub fn q4(qs: &[u8; QK / 2], j: usize) -> u8 {
    if j < QK / 2 {
        qs[j] & 0x0F
    } else {
        qs[j - QK / 2] >> 4
    }
}

#[inline(always)]
fn q5(qs: &[u8; QK / 2], qh: &[u8; 4], j: usize) -> u8 {
    let hbits = u32::from_le_bytes(*qh);
    q4(qs, j) | ((((hbits >> j) & 1) as u8) << 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::DType;

    #[test]
    fn sizes_match_dtype_table() {
        assert_eq!(BlockQ4_0::BYTES, DType::Q4_0.block_bytes());
        assert_eq!(BlockQ4_1::BYTES, DType::Q4_1.block_bytes());
        assert_eq!(BlockQ5_0::BYTES, DType::Q5_0.block_bytes());
        assert_eq!(BlockQ5_1::BYTES, DType::Q5_1.block_bytes());
        assert_eq!(BlockQ8_0::BYTES, DType::Q8_0.block_bytes());
        assert_eq!(BlockQ8_1::BYTES, DType::Q8_1.block_bytes());
    }

    #[test]
    fn read_write_round_trip() {
        let bytes: Vec<u8> = (0..24u8).map(|i| i.wrapping_mul(37)).collect();
        let b = BlockQ5_1::read(&bytes);
        let mut out = [0u8; 24];
        b.write(&mut out);
        assert_eq!(&out[..], &bytes[..]);
    }
}
