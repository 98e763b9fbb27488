//! `ordo-train sgd`.

/// Arguments of `ordo-train sgd`.
#[derive(Debug, clap::Args)]
pub struct SgdArgs {}

/// Run `ordo-train sgd`.
pub fn run(_args: SgdArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("sgd: not built yet".into())
}
