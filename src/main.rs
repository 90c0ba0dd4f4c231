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
    /// Log lines as readable text or one JSON object each.
    #[arg(
        long,
        global = true,
        env = "KILN_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
    Serve(cli::serve::Args),
    /// A live terminal view of a running server (its /stats).
    Top(cli::top::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A server logs its start-up and lifecycle; the one-shot commands only warnings.
    let default_filter = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    // Level: KILN_LOG, else RUST_LOG, else the command's default.
    let filter = tracing_subscriber::EnvFilter::try_from_env("KILN_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => fmt.init(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
    let result = match cli.command {
        Command::Inspect(a) => cli::inspect::run(a),
        Command::Tokenize(a) => cli::tokenize::run(a),
        Command::RenderTemplate(a) => cli::render_template::run(a),
        Command::Quantize(a) => cli::quantize::run(a),
        Command::Generate(a) => cli::generate::run(a, cli.config.as_deref()),
        Command::Bench(a) => cli::bench::run(a, cli.config.as_deref()),
        Command::Serve(a) => cli::serve::run(a, cli.config.as_deref()),
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
