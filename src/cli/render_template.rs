//! `kiln render-template`: renders a chat template with a JSON context, exactly as the Python
//! reference (transformers + jinja2) would. The rendering goes to stdout with nothing added;
//! an error goes to stderr with a non-zero exit.

use anyhow::{anyhow, Context};
use kiln::chat_template::{ChatTemplate, DateTime};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The Jinja chat template file.
    #[arg(long, value_name = "FILE.jinja")]
    template: PathBuf,
    /// JSON object with the template variables (messages, add_generation_prompt, bos_token,
    /// eos_token, tools, ...).
    #[arg(long, value_name = "CONTEXT.json")]
    context: PathBuf,
    /// The time `strftime_now()` reports, ISO 8601 (e.g. 2025-01-01T00:00:00). Default: now (UTC).
    #[arg(long, value_name = "ISO-8601")]
    now: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let source = std::fs::read_to_string(&args.template)
        .with_context(|| format!("cannot read template {}", args.template.display()))?;
    let context_text = std::fs::read_to_string(&args.context)
        .with_context(|| format!("cannot read context {}", args.context.display()))?;
    let context: serde_json::Value = serde_json::from_str(&context_text)
        .with_context(|| format!("{} is not valid JSON", args.context.display()))?;
    let now = match &args.now {
        Some(s) => Some(DateTime::parse_iso(s).ok_or_else(|| {
            anyhow!("--now {s:?} is not an ISO 8601 date-time like 2025-01-01T00:00:00")
        })?),
        None => None,
    };
    let template = ChatTemplate::new(&source)
        .with_context(|| format!("template {}", args.template.display()))?;
    let rendered = template.render(&context, now)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(rendered.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
