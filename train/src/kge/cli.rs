//! `ordo-train kge`.

/// Arguments of `ordo-train kge`.
#[derive(Debug, clap::Args)]
pub struct KgeArgs {}

/// Run `ordo-train kge`.
pub fn run(_args: KgeArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("kge: not built yet".into())
}
