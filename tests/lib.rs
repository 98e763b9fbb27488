//! End-to-end tests across ordo's crates live beside this file as `e2e_*.rs` (each a `[[test]]`
//! target in this package's Cargo.toml). This library holds their shared helpers.

use ordo::engine::testing::ReadsBeforeWrite;
use ordo::engine::{HookAction, HookPoint, StageHook};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::training::train::TrainConfig;
use std::time::Duration;

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

/// Delay every writer a little, so later batches are usually read before earlier ones are
/// written: the overlap that OAC must repair and that async gets wrong.
pub fn slow_writes() -> StageHook {
    StageHook::new(|point, _| slow_write(point))
}

/// What [`slow_writes`] does at `point`.
pub fn slow_write(point: HookPoint) -> HookAction {
    match point {
        HookPoint::WriteStart => HookAction::Delay(Duration::from_micros(300)),
        _ => HookAction::Continue,
    }
}

/// A KGE training run's stage hook: [`slow_writes`], and the first write of every epoch held
/// until the device has taken two more batches, so some batches read stale rows by
/// construction, not only by the readers' head start (the returned gate's `held` counts the
/// epochs where that happened).
pub fn overlapping_writes(d: &Dataset, cfg: &TrainConfig) -> (ReadsBeforeWrite, StageHook) {
    // Batch ids are `epoch · batches_per_epoch + index` (`Sampling::batch_id`).
    let per_epoch = cfg.sampling(d).batches_per_epoch(d.train.len()) as u64;
    let gate = ReadsBeforeWrite::new(move |id| id % per_epoch == 0, 2, Duration::from_secs(5));
    let g = gate.clone();
    let hook = StageHook::new(move |point, id| match g.at(point, id) {
        HookAction::Continue => slow_write(point),
        action => action,
    });
    (gate, hook)
}
