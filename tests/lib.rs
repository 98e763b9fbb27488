//! End-to-end tests across ordo's crates live beside this file as `e2e_*.rs` (each a `[[test]]`
//! target in this package's Cargo.toml). This library holds their shared helpers.

/// Where the shared datasets are, if this checkout has them (`../shared/datasets` beside the
/// repository, or `$ORDO_DATASETS`).
pub fn shared_datasets() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("ORDO_DATASETS") {
        return Some(p.into());
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets");
    p.is_dir().then_some(p)
}
