//! Weight quantization (`kiln quantize IN.gguf OUT.gguf --type T`): converts a GGUF model's
//! weight matrices to another type, keeping its metadata.
//!
//! [`plan`](mod@plan) decides each tensor's output type ([`plan::plan_tensor`] holds the rules, after
//! llama.cpp's `llama-quantize`). [`quantize_to`] streams the new file: the header first,
//! then one tensor at a time, each dequantized row by row with the kernel table's `to_f32`
//! and requantized with `from_f32` on rayon (at most one output tensor is held in memory;
//! never the model in f32). A tensor whose type does not change is copied byte for byte.
//! [`quantize_file`] writes through a temporary file renamed into place at the end, so OUT
//! is never half written, and refuses to overwrite IN.

pub mod plan;
mod stream;

pub use plan::{llama_ftype, plan_tensor, PlanReason, TARGETS};
pub use stream::quantize_to;

use crate::gguf::{GgufError, GgufFile};
use crate::kernels::{self, DType};
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `general.file_type` (llama.cpp `llama_ftype`), rewritten for the target.
pub const FILE_TYPE_KEY: &str = "general.file_type";
/// `general.quantization_version` (ggml's `GGML_QNT_VERSION`), set when absent.
pub const QUANT_VERSION_KEY: &str = "general.quantization_version";
/// The block layouts kiln writes are those of ggml quantization version 2.
pub const QUANT_VERSION: u32 = 2;

/// Why quantization failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("unknown quantization type {given:?}; supported: {supported}")]
    UnknownType { given: String, supported: String },
    #[error("tensor {name:?}: kiln cannot dequantize its type {dtype}")]
    UnsupportedSource { name: String, dtype: DType },
    #[error("tensor {name:?}: kiln has no quantizer for {dtype}")]
    NoQuantizer { name: String, dtype: DType },
    #[error("tensor {name:?}: {why}")]
    BadTensor { name: String, why: String },
    #[error("output {out} is the input file {input}: choose another output path")]
    SameFile { input: PathBuf, out: PathBuf },
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: GgufError },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("writing the output: {0}")]
    Write(#[from] io::Error),
}

/// The comma-separated list of accepted `--type` names.
pub fn supported_targets() -> String {
    TARGETS.map(DType::name).join(", ")
}

/// The target type named `name` (case-insensitive), or [`QuantizeError::UnknownType`]
/// listing the supported ones.
pub fn parse_target(name: &str) -> Result<DType, QuantizeError> {
    DType::from_name(name)
        .filter(|d| TARGETS.contains(d))
        .ok_or_else(|| QuantizeError::UnknownType {
            given: name.to_string(),
            supported: supported_targets(),
        })
}

/// One tensor's conversion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    pub name: String,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<u64>,
    pub src: DType,
    pub dst: DType,
    pub reason: PlanReason,
    pub src_bytes: u64,
    pub dst_bytes: u64,
}

impl TensorPlan {
    /// True when the bytes are copied unchanged.
    pub fn is_copy(&self) -> bool {
        self.src == self.dst
    }
}

/// Output types for every tensor of `input` (file order), checked: each converted tensor's
/// source type can be dequantized and its output type quantized.
pub fn plan(input: &GgufFile, target: DType) -> Result<Vec<TensorPlan>, QuantizeError> {
    if !TARGETS.contains(&target) {
        return Err(QuantizeError::UnknownType {
            given: target.name().to_string(),
            supported: supported_targets(),
        });
    }
    let has_output = input.tensor("output.weight").is_some();
    input
        .tensors()
        .iter()
        .map(|t| {
            let (dst, reason) = plan_tensor(
                &t.name,
                t.shape.len(),
                t.row_len(),
                t.dtype,
                target,
                has_output,
            );
            if dst != t.dtype {
                check_convertible(&t.name, t.dtype, dst)?;
            }
            let dst_bytes = dst
                .bytes_for(t.n_elems())
                .ok_or_else(|| QuantizeError::BadTensor {
                    name: t.name.clone(),
                    why: format!("{:?} does not fit {dst} blocks", t.shape),
                })?;
            Ok(TensorPlan {
                name: t.name.clone(),
                shape: t.shape.clone(),
                src: t.dtype,
                dst,
                reason,
                src_bytes: t.n_bytes,
                dst_bytes,
            })
        })
        .collect()
}

fn check_convertible(name: &str, src: DType, dst: DType) -> Result<(), QuantizeError> {
    kernels::kernels(src).map_err(|_| QuantizeError::UnsupportedSource {
        name: name.to_string(),
        dtype: src,
    })?;
    let no_quantizer = || QuantizeError::NoQuantizer {
        name: name.to_string(),
        dtype: dst,
    };
    match kernels::kernels(dst) {
        Ok(k) if k.from_f32.is_some() => Ok(()),
        _ => Err(no_quantizer()),
    }
}

/// Reported after each tensor is written.
#[derive(Clone, Debug)]
pub struct TensorDone<'a> {
    /// 0-based position and the tensor count.
    pub index: usize,
    pub count: usize,
    pub plan: &'a TensorPlan,
    pub elapsed: Duration,
}

/// Totals of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub n_tensors: usize,
    /// Tensors whose type changed.
    pub n_converted: usize,
    /// Tensors that fell back from the wanted type (row length not a block multiple).
    pub n_fallback: usize,
    /// Tensor data bytes in and out (without header and padding).
    pub src_bytes: u64,
    pub dst_bytes: u64,
    /// Whole output file.
    pub file_bytes: u64,
    pub elapsed: Duration,
}

/// Quantizes the model at `input` to `target` into `out`: written to a temporary file in
/// OUT's directory, synced and renamed over OUT; on any error the temporary file is removed
/// and OUT is untouched. Refuses OUT == IN (also through links).
pub fn quantize_file(
    input: &Path,
    out: &Path,
    target: DType,
    on_tensor: impl FnMut(&TensorDone<'_>),
) -> Result<Summary, QuantizeError> {
    refuse_same_file(input, out)?;
    let file = GgufFile::open(input).map_err(|source| QuantizeError::Read {
        path: input.to_path_buf(),
        source,
    })?;
    let plans = plan(&file, target)?;
    let tmp = temp_path(out);
    let io_err = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| QuantizeError::Io { what, path, source }
    };
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io_err("creating", &tmp))?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let summary = quantize_to(&file, &plans, target, &mut w, on_tensor)?;
        w.flush().map_err(io_err("writing", &tmp))?;
        let f = w
            .into_inner()
            .map_err(|e| io_err("writing", &tmp)(e.into_error()))?;
        f.sync_all().map_err(io_err("syncing", &tmp))?;
        fs::rename(&tmp, out).map_err(io_err("renaming into", out))?;
        Ok(summary)
    })();
    if result.is_err() {
        // Best effort: the error being returned matters more than a failed cleanup.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `.<name>.kiln-tmp-<pid>` beside `out`.
fn temp_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out.gguf".into());
    out.with_file_name(format!(".{name}.kiln-tmp-{}", std::process::id()))
}

fn refuse_same_file(input: &Path, out: &Path) -> Result<(), QuantizeError> {
    let same = || QuantizeError::SameFile {
        input: input.to_path_buf(),
        out: out.to_path_buf(),
    };
    if input == out {
        return Err(same());
    }
    let canon_in = fs::canonicalize(input).map_err(|source| QuantizeError::Io {
        what: "opening",
        path: input.to_path_buf(),
        source,
    })?;
    // OUT may not exist yet: resolve its directory instead.
    let canon_out = fs::canonicalize(out).ok().or_else(|| {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Some(fs::canonicalize(dir).ok()?.join(out.file_name()?))
    });
    if canon_out.as_deref() == Some(canon_in.as_path()) {
        return Err(same());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(a), Ok(b)) = (fs::metadata(input), fs::metadata(out)) {
            if a.dev() == b.dev() && a.ino() == b.ino() {
                return Err(same());
            }
        }
    }
    Ok(())
}
