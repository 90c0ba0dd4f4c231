//! The GGUF v2/v3 header parser: magic, version, counts, metadata, tensor infos, alignment
//! and the data section's bounds. It reads only the header; tensor data is never touched.
//!
//! Every number from the file is distrusted (RELIABILITY.md item 21): counts and lengths are
//! capped by the bytes left before any allocation, all arithmetic is checked, and every
//! tensor's data range must be aligned, inside the file and disjoint from the others.

use super::error::GgufError;
use super::limits::*;
use super::reader::Reader;
use super::strings::StrArray;
use super::tensor::TensorInfo;
use super::value::{MetaArray, MetaType, MetaValue};
use crate::gguf::dtype::DType;
use std::collections::HashSet;

/// What the header says, validated against the file length.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    /// Byte offset of each metadata entry's key, parallel to `metadata`.
    pub meta_offsets: Vec<u64>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section (end of header, rounded up to `alignment`).
    pub data_start: u64,
}

/// Parses the header of `bytes` (the whole file) and checks every tensor's data range.
pub(crate) fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut r = Reader::new(bytes);
    let magic = r.take(4, "magic").map_err(|_| GgufError::BadMagic {
        found: bytes[..bytes.len().min(4)].to_vec(),
    })?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = r.u32("version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(GgufError::UnsupportedVersion {
                version,
                why: "GGUF v1 (32-bit counts) is obsolete; re-convert the model",
            })
        }
        v if (1..=3).contains(&v.swap_bytes()) => {
            return Err(GgufError::UnsupportedVersion {
                version,
                why: "a big-endian file; kiln reads little-endian GGUF only",
            })
        }
        _ => {
            return Err(GgufError::UnsupportedVersion {
                version,
                why: "kiln reads versions 2 and 3",
            })
        }
    }

    let at = r.pos();
    let n_tensors = r.u64("tensor count")?;
    let limit = (r.remaining() / MIN_TENSOR_INFO_BYTES).min(MAX_TENSORS);
    if n_tensors > limit {
        return Err(GgufError::too_large("tensor count", at, n_tensors, limit));
    }
    let at = r.pos();
    let n_kv = r.u64("metadata count")?;
    let limit = r.remaining() / MIN_KV_BYTES;
    if n_kv > limit {
        return Err(GgufError::too_large("metadata count", at, n_kv, limit));
    }

    let (metadata, meta_offsets) = parse_metadata(&mut r, n_kv)?;
    let alignment = alignment(&metadata, &meta_offsets)?;
    let mut tensors = parse_tensor_infos(&mut r, n_tensors)?;

    let header_end = r.pos();
    let data_start = align_up(header_end, alignment)
        .ok_or_else(|| GgufError::overflow("data section start", header_end, "align up"))?;
    let file_len = bytes.len() as u64;
    if !tensors.is_empty() && data_start > file_len {
        return Err(GgufError::truncated(
            "data section padding",
            header_end,
            data_start - header_end,
            file_len - header_end,
        ));
    }
    place_tensors(&mut tensors, data_start, alignment, file_len)?;
    Ok(Header {
        version,
        metadata,
        meta_offsets,
        tensors,
        alignment,
        data_start,
    })
}

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? / a * a)
}

/// Metadata entries in file order, and the byte offset of each entry's key.
type Metadata = (Vec<(String, MetaValue)>, Vec<u64>);

fn parse_metadata(r: &mut Reader<'_>, n_kv: u64) -> Result<Metadata, GgufError> {
    let left = r.remaining();
    let mut metadata = Vec::with_capacity(capacity::<(String, MetaValue)>(n_kv, left));
    let mut offsets = Vec::with_capacity(capacity::<u64>(n_kv, left));
    let mut seen = HashSet::new();
    for i in 0..n_kv {
        let at = r.pos();
        let key = r.string(&format!("metadata key #{i}"), MAX_KEY_LEN)?;
        if !seen.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key, offset: at });
        }
        let field = format!("type of {key}");
        let ty_at = r.pos();
        let ty_id = r.u32(&field)?;
        let ty = MetaType::from_id(ty_id).ok_or(GgufError::UnknownValueType {
            field,
            offset: ty_at,
            type_id: ty_id,
        })?;
        let value = read_value(r, ty, &key, 0)?;
        metadata.push((key, value));
        offsets.push(at);
    }
    Ok((metadata, offsets))
}

/// Reads one value of type `ty`; `depth` counts enclosing arrays.
fn read_value(
    r: &mut Reader<'_>,
    ty: MetaType,
    key: &str,
    depth: usize,
) -> Result<MetaValue, GgufError> {
    Ok(match ty {
        MetaType::U8 => MetaValue::U8(r.u8(key)?),
        MetaType::I8 => MetaValue::I8(r.i8(key)?),
        MetaType::U16 => MetaValue::U16(r.u16(key)?),
        MetaType::I16 => MetaValue::I16(r.i16(key)?),
        MetaType::U32 => MetaValue::U32(r.u32(key)?),
        MetaType::I32 => MetaValue::I32(r.i32(key)?),
        MetaType::U64 => MetaValue::U64(r.u64(key)?),
        MetaType::I64 => MetaValue::I64(r.i64(key)?),
        MetaType::F32 => MetaValue::F32(r.f32(key)?),
        MetaType::F64 => MetaValue::F64(r.f64(key)?),
        MetaType::Bool => MetaValue::Bool(r.bool(key)?),
        MetaType::String => MetaValue::String(r.string(key, MAX_STRING_LEN)?),
        MetaType::Array => MetaValue::Array(read_array(r, key, depth + 1)?),
    })
}

/// Initial capacity for `len` elements of `T`: never an allocation larger than the bytes
/// left in the file (vectors may still grow as real elements are parsed).
fn capacity<T>(len: u64, remaining: u64) -> usize {
    let fit = remaining / (std::mem::size_of::<T>().max(1) as u64);
    len.min(fit) as usize
}

/// Reads `n` elements with `f` into a vector whose first allocation is capped by the file.
fn read_vec<T>(
    r: &mut Reader<'_>,
    n: u64,
    mut f: impl FnMut(&mut Reader<'_>) -> Result<T, GgufError>,
) -> Result<Vec<T>, GgufError> {
    let mut v = Vec::with_capacity(capacity::<T>(n, r.remaining()));
    for _ in 0..n {
        v.push(f(r)?);
    }
    Ok(v)
}

/// Reads an array (element type, length, elements); `depth` is 1 for a top-level array.
fn read_array(r: &mut Reader<'_>, key: &str, depth: usize) -> Result<MetaArray, GgufError> {
    let at = r.pos();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            field: key.to_string(),
            offset: at,
            limit: MAX_ARRAY_DEPTH,
        });
    }
    let field = format!("array element type of {key}");
    let ty_id = r.u32(&field)?;
    let ty = MetaType::from_id(ty_id).ok_or(GgufError::UnknownValueType {
        field,
        offset: at,
        type_id: ty_id,
    })?;
    let len_at = r.pos();
    let len_field = format!("array length of {key}");
    let n = r.u64(&len_field)?;
    let limit = (r.remaining() / ty.min_file_size()).min(MAX_ARRAY_LEN);
    if n > limit {
        return Err(GgufError::too_large(&len_field, len_at, n, limit));
    }
    Ok(match ty {
        MetaType::U8 => MetaArray::U8(read_vec(r, n, |r| r.u8(key))?),
        MetaType::I8 => MetaArray::I8(read_vec(r, n, |r| r.i8(key))?),
        MetaType::U16 => MetaArray::U16(read_vec(r, n, |r| r.u16(key))?),
        MetaType::I16 => MetaArray::I16(read_vec(r, n, |r| r.i16(key))?),
        MetaType::U32 => MetaArray::U32(read_vec(r, n, |r| r.u32(key))?),
        MetaType::I32 => MetaArray::I32(read_vec(r, n, |r| r.i32(key))?),
        MetaType::U64 => MetaArray::U64(read_vec(r, n, |r| r.u64(key))?),
        MetaType::I64 => MetaArray::I64(read_vec(r, n, |r| r.i64(key))?),
        MetaType::F32 => MetaArray::F32(read_vec(r, n, |r| r.f32(key))?),
        MetaType::F64 => MetaArray::F64(read_vec(r, n, |r| r.f64(key))?),
        MetaType::Bool => MetaArray::Bool(read_vec(r, n, |r| r.bool(key))?),
        MetaType::String => {
            let mut a = StrArray::with_capacity(capacity::<usize>(n, r.remaining()), 0);
            for _ in 0..n {
                a.push(r.str(key, MAX_STRING_LEN)?);
            }
            MetaArray::String(a)
        }
        MetaType::Array => MetaArray::Array(read_vec(r, n, |r| read_array(r, key, depth + 1))?),
    })
}

/// `general.alignment`: a u32 power of two, default 32.
fn alignment(metadata: &[(String, MetaValue)], offsets: &[u64]) -> Result<u64, GgufError> {
    let Some(i) = metadata.iter().position(|(k, _)| k == ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let offset = offsets[i];
    match metadata[i].1 {
        MetaValue::U32(a) if a.is_power_of_two() => Ok(a.into()),
        MetaValue::U32(a) => Err(GgufError::BadAlignment {
            offset,
            value: a.into(),
        }),
        ref v => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.to_string(),
            offset,
            expected: "u32",
            found: v.type_desc(),
        }),
    }
}

fn parse_tensor_infos(r: &mut Reader<'_>, n: u64) -> Result<Vec<TensorInfo>, GgufError> {
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(capacity::<TensorInfo>(n, r.remaining()));
    let mut seen = HashSet::new();
    for i in 0..n {
        let at = r.pos();
        let name = r.string(&format!("tensor #{i} name"), MAX_TENSOR_NAME_LEN)?;
        if !seen.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { name, offset: at });
        }
        let bad = |why: String| GgufError::BadShape {
            tensor: name.clone(),
            offset: at,
            why,
        };
        let n_dims = r.u32(&format!("n_dims of {name}"))?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(bad(format!("n_dims is {n_dims}, must be 1..={MAX_DIMS}")));
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        let mut n_elems: u64 = 1;
        for d in 0..n_dims {
            let dim = r.u64(&format!("dimension {d} of {name}"))?;
            if dim == 0 || dim > i64::MAX as u64 {
                return Err(bad(format!("dimension {d} is {dim}, must be 1..=2^63-1")));
            }
            n_elems = n_elems
                .checked_mul(dim)
                .filter(|&e| e <= i64::MAX as u64)
                .ok_or_else(|| bad("the product of the dimensions overflows".to_string()))?;
            shape.push(dim);
        }
        let ty_at = r.pos();
        let type_id = r.u32(&format!("type of {name}"))?;
        let dtype = DType::from_ggml_id(type_id).ok_or_else(|| GgufError::UnsupportedDType {
            tensor: name.clone(),
            offset: ty_at,
            type_id,
            type_name: DType::describe_ggml_id(type_id),
        })?;
        let block = dtype.block_elems() as u64;
        if !shape[0].is_multiple_of(block) {
            return Err(bad(format!(
                "row length {} is not a multiple of the {dtype} block size {block}",
                shape[0]
            )));
        }
        let n_bytes = dtype
            .bytes_for(n_elems)
            .ok_or_else(|| bad(format!("{n_elems} {dtype} values: byte size overflows")))?;
        let rel = r.u64(&format!("data offset of {name}"))?;
        tensors.push(TensorInfo {
            name,
            dtype,
            shape,
            offset: rel,
            n_bytes,
            info_offset: at,
        });
    }
    Ok(tensors)
}

/// Turns relative offsets into absolute ones and checks alignment, bounds and overlap.
fn place_tensors(
    tensors: &mut [TensorInfo],
    data_start: u64,
    alignment: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    for t in tensors.iter_mut() {
        if !t.offset.is_multiple_of(alignment) {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.info_offset,
                data_offset: t.offset,
                alignment,
            });
        }
        let oob = |start: u64, end: u64| GgufError::OutOfBounds {
            tensor: t.name.clone(),
            offset: t.info_offset,
            start,
            end,
            file_len,
        };
        let start = data_start
            .checked_add(t.offset)
            .ok_or_else(|| oob(u64::MAX, u64::MAX))?;
        let end = start
            .checked_add(t.n_bytes)
            .ok_or_else(|| oob(start, u64::MAX))?;
        if end > file_len {
            return Err(oob(start, end));
        }
        t.offset = start;
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].offset);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        // Both ends were bounds-checked above, so the addition cannot overflow.
        if a.offset + a.n_bytes > b.offset {
            return Err(GgufError::Overlap {
                first: a.name.clone(),
                second: b.name.clone(),
                at: b.offset,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::writer::{put_str, put_u32, put_u64};

    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        put_u32(&mut b, version);
        put_u64(&mut b, n_tensors);
        put_u64(&mut b, n_kv);
        b
    }

    #[test]
    fn empty_v2_and_v3_files_parse() {
        for v in [2, 3] {
            let h = parse(&header(v, 0, 0)).unwrap();
            assert_eq!((h.version, h.alignment, h.data_start), (v, 32, 32));
            assert!(h.metadata.is_empty() && h.tensors.is_empty());
        }
    }

    #[test]
    fn offsets_become_absolute_and_aligned() {
        let mut b = header(3, 1, 0);
        put_str(&mut b, "t");
        put_u32(&mut b, 1);
        put_u64(&mut b, 8);
        put_u32(&mut b, 0); // F32
        put_u64(&mut b, 0);
        let header_end = b.len() as u64;
        b.resize(64 + 32, 0);
        let h = parse(&b).unwrap();
        assert_eq!(h.data_start, align_up(header_end, 32).unwrap());
        assert_eq!(h.tensors[0].offset, h.data_start);
        assert_eq!(h.tensors[0].n_bytes, 32);
    }

    #[test]
    fn helpers() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(33, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
        assert_eq!(capacity::<u64>(1000, 80), 10);
        assert_eq!(capacity::<u8>(5, 80), 5);
        assert_eq!(capacity::<()>(5, 0), 0);
    }

    #[test]
    fn file_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::gguf::GgufFile>();
        check::<crate::gguf::TensorData>();
    }
}
