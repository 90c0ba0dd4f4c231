//! Metadata values: the thirteen GGUF value types, and typed arrays.
//!
//! Arrays are stored typed (`Vec<u32>`, `Vec<String>`, ...), so "every element has the declared
//! type" holds by construction; nested arrays are a `Vec<MetaArray>`, each with its own type.

use super::strings::StrArray;
use std::fmt;

/// A GGUF metadata value type, with its id in the file (`gguf_type` in gguf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl MetaType {
    /// The type with id `id`, if it is one of the thirteen defined ones.
    pub fn from_id(id: u32) -> Option<MetaType> {
        use MetaType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id written in the file.
    pub fn id(self) -> u32 {
        use MetaType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use MetaType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// The fewest bytes one value of this type takes in the file (strings and arrays: their
    /// empty form). Used to cap array lengths by the bytes left before allocating.
    pub fn min_file_size(self) -> u64 {
        use MetaType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            String => 8,
            Array => 12,
        }
    }
}

impl fmt::Display for MetaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(MetaArray),
}

/// A typed array value; nested arrays hold one `MetaArray` per element.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(StrArray),
    Array(Vec<MetaArray>),
}

impl MetaValue {
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::F64(_) => MetaType::F64,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::String(_) => MetaType::String,
            MetaValue::Array(_) => MetaType::Array,
        }
    }

    /// A type description for errors and `kiln inspect`: `u32`, `[string; 49152]`, ...
    pub fn type_desc(&self) -> String {
        match self {
            MetaValue::Array(a) => a.type_desc(),
            v => v.meta_type().name().to_string(),
        }
    }

    /// The value as an integer, if it is one of the eight integer types.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as a float, if it is `f32` or `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }
}

impl MetaArray {
    /// The element type.
    pub fn elem_type(&self) -> MetaType {
        match self {
            MetaArray::U8(_) => MetaType::U8,
            MetaArray::I8(_) => MetaType::I8,
            MetaArray::U16(_) => MetaType::U16,
            MetaArray::I16(_) => MetaType::I16,
            MetaArray::U32(_) => MetaType::U32,
            MetaArray::I32(_) => MetaType::I32,
            MetaArray::U64(_) => MetaType::U64,
            MetaArray::I64(_) => MetaType::I64,
            MetaArray::F32(_) => MetaType::F32,
            MetaArray::F64(_) => MetaType::F64,
            MetaArray::Bool(_) => MetaType::Bool,
            MetaArray::String(_) => MetaType::String,
            MetaArray::Array(_) => MetaType::Array,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `[u32; 3]`, `[string; 49152]`, `[[i32]; 2]` (nested arrays name their first element type).
    pub fn type_desc(&self) -> String {
        match self {
            MetaArray::Array(v) => {
                let inner = v
                    .first()
                    .map(|a| format!("[{}]", a.elem_type()))
                    .unwrap_or_else(|| "array".to_string());
                format!("[{inner}; {}]", v.len())
            }
            a => format!("[{}; {}]", a.elem_type(), a.len()),
        }
    }

    /// Element `i` as a scalar value (nested arrays as `MetaValue::Array`).
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        Some(match self {
            MetaArray::U8(v) => MetaValue::U8(*v.get(i)?),
            MetaArray::I8(v) => MetaValue::I8(*v.get(i)?),
            MetaArray::U16(v) => MetaValue::U16(*v.get(i)?),
            MetaArray::I16(v) => MetaValue::I16(*v.get(i)?),
            MetaArray::U32(v) => MetaValue::U32(*v.get(i)?),
            MetaArray::I32(v) => MetaValue::I32(*v.get(i)?),
            MetaArray::U64(v) => MetaValue::U64(*v.get(i)?),
            MetaArray::I64(v) => MetaValue::I64(*v.get(i)?),
            MetaArray::F32(v) => MetaValue::F32(*v.get(i)?),
            MetaArray::F64(v) => MetaValue::F64(*v.get(i)?),
            MetaArray::Bool(v) => MetaValue::Bool(*v.get(i)?),
            MetaArray::String(v) => MetaValue::String(v.get(i)?.to_string()),
            MetaArray::Array(v) => MetaValue::Array(v.get(i)?.clone()),
        })
    }
}

impl fmt::Display for MetaValue {
    /// Scalars as themselves, strings quoted (JSON-style escapes), arrays in full.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::String(s) => write!(f, "{s:?}"),
            MetaValue::Array(a) => {
                f.write_str("[")?;
                for i in 0..a.len() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if let Some(v) = a.get(i) {
                        write!(f, "{v}")?;
                    }
                }
                f.write_str("]")
            }
        }
    }
}
