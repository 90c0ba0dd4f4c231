//! Where log lines go and which are kept: stderr, readable text or one JSON object per line.
//! The level is `KILN_LOG`, else `RUST_LOG`, else the caller's default (for `kiln serve`, the
//! config's `log.level`), all in tracing's env-filter syntax.

use anyhow::Context;
use kiln::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; an invalid `default_level` is an error naming it.
pub fn init(format: LogFormat, default_level: &str) -> anyhow::Result<()> {
    let filter =
        match EnvFilter::try_from_env("KILN_LOG").or_else(|_| EnvFilter::try_from_default_env()) {
            Ok(f) => f,
            Err(_) => EnvFilter::try_new(default_level)
                .with_context(|| format!("log.level {default_level:?} is not a valid filter"))?,
        };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt.init(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
    Ok(())
}
