//! `kiln quantize IN.gguf OUT.gguf --type T`: converts a model's weight matrices to type T
//! (see `kiln::engine::quantize` for the per-tensor rules), printing one line per tensor
//! and the totals.

use anyhow::Context;
use kiln::engine::quantize::{self, PlanReason, TensorDone};
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The source GGUF model.
    pub input: PathBuf,
    /// The file to write (must differ from the input; replaced atomically).
    pub output: PathBuf,
    /// Target type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
    /// IQ4_XS, F16, BF16, F32 (not MXFP4: llama-quantize writes it only in the MXFP4_MOE mix).
    #[arg(long = "type", short = 't')]
    pub target: String,
    /// Print only the totals.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

const MIB: f64 = 1024.0 * 1024.0;

pub fn run(args: Args) -> anyhow::Result<()> {
    let target = quantize::parse_target(&args.target)?;
    let mut stdout = std::io::stdout().lock();
    let mut line = |d: &TensorDone<'_>| {
        if args.quiet {
            return;
        }
        let p = d.plan;
        let shape: Vec<String> = p.shape.iter().map(u64::to_string).collect();
        let note = match p.reason {
            PlanReason::NotAMatrix => " (kept)".to_string(),
            PlanReason::Target => String::new(),
            PlanReason::OutputPrecision => " (output precision)".to_string(),
            PlanReason::Fallback { wanted } => format!(" (fallback from {wanted})"),
        };
        // A closed stdout must not abort the conversion.
        let _ = writeln!(
            stdout,
            "[{:>4}/{}] {:<32} [{:>12}] {:>5} -> {:<5} {:>8.2} -> {:>8.2} MiB{note}",
            d.index + 1,
            d.count,
            p.name,
            shape.join(" x "),
            p.src.name(),
            p.dst.name(),
            p.src_bytes as f64 / MIB,
            p.dst_bytes as f64 / MIB,
        );
    };
    let s = quantize::quantize_file(&args.input, &args.output, target, &mut line).with_context(
        || {
            format!(
                "quantizing {} to {}",
                args.input.display(),
                args.output.display()
            )
        },
    )?;
    println!(
        "{} tensors ({} converted, {} fell back), tensor data {:.2} MiB -> {:.2} MiB, \
         file {:.2} MiB, {} written in {:.2} s",
        s.n_tensors,
        s.n_converted,
        s.n_fallback,
        s.src_bytes as f64 / MIB,
        s.dst_bytes as f64 / MIB,
        s.file_bytes as f64 / MIB,
        args.output.display(),
        s.elapsed.as_secs_f64()
    );
    Ok(())
}
