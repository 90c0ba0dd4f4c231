//! The `kiln` command line. `anyhow` lives only in this binary; the library's errors are typed.

mod cli;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "CPU-native, OpenAI-compatible LLM inference server"
)]
struct Cli {
    /// Configuration file (TOML). Default: config/default.toml if present.
    #[arg(long, global = true, env = "KILN_CONFIG")]
    config: Option<PathBuf>,
    /// Log lines as readable text or one JSON object each (`kiln serve` default: the
    /// config's `log.format`, else text).
    #[arg(long, global = true, env = "KILN_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl From<LogFormat> for kiln::config::LogFormat {
    fn from(f: LogFormat) -> Self {
        match f {
            LogFormat::Text => kiln::config::LogFormat::Text,
            LogFormat::Json => kiln::config::LogFormat::Json,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Show a GGUF file's metadata, tensors and derived model description.
    Inspect(cli::inspect::Args),
    /// Tokenize text with a model's tokenizer.
    Tokenize(cli::tokenize::Args),
    /// Render a chat template with a JSON context, as the Python reference would.
    RenderTemplate(cli::render_template::Args),
    /// Convert a model's weight matrices to another type (Q4_0, Q8_0, Q4_K, F16, ...).
    Quantize(cli::quantize::Args),
    /// Generate a continuation of one prompt (streamed), with speed figures.
    Generate(cli::generate::Args),
    /// Measure prefill, decode and batched decode speed.
    Bench(cli::bench::Args),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(Box<cli::serve::Args>),
    /// A live terminal view of a running server (its /stats).
    Top(cli::top::Args),
}

fn main() -> ExitCode {
    // llama-server's command line works for `kiln serve` (see cli::llama_flags).
    let args = match cli::llama_flags::rewrite(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kiln serve: error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    let format = cli.log_format.map(Into::into);
    // The server starts logging once it has read its configuration (`[log]`); the one-shot
    // commands log only warnings.
    if !matches!(cli.command, Command::Serve(_)) {
        cli::logging::init(format.unwrap_or(kiln::config::LogFormat::Text), "warn")
            .expect("the fixed default filter is valid");
    }
    // Rayon's pool (quantization, grammar compilation) gets the same CPU budget as the
    // engine's worker teams: the physical cores of the affinity mask, within the cgroup quota.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(kiln::engine::cpus::budget().cores)
        .build_global();
    let result = match cli.command {
        Command::Inspect(a) => cli::inspect::run(a),
        Command::Tokenize(a) => cli::tokenize::run(a),
        Command::RenderTemplate(a) => cli::render_template::run(a),
        Command::Quantize(a) => cli::quantize::run(a),
        Command::Generate(a) => cli::generate::run(a, cli.config.as_deref()),
        Command::Bench(a) => cli::bench::run(a, cli.config.as_deref()),
        Command::Serve(a) => cli::serve::run(*a, cli.config.as_deref(), format),
        Command::Top(a) => cli::top::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
