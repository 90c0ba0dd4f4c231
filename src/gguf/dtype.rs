//! The one table of tensor element types: GGUF/ggml ids, block geometry and names.
//!
//! Mirrors `ggml/include/ggml.h` (`enum ggml_type`) and the block structs in
//! `ggml/src/ggml-common.h`. Every other module asks this table instead of matching on ids.

use std::fmt;

/// A tensor element type kiln knows: plain floats and ggml's block-quantized formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ4_NL,
    IQ4_XS,
    MXFP4,
}

/// Geometry of one dtype: `block_elems` values are stored in `block_bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DTypeInfo {
    pub dtype: DType,
    pub name: &'static str,
    /// The id in GGUF tensor infos (`ggml_type`).
    pub ggml_id: u32,
    pub block_elems: usize,
    pub block_bytes: usize,
}

const fn info(
    dtype: DType,
    name: &'static str,
    ggml_id: u32,
    block_elems: usize,
    block_bytes: usize,
) -> DTypeInfo {
    DTypeInfo {
        dtype,
        name,
        ggml_id,
        block_elems,
        block_bytes,
    }
}

/// All known dtypes, in `DType` declaration order.
pub const DTYPES: [DTypeInfo; 18] = [
    info(DType::F32, "F32", 0, 1, 4),
    info(DType::F16, "F16", 1, 1, 2),
    info(DType::BF16, "BF16", 30, 1, 2),
    info(DType::Q4_0, "Q4_0", 2, 32, 18),
    info(DType::Q4_1, "Q4_1", 3, 32, 20),
    info(DType::Q5_0, "Q5_0", 6, 32, 22),
    info(DType::Q5_1, "Q5_1", 7, 32, 24),
    info(DType::Q8_0, "Q8_0", 8, 32, 34),
    info(DType::Q8_1, "Q8_1", 9, 32, 36),
    info(DType::Q2_K, "Q2_K", 10, 256, 84),
    info(DType::Q3_K, "Q3_K", 11, 256, 110),
    info(DType::Q4_K, "Q4_K", 12, 256, 144),
    info(DType::Q5_K, "Q5_K", 13, 256, 176),
    info(DType::Q6_K, "Q6_K", 14, 256, 210),
    info(DType::Q8_K, "Q8_K", 15, 256, 292),
    // The 4-bit non-linear formats: 16-entry value tables, see `kernels::blocks::nonlinear`.
    info(DType::IQ4_NL, "IQ4_NL", 20, 32, 18),
    info(DType::IQ4_XS, "IQ4_XS", 23, 256, 136),
    info(DType::MXFP4, "MXFP4", 39, 32, 17),
];

/// Names of ggml types kiln does not support, for error messages (index = ggml id).
const OTHER_GGML_NAMES: &[(u32, &str)] = &[
    (4, "Q4_2 (removed)"),
    (5, "Q4_3 (removed)"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (40, "NVFP4"),
    (41, "Q1_0"),
    (42, "Q2_0"),
];

impl DType {
    /// This dtype's row in [`DTYPES`].
    pub const fn info(self) -> &'static DTypeInfo {
        &DTYPES[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.info().name
    }

    pub const fn ggml_id(self) -> u32 {
        self.info().ggml_id
    }

    /// Values per block (1 for plain floats, 32 or 256 for quantized types).
    pub const fn block_elems(self) -> usize {
        self.info().block_elems
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        self.info().block_bytes
    }

    pub const fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// The dtype with GGUF/ggml id `id`, if kiln supports it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DTYPES.iter().find(|i| i.ggml_id == id).map(|i| i.dtype)
    }

    /// A human name for any ggml id, known to kiln or not (for error messages).
    pub fn describe_ggml_id(id: u32) -> String {
        if let Some(d) = DType::from_ggml_id(id) {
            return d.name().to_string();
        }
        match OTHER_GGML_NAMES.iter().find(|(i, _)| *i == id) {
            Some((_, n)) => format!("{n} (ggml type {id})"),
            None => format!("unknown ggml type {id}"),
        }
    }

    /// The dtype named `name` (case-insensitive, e.g. "q4_1", "Q4_K", "f16").
    pub fn from_name(name: &str) -> Option<DType> {
        DTYPES
            .iter()
            .find(|i| i.name.eq_ignore_ascii_case(name))
            .map(|i| i.dtype)
    }

    /// Bytes used by `n_elems` values; `None` when `n_elems` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub fn bytes_for(self, n_elems: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n_elems.is_multiple_of(be) {
            return None;
        }
        (n_elems / be).checked_mul(self.block_bytes() as u64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_declaration_order() {
        for (i, row) in DTYPES.iter().enumerate() {
            assert_eq!(row.dtype as usize, i, "{}", row.name);
            assert_eq!(DType::from_ggml_id(row.ggml_id), Some(row.dtype));
            assert_eq!(DType::from_name(row.name), Some(row.dtype));
        }
    }

    #[test]
    fn sizes_are_checked() {
        assert_eq!(DType::Q4_1.bytes_for(64), Some(40));
        assert_eq!(DType::Q4_1.bytes_for(33), None);
        assert_eq!(DType::Q8_K.bytes_for(256), Some(292));
        assert_eq!(DType::F32.bytes_for(u64::MAX), None);
        assert_eq!(DType::describe_ggml_id(20), "IQ4_NL");
        assert_eq!(DType::IQ4_XS.bytes_for(512), Some(272));
        assert_eq!(DType::MXFP4.bytes_for(64), Some(34));
        assert_eq!(DType::IQ4_NL.bytes_for(48), None);
        assert!(DType::describe_ggml_id(18).contains("IQ3_XXS (ggml type 18)"));
        assert!(DType::describe_ggml_id(40).contains("NVFP4"));
        assert!(DType::describe_ggml_id(999).contains("999"));
    }
}
