//! `kiln render_template` (being built).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`render_template` is not available yet")
}
