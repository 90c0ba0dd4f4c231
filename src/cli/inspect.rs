//! `kiln inspect MODEL.gguf [--json]`: metadata (long arrays summarized), tensor table,
//! parameter count, bytes per type, the derived model description, and load cost (time to
//! open and describe the model, resident memory right after).

use anyhow::Context;
use kiln::engine::hparams::HParams;
use kiln::gguf::{GgufFile, MetaArray, MetaValue, TensorInfo};
use kiln::kernels::DType;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Arrays longer than this are summarized (type, length, first elements).
const ARRAY_SHOWN: usize = 8;
/// Strings longer than this are cut in the text output (JSON keeps them whole).
const STRING_SHOWN: usize = 120;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model file.
    #[arg(required_unless_present = "isa")]
    pub model: Option<PathBuf>,
    /// Print the kernel instruction sets (detected, selected, supported) instead of a model.
    #[arg(long, conflicts_with_all = ["no_tensors"])]
    pub isa: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Leave out the tensor table.
    #[arg(long)]
    pub no_tensors: bool,
}

/// What loading cost: wall time of open + parse + description, and resident memory after.
struct LoadCost {
    load_ms: f64,
    since_process_start_ms: Option<f64>,
    rss_kib: Option<Rss>,
    rss_before: Option<Rss>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.isa {
        return emit(&isa_report(args.json)?);
    }
    let Some(model) = args.model.as_ref() else {
        anyhow::bail!("a model file is required (or --isa)");
    };
    let rss_before = rss_kib();
    let t0 = Instant::now();
    let file = GgufFile::open(model).with_context(|| format!("loading {}", model.display()))?;
    let hparams = HParams::from_gguf(&file);
    let cost = LoadCost {
        load_ms: t0.elapsed().as_secs_f64() * 1e3,
        since_process_start_ms: ms_since_process_start(),
        rss_kib: rss_kib(),
        rss_before,
    };
    if args.json {
        let v = to_json(&args, &file, &hparams, &cost);
        emit(&(serde_json::to_string_pretty(&v)? + "\n"))
    } else {
        emit(&print_text(&args, &file, &hparams, &cost))
    }
}

/// The model path (present whenever a model is inspected: `run` checked it).
fn model_path(args: &Args) -> &std::path::Path {
    args.model.as_deref().unwrap_or(std::path::Path::new(""))
}

/// Writes the report to stdout; a closed pipe (`kiln inspect m.gguf | head`) is not an error.
fn emit(s: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// `writeln!` into a `String` (which cannot fail).
macro_rules! w {
    ($o:expr) => {{
        $o.push('\n')
    }};
    ($o:expr, $($t:tt)*) => {{
        let _ = writeln!($o, $($t)*);
    }};
}
/// `write!` into a `String` (which cannot fail).
macro_rules! wn {
    ($o:expr, $($t:tt)*) => {{
        let _ = write!($o, $($t)*);
    }};
}

/// Per dtype: (tensor count, bytes, parameters).
fn per_type(file: &GgufFile) -> BTreeMap<DType, (usize, u64, u64)> {
    let mut m: BTreeMap<DType, (usize, u64, u64)> = BTreeMap::new();
    for t in file.tensors() {
        let e = m.entry(t.dtype).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
        e.2 += t.n_elems();
    }
    m
}

fn n_params(file: &GgufFile) -> u64 {
    file.tensors().iter().map(TensorInfo::n_elems).sum()
}

/// What one decode token uses: `(parameters, bytes)` of every tensor its matmuls read, a
/// mixture's expert tensors (`*_exps.weight`, and gpt-oss's `*_exps.bias`) counted for the
/// `n_expert_used` of `n_expert` experts a token runs, and the token embedding only when it is
/// also the LM head (a lookup reads one row).
fn per_token(file: &GgufFile, hparams: Option<&HParams>) -> (u64, u64) {
    let used = hparams
        .and_then(|h| h.moe)
        .map(|m| (u64::from(m.n_expert_used), u64::from(m.n_expert)));
    let tied = file.tensor("output.weight").is_none();
    file.tensors()
        .iter()
        .filter(|t| tied || t.name != "token_embd.weight")
        .fold((0, 0), |(p, b), t| match used {
            Some((k, n)) if t.name.ends_with("_exps.weight") || t.name.ends_with("_exps.bias") => {
                (p + t.n_elems() / n * k, b + t.n_bytes / n * k)
            }
            _ => (p + t.n_elems(), b + t.n_bytes),
        })
}

fn print_text(
    args: &Args,
    file: &GgufFile,
    hparams: &Result<HParams, kiln::engine::hparams::HParamsError>,
    cost: &LoadCost,
) -> String {
    let mut o = String::new();
    w!(o, "file        {}", model_path(args).display());
    w!(
        o,
        "gguf        v{}, {} bytes, alignment {}, data section at {}",
        file.version(),
        file.file_len(),
        file.alignment(),
        file.data_start()
    );
    wn!(o, "load        {:.2} ms open+describe", cost.load_ms);
    if let Some(ms) = cost.since_process_start_ms {
        wn!(o, ", ~{ms:.0} ms since process start");
    }
    match cost.rss_kib {
        Some(r) => w!(
            o,
            ", RSS {:.1} MiB after load, {:.1} before (heap {:.1}, file-backed {:.1})",
            mib(r.total_kib),
            cost.rss_before.map_or(0.0, |b| mib(b.total_kib)),
            mib(r.anon_kib),
            mib(r.file_kib)
        ),
        None => w!(o),
    }

    w!(o, "\nmetadata ({} keys)", file.metadata().len());
    let w = file
        .metadata()
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0);
    for (k, v) in file.metadata() {
        w!(o, "  {k:w$}  {:<16} {}", v.type_desc(), value_text(v));
    }

    if !args.no_tensors {
        w!(o, "\ntensors ({})", file.tensors().len());
        let w = file
            .tensors()
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(0);
        for t in file.tensors() {
            w!(
                o,
                "  {:w$}  {:<5} {:<22} {:>12}",
                t.name,
                t.dtype.name(),
                format!("{:?}", t.shape),
                t.n_bytes
            );
        }
    }

    let params = n_params(file);
    w!(o, "\nparameters  {params} ({:.1} M)", params as f64 / 1e6);
    let (active, bytes) = per_token(file, hparams.as_ref().ok());
    w!(
        o,
        "per token   {active} parameters active ({:.1} M), {bytes} bytes read by a decode token ({:.1} MiB)",
        active as f64 / 1e6,
        bytes as f64 / (1u64 << 20) as f64
    );
    w!(o, "bytes per type");
    for (d, (n, bytes, p)) in per_type(file) {
        w!(
            o,
            "  {:<5} {n:>4} tensors {bytes:>12} bytes {p:>12} params ({:.2} bits/param)",
            d.name(),
            bytes as f64 * 8.0 / p as f64
        );
    }

    w!(o, "\nmodel");
    match hparams {
        Ok(h) => {
            for line in h.to_string().lines() {
                w!(o, "  {line}");
            }
        }
        Err(e) => w!(o, "  unusable: {e}"),
    }
    o
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A value for the text table: long arrays summarized, long strings cut.
fn value_text(v: &MetaValue) -> String {
    match v {
        MetaValue::String(s) => cut(&format!("{s:?}")),
        MetaValue::Array(a) if a.len() > ARRAY_SHOWN => {
            let first: Vec<String> = (0..3)
                .filter_map(|i| a.get(i))
                .map(|x| cut(&x.to_string()))
                .collect();
            format!("{}, ..", first.join(", "))
        }
        v => cut(&v.to_string()),
    }
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(STRING_SHOWN) {
        Some((i, _)) => format!("{}.. ({} bytes)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

fn value_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::U8(x) => json!(x),
        MetaValue::I8(x) => json!(x),
        MetaValue::U16(x) => json!(x),
        MetaValue::I16(x) => json!(x),
        MetaValue::U32(x) => json!(x),
        MetaValue::I32(x) => json!(x),
        MetaValue::U64(x) => json!(x),
        MetaValue::I64(x) => json!(x),
        MetaValue::F32(x) => json!(x),
        MetaValue::F64(x) => json!(x),
        MetaValue::Bool(x) => json!(x),
        MetaValue::String(s) => json!(s),
        MetaValue::Array(a) => array_json(a),
    }
}

/// Short arrays in full; long ones as `{"len": n, "first": [..8]}`.
fn array_json(a: &MetaArray) -> Value {
    let shown = a.len().min(ARRAY_SHOWN);
    let items: Vec<Value> = (0..shown)
        .filter_map(|i| a.get(i))
        .map(|x| value_json(&x))
        .collect();
    if a.len() <= ARRAY_SHOWN {
        Value::Array(items)
    } else {
        json!({ "len": a.len(), "first": items })
    }
}

fn to_json(
    args: &Args,
    file: &GgufFile,
    hparams: &Result<HParams, kiln::engine::hparams::HParamsError>,
    cost: &LoadCost,
) -> Value {
    let metadata: serde_json::Map<String, Value> = file
        .metadata()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({ "type": v.type_desc(), "value": value_json(v) }),
            )
        })
        .collect();
    let tensors: Vec<Value> = file
        .tensors()
        .iter()
        .map(|t| {
            json!({ "name": t.name, "type": t.dtype.name(), "shape": t.shape,
                    "offset": t.offset, "bytes": t.n_bytes })
        })
        .collect();
    let by_type: serde_json::Map<String, Value> = per_type(file)
        .into_iter()
        .map(|(d, (n, bytes, p))| {
            (
                d.name().to_string(),
                json!({ "tensors": n, "bytes": bytes, "params": p }),
            )
        })
        .collect();
    let mut out = json!({
        "file": model_path(args).display().to_string(),
        "version": file.version(),
        "file_bytes": file.file_len(),
        "alignment": file.alignment(),
        "data_start": file.data_start(),
        "load": { "load_ms": cost.load_ms, "since_process_start_ms": cost.since_process_start_ms,
                  "rss": cost.rss_kib, "rss_before_open": cost.rss_before },
        "metadata": metadata,
        "parameters": n_params(file),
        "active_parameters": per_token(file, hparams.as_ref().ok()).0,
        "decode_bytes_per_token": per_token(file, hparams.as_ref().ok()).1,
        "bytes_per_type": by_type,
    });
    if !args.no_tensors {
        out["tensors"] = Value::Array(tensors);
    }
    match hparams {
        Ok(h) => {
            out["model"] = json!(h);
            out["model"]["variant"] = json!(h.variant());
        }
        Err(e) => out["model_error"] = json!(e.to_string()),
    }
    out
}

/// Resident memory from `/proc/self/status` (Linux), in KiB: total, anonymous (heap), and
/// file-backed (the binary's code and the mapped header pages).
#[derive(Clone, Copy, serde::Serialize)]
struct Rss {
    total_kib: u64,
    anon_kib: u64,
    file_kib: u64,
}

fn rss_kib() -> Option<Rss> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(Rss {
        total_kib: field("VmRSS:")?,
        anon_kib: field("RssAnon:")?,
        file_kib: field("RssFile:")?,
    })
}

/// Wall time since this process started (Linux; clock-tick resolution, usually 10 ms).
fn ms_since_process_start() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name; starttime is field 22 overall.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let start_ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // USER_HZ is 100 on every mainstream Linux configuration.
    Some((uptime - start_ticks / 100.0).max(0.0) * 1e3)
}

/// The instruction sets: what the CPU supports, what `KILN_ISA` asks for, what kernels run.
/// An unknown or unsupported `KILN_ISA` is an error here (the engine would warn and fall back).
fn isa_report(as_json: bool) -> anyhow::Result<String> {
    use kiln::kernels::isa::{self, Isa};
    let forced = Isa::from_env().context("KILN_ISA")?;
    let selected = kiln::kernels::isa();
    let supported: Vec<String> = Isa::all_supported().map(|i| i.to_string()).collect();
    let vnni = isa::has_avx512_vnni();
    if as_json {
        let v = json!({
            "selected": selected.to_string(),
            "detected": Isa::detect().to_string(),
            "forced": forced.map(|i| i.to_string()),
            "supported": supported,
            "avx512_vnni": vnni,
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    let mut o = String::new();
    w!(o, "selected:  {selected}");
    w!(o, "detected:  {}", Isa::detect());
    w!(
        o,
        "forced:    {}",
        forced.map_or("no (set KILN_ISA to force)".into(), |i| i.to_string())
    );
    w!(o, "supported: {}", supported.join(", "));
    w!(o, "avx512 vnni: {}", if vnni { "yes" } else { "no" });
    Ok(o)
}
