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

/// Whether the shared datasets are declared present: in CI (`CI=true`, where they are
/// installed) or with `ORDO_REQUIRE_DATASETS=1`. A dataset test then fails instead of skipping.
pub fn datasets_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("ORDO_REQUIRE_DATASETS").is_ok_and(|v| v == "1")
}

/// The shared dataset `name` (a folder under [`shared_datasets`]), or `None` if this checkout
/// lacks it and datasets are not [required](datasets_required). Panics when they are required
/// and it is missing, so such a test fails instead of passing by skipping.
pub fn dataset(name: &str) -> Option<std::path::PathBuf> {
    let dir = shared_datasets().map(|p| p.join(name)).filter(|d| d.is_dir());
    if dir.is_none() {
        assert!(
            !datasets_required(),
            "dataset {name} is missing from ../shared/datasets (or $ORDO_DATASETS), but CI=true or \
             ORDO_REQUIRE_DATASETS=1 declares the datasets present"
        );
        eprintln!("skipped: dataset {name} not found (set ORDO_DATASETS; CI requires it)");
    }
    dir
}
