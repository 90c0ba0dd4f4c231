//! Writing the quantized GGUF v3 file in one streaming pass: header (metadata, tensor infos
//! with offsets computed from the plan), then each tensor's data, converted on rayon.

use super::{
    llama_ftype, QuantizeError, Summary, TensorDone, TensorPlan, FILE_TYPE_KEY, QUANT_VERSION,
    QUANT_VERSION_KEY,
};
use crate::gguf::writer::{put_str, put_u32, put_u64, put_value};
use crate::gguf::{GgufFile, MetaValue};
use crate::kernels::shape::row_bytes;
use crate::kernels::{self, DType};
use rayon::prelude::*;
use std::io::Write;
use std::time::Instant;

/// Values converted per rayon task (bounds the f32 scratch to one row, the work to ~64 Ki).
const TASK_ELEMS: usize = 1 << 16;

/// Writes `input` converted as `plans` says (from [`super::plan`](fn@super::plan) with the same `target`) to
/// `w` as GGUF v3: metadata copied in order with `general.file_type` set to `target`'s
/// llama ftype and `general.quantization_version` added if absent; tensors in plan order.
/// `on_tensor` is called after each tensor's data is written. Does not flush `w`.
pub fn quantize_to(
    input: &GgufFile,
    plans: &[TensorPlan],
    target: DType,
    mut w: impl Write,
    mut on_tensor: impl FnMut(&TensorDone<'_>),
) -> Result<Summary, QuantizeError> {
    let t0 = Instant::now();
    let align = input.alignment();
    let head = header(input, plans, target, align)?;
    w.write_all(&head)?;
    let mut summary = Summary {
        n_tensors: plans.len(),
        file_bytes: head.len() as u64,
        ..Summary::default()
    };
    for (index, p) in plans.iter().enumerate() {
        let info = input
            .tensor(&p.name)
            .ok_or_else(|| QuantizeError::BadTensor {
                name: p.name.clone(),
                why: "planned but not in the input".into(),
            })?;
        let src = input.tensor_bytes(info);
        if p.is_copy() {
            w.write_all(src)?;
        } else {
            let out = convert(p, src)?;
            w.write_all(&out)?;
            summary.n_converted += 1;
        }
        if matches!(p.reason, super::PlanReason::Fallback { .. }) {
            summary.n_fallback += 1;
        }
        let pad = padding(p.dst_bytes, align);
        w.write_all(&vec![0u8; pad as usize])?;
        summary.src_bytes += p.src_bytes;
        summary.dst_bytes += p.dst_bytes;
        summary.file_bytes += p.dst_bytes + pad;
        on_tensor(&TensorDone {
            index,
            count: plans.len(),
            plan: p,
            elapsed: t0.elapsed(),
        });
    }
    summary.elapsed = t0.elapsed();
    Ok(summary)
}

/// Dequantizes `src` row by row and requantizes to `p.dst`; rows are split over rayon.
fn convert(p: &TensorPlan, src: &[u8]) -> Result<Vec<u8>, QuantizeError> {
    let bad = |why: String| QuantizeError::BadTensor {
        name: p.name.clone(),
        why,
    };
    let from = kernels::kernels(p.src).map_err(|_| QuantizeError::UnsupportedSource {
        name: p.name.clone(),
        dtype: p.src,
    })?;
    let to_f32 = from.to_f32;
    let from_f32 = kernels::kernels(p.dst)
        .ok()
        .and_then(|k| k.from_f32)
        .ok_or_else(|| QuantizeError::NoQuantizer {
            name: p.name.clone(),
            dtype: p.dst,
        })?;
    let row_len = usize::try_from(p.shape[0]).map_err(|_| bad("row too long".into()))?;
    let (src_row, dst_row) = (row_bytes(p.src, row_len), row_bytes(p.dst, row_len));
    let n_rows = src.len() / src_row.max(1);
    if src_row == 0 || dst_row == 0 || n_rows * src_row != src.len() {
        return Err(bad(format!(
            "{} bytes are not whole {} rows of {row_len}",
            src.len(),
            p.src
        )));
    }
    let mut out = vec![0u8; n_rows * dst_row];
    if out.len() as u64 != p.dst_bytes {
        return Err(bad(format!(
            "plan says {} output bytes, rows give {}",
            p.dst_bytes,
            out.len()
        )));
    }
    let rows_per_task = (TASK_ELEMS / row_len).max(1);
    out.par_chunks_mut(dst_row * rows_per_task)
        .zip(src.par_chunks(src_row * rows_per_task))
        .for_each(|(o, s)| {
            let mut scratch = vec![0f32; row_len];
            for (orow, srow) in o.chunks_exact_mut(dst_row).zip(s.chunks_exact(src_row)) {
                to_f32(srow, &mut scratch);
                from_f32(&scratch, orow);
            }
        });
    Ok(out)
}

fn padding(len: u64, align: u64) -> u64 {
    len.div_ceil(align) * align - len
}

/// Magic, version, counts, metadata and tensor infos, padded to `align`.
fn header(
    input: &GgufFile,
    plans: &[TensorPlan],
    target: DType,
    align: u64,
) -> Result<Vec<u8>, QuantizeError> {
    let ftype = llama_ftype(target).ok_or_else(|| QuantizeError::UnknownType {
        given: target.name().to_string(),
        supported: super::supported_targets(),
    })?;
    let mut meta: Vec<(&str, MetaValue)> = Vec::with_capacity(input.metadata().len() + 2);
    for (k, v) in input.metadata() {
        let v = if k == FILE_TYPE_KEY {
            MetaValue::U32(ftype)
        } else {
            v.clone()
        };
        meta.push((k, v));
    }
    if input.get(FILE_TYPE_KEY).is_none() {
        meta.push((FILE_TYPE_KEY, MetaValue::U32(ftype)));
    }
    if target.is_quantized() && input.get(QUANT_VERSION_KEY).is_none() {
        meta.push((QUANT_VERSION_KEY, MetaValue::U32(QUANT_VERSION)));
    }
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    put_u32(&mut head, 3);
    put_u64(&mut head, plans.len() as u64);
    put_u64(&mut head, meta.len() as u64);
    for (k, v) in &meta {
        put_str(&mut head, k);
        put_u32(&mut head, v.meta_type().id());
        put_value(&mut head, v);
    }
    let mut offset = 0u64;
    for p in plans {
        put_str(&mut head, &p.name);
        put_u32(&mut head, p.shape.len() as u32);
        for &d in &p.shape {
            put_u64(&mut head, d);
        }
        put_u32(&mut head, p.dst.ggml_id());
        put_u64(&mut head, offset);
        offset += p.dst_bytes + padding(p.dst_bytes, align);
    }
    let pad = padding(head.len() as u64, align);
    head.resize(head.len() + pad as usize, 0);
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::super::plan;
    use super::*;
    use crate::gguf::GgufWriter;

    /// A tiny model: a tied 64x4 embedding in F32, a norm, one 64x2 matrix in Q4_1.
    fn tiny() -> (GgufFile, Vec<f32>) {
        let emb: Vec<f32> = (0..256).map(|i| ((i as f32) * 0.37).sin()).collect();
        let mut q = vec![0u8; DType::Q4_1.bytes_for(128).unwrap() as usize];
        let mat: Vec<f32> = (0..128).map(|i| ((i as f32) * 0.11).cos()).collect();
        kernels::kernels(DType::Q4_1).unwrap().from_f32.unwrap()(&mat, &mut q);
        let mut w = GgufWriter::new();
        w.add_meta("general.architecture", MetaValue::String("llama".into()))
            .unwrap();
        w.add_meta(FILE_TYPE_KEY, MetaValue::U32(3)).unwrap();
        let bytes = emb.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor("token_embd.weight", DType::F32, &[64, 4], bytes)
            .unwrap();
        w.add_tensor("output_norm.weight", DType::F32, &[3], vec![0; 12])
            .unwrap();
        w.add_tensor("blk.0.attn_q.weight", DType::Q4_1, &[64, 2], q)
            .unwrap();
        (GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap(), emb)
    }

    #[test]
    fn writes_a_file_that_parses_back() {
        let (f, emb) = tiny();
        let plans = plan(&f, DType::Q4_0).unwrap();
        let mut out = Vec::new();
        let mut seen = 0;
        let s = quantize_to(&f, &plans, DType::Q4_0, &mut out, |d| {
            assert_eq!(d.index, seen);
            seen += 1;
        })
        .unwrap();
        assert_eq!((seen, s.n_tensors, s.n_converted), (3, 3, 2));
        assert_eq!(s.file_bytes, out.len() as u64);
        let g = GgufFile::from_bytes(out).unwrap();
        assert_eq!(g.get_u32(FILE_TYPE_KEY).unwrap(), Some(2));
        assert_eq!(g.get_u32(QUANT_VERSION_KEY).unwrap(), Some(QUANT_VERSION));
        assert_eq!(g.get_str("general.architecture").unwrap(), Some("llama"));
        let types: Vec<DType> = g.tensors().iter().map(|t| t.dtype).collect();
        assert_eq!(types, [DType::Q8_0, DType::F32, DType::Q4_0]);
        let e = g.tensor("token_embd.weight").unwrap();
        let mut back = vec![0f32; 256];
        (kernels::kernels(DType::Q8_0).unwrap().to_f32)(g.tensor_bytes(e), &mut back);
        for (a, b) in emb.iter().zip(&back) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
    }

    #[test]
    fn copy_keeps_bytes() {
        let (f, _) = tiny();
        let plans = plan(&f, DType::F32).unwrap();
        let mut out = Vec::new();
        quantize_to(&f, &plans, DType::F32, &mut out, |_| {}).unwrap();
        let g = GgufFile::from_bytes(out).unwrap();
        for t in f.tensors() {
            let u = g.tensor(&t.name).unwrap();
            if t.dtype == DType::F32 {
                assert_eq!(f.tensor_bytes(t), g.tensor_bytes(u), "{}", t.name);
            } else {
                assert_eq!(u.dtype, DType::F32);
            }
        }
    }
}
