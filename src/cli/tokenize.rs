//! `kiln tokenize` (being built).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`tokenize` is not available yet")
}
