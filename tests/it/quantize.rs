//! `kiln::engine::quantize` on the real default model: requantize to Q4_0, Q8_0, Q4_K (with
//! the 576-wide fallback) and F16, reload the result, and compare every weight with the
//! source (relative RMS error per tensor within a per-type bound).

use crate::common::default_model;
use kiln::engine::hparams::HParams;
use kiln::engine::quantize::{self, PlanReason, QuantizeError, FILE_TYPE_KEY, QUANT_VERSION_KEY};
use kiln::gguf::GgufFile;
use kiln::kernels::{self, DType};
use std::path::Path;
use std::sync::OnceLock;

fn source() -> &'static GgufFile {
    static F: OnceLock<GgufFile> = OnceLock::new();
    F.get_or_init(|| GgufFile::open(default_model()).expect("default model loads"))
}

/// Rows compared per tensor (spread over the tensor) to keep the test fast.
const ROWS_CHECKED: u64 = 96;

/// Dequantized rows `rows` of tensor `name`.
fn rows_f32(f: &GgufFile, name: &str, rows: &[u64]) -> Vec<f32> {
    let t = f.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
    let row_len = t.row_len() as usize;
    let rb = kernels::shape::row_bytes(t.dtype, row_len);
    let bytes = f.tensor_bytes(t);
    let to_f32 = kernels::kernels(t.dtype).unwrap().to_f32;
    let mut out = vec![0f32; rows.len() * row_len];
    for (o, &r) in out.chunks_exact_mut(row_len).zip(rows) {
        let r = r as usize;
        to_f32(&bytes[r * rb..(r + 1) * rb], o);
    }
    out
}

/// Relative RMS error of `b` against `a`.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*x).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// The rel. RMS error bound for converting to `dst` (source already Q4_1/Q8_0, so this is
/// the error `dst` itself adds).
fn bound(dst: DType) -> f64 {
    match dst {
        DType::F32 => 0.0,
        DType::F16 | DType::BF16 => 0.005,
        DType::Q8_0 => 0.01,
        DType::Q6_K => 0.03,
        DType::Q5_0 | DType::Q5_1 | DType::Q5_K => 0.07,
        DType::Q4_0 | DType::Q4_1 | DType::Q4_K => 0.13,
        other => panic!("no bound for {other}"),
    }
}

/// Quantizes the default model to `target` in a temp dir, reloads it, checks structure,
/// metadata and weights; returns the output's tensor types by name.
fn round_trip(target: DType) -> Vec<(String, DType)> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("model.{target}.gguf"));
    let mut lines = 0;
    let summary = quantize::quantize_file(&default_model(), &out, target, |_| lines += 1)
        .unwrap_or_else(|e| panic!("quantize to {target}: {e}"));
    let src = source();
    assert_eq!(lines, src.tensors().len());
    assert_eq!(summary.n_tensors, src.tensors().len());
    let out_len = std::fs::metadata(&out).unwrap().len();
    assert_eq!(summary.file_bytes, out_len);
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let q = GgufFile::open(&out).unwrap();
    assert_eq!(
        HParams::from_gguf(&q).unwrap(),
        HParams::from_gguf(src).unwrap()
    );
    assert_eq!(
        q.get_u32(FILE_TYPE_KEY).unwrap(),
        quantize::llama_ftype(target)
    );
    for (k, v) in src.metadata() {
        if k != FILE_TYPE_KEY {
            assert_eq!(q.get(k), Some(v), "metadata {k} changed");
        }
    }
    if target.is_quantized() {
        assert!(q.get(QUANT_VERSION_KEY).is_some());
    }
    let tokens = q.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(&tokens[1], "<|im_start|>");
    assert!(q
        .get_str("tokenizer.chat_template")
        .unwrap()
        .unwrap()
        .contains("im_start"));

    assert_eq!(q.tensors().len(), src.tensors().len());
    let mut types = Vec::new();
    let mut worst_err = std::collections::BTreeMap::<DType, f64>::new();
    for (s, t) in src.tensors().iter().zip(q.tensors()) {
        assert_eq!((&s.name, &s.shape), (&t.name, &t.shape));
        if s.shape.len() == 1 {
            assert_eq!(t.dtype, s.dtype, "{} must be kept", s.name);
            assert_eq!(src.tensor_bytes(s), q.tensor_bytes(t));
        }
        let n = s.n_rows();
        let rows: Vec<u64> = (0..ROWS_CHECKED.min(n))
            .map(|i| i * n / ROWS_CHECKED.min(n))
            .collect();
        let a = rows_f32(src, &s.name, &rows);
        let b = rows_f32(&q, &t.name, &rows);
        let err = rel_rms(&a, &b);
        let limit = if t.dtype == s.dtype {
            0.0
        } else {
            bound(t.dtype)
        };
        let worst = worst_err.entry(t.dtype).or_insert(0.0);
        *worst = worst.max(err);
        assert!(
            err <= limit,
            "{target}: {} {} -> {}: rel. RMS error {err:.4} > {limit}",
            s.name,
            s.dtype,
            t.dtype
        );
        types.push((t.name.clone(), t.dtype));
    }
    // Shown with --nocapture: the measured worst error per output type.
    eprintln!("{target}: worst rel. RMS error by output type {worst_err:?}");
    types
}

fn type_of(types: &[(String, DType)], name: &str) -> DType {
    types.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn requantize_default_model_to_q4_0() {
    let types = round_trip(DType::Q4_0);
    assert_eq!(type_of(&types, "blk.0.attn_q.weight"), DType::Q4_0);
    assert_eq!(type_of(&types, "blk.29.ffn_down.weight"), DType::Q4_0);
    // Tied embedding with 576-wide rows: Q8_0, as llama.cpp.
    assert_eq!(type_of(&types, "token_embd.weight"), DType::Q8_0);
    assert_eq!(type_of(&types, "output_norm.weight"), DType::F32);
}

#[test]
fn requantize_default_model_to_q8_0() {
    let types = round_trip(DType::Q8_0);
    for (name, t) in &types {
        if name.ends_with("_norm.weight") {
            assert_eq!(*t, DType::F32, "{name}");
        } else {
            assert_eq!(*t, DType::Q8_0, "{name}");
        }
    }
}

#[test]
fn q4_k_falls_back_on_576_wide_rows() {
    let types = round_trip(DType::Q4_K);
    // ffn_down rows are 1536 = 6 x 256 wide: Q4_K; 576-wide rows fall back to Q5_0.
    assert_eq!(type_of(&types, "blk.3.ffn_down.weight"), DType::Q4_K);
    assert_eq!(type_of(&types, "blk.3.ffn_up.weight"), DType::Q5_0);
    assert_eq!(type_of(&types, "blk.3.attn_k.weight"), DType::Q5_0);
    assert_eq!(type_of(&types, "token_embd.weight"), DType::Q8_0);
}

#[test]
fn f16_converts_every_matrix() {
    let types = round_trip(DType::F16);
    assert_eq!(type_of(&types, "token_embd.weight"), DType::F16);
    assert_eq!(type_of(&types, "blk.7.attn_output.weight"), DType::F16);
}

#[test]
fn plan_of_default_model_reports_fallbacks() {
    let plans = quantize::plan(source(), DType::Q6_K).unwrap();
    let down = plans
        .iter()
        .find(|p| p.name == "blk.0.ffn_down.weight")
        .unwrap();
    assert_eq!((down.dst, down.reason), (DType::Q6_K, PlanReason::Target));
    let q = plans
        .iter()
        .find(|p| p.name == "blk.0.attn_q.weight")
        .unwrap();
    assert_eq!(
        (q.dst, q.reason),
        (
            DType::Q8_0,
            PlanReason::Fallback {
                wanted: DType::Q6_K
            }
        )
    );
}

#[test]
fn refuses_to_overwrite_the_input_and_names_errors() {
    let model = default_model();
    let err = quantize::quantize_file(&model, &model, DType::Q8_0, |_| {}).unwrap_err();
    assert!(matches!(err, QuantizeError::SameFile { .. }), "{err}");
    // The same file through another spelling of its path.
    let dotted = model
        .parent()
        .unwrap()
        .join(".")
        .join(model.file_name().unwrap());
    let err = quantize::quantize_file(&model, &dotted, DType::Q8_0, |_| {}).unwrap_err();
    assert!(matches!(err, QuantizeError::SameFile { .. }), "{err}");

    let err = quantize::parse_target("Q7_0").unwrap_err();
    assert!(err.to_string().contains("Q4_0, Q4_1"), "{err}");
    assert_eq!(quantize::parse_target("q4_k").unwrap(), DType::Q4_K);
    assert!(quantize::parse_target("Q8_K").is_err());

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model.gguf");
    let out = dir.path().join("out.gguf");
    let err = quantize::quantize_file(&missing, &out, DType::Q8_0, |_| {}).unwrap_err();
    assert!(err.to_string().contains("no-such-model"), "{err}");
    let nowhere = dir.path().join("no-dir").join("out.gguf");
    let err = quantize::quantize_file(&model, &nowhere, DType::Q8_0, |_| {}).unwrap_err();
    assert!(matches!(err, QuantizeError::Io { .. }), "{err}");
    assert!(!Path::new(&nowhere).exists());
}
