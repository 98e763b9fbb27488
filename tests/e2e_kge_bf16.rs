//! `--precision bf16` end to end: rows stored as bf16s, each written row rounded stochastically
//! with randomness keyed by (seed, row, batch). OAC still equals the synchronous replay of its
//! order bit for bit, a checkpointed run resumes exactly, and a checkpoint resumes only in the
//! precision it was written in.
#![cfg(not(ordo_loom))]

use ordo::engine::EngineConfig;
use ordo::precision::Precision as Packing;
use ordo_tests::{overlapping_writes, slow_writes};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::io::checkpoint::{Checkpoint, CheckpointError};
use ordo_train::kge::model::optim::Optimizer;
use ordo_train::kge::model::precision::Precision;
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::training::train::{
    Resumable, RunResult, TrainConfig, TrainMode, replay, train, train_resumable,
};

fn config() -> TrainConfig {
    TrainConfig {
        score: ScoreFn::ComplEx,
        dim: 32,
        epochs: 2,
        batch_size: 128,
        negatives: 32,
        chunk: 16,
        seed: 11,
        threads: 2,
        precision: Precision::Bf16,
        ..TrainConfig::default()
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn curve(r: &RunResult) -> Vec<(u64, u64)> {
    r.epochs.iter().map(|e| (e.loss.to_bits(), e.valid.mrr.to_bits())).collect()
}

/// Every value a bf16: its low 16 bits zero.
fn all_bf16(v: &[f32]) -> bool {
    v.iter().all(|x| x.to_bits() & 0xFFFF == 0)
}

/// OAC under bf16 (with writes held so that batches read stale rows) equals the replay of its
/// order: rows, relations, curve and test metrics. Its store keeps bf16s, every row value is
/// one, and the run is not the f32 run's.
#[test]
fn oac_under_bf16_equals_the_synchronous_replay_of_its_order() {
    let d = Dataset::load("umls").unwrap();
    let cfg = config();
    let (gate, hook) = overlapping_writes(&d, &cfg);
    let hooked = |c: EngineConfig| c.hook(hook.clone());
    let oac = train(&d, &cfg, TrainMode::Oac, &mut |_| {}, Some(&hooked)).unwrap();
    assert_eq!(gate.held(), cfg.epochs, "an epoch's first write was not held");
    let sync = replay(&d, &cfg, &oac.order).unwrap();
    assert_eq!(bits(&oac.entity_rows()), bits(&sync.entity_rows()), "entity rows differ");
    assert_eq!(bits(&oac.dense), bits(&sync.dense), "relations differ");
    assert_eq!(curve(&oac), curve(&sync), "loss / valid-MRR curves differ");
    assert_eq!(oac.test, sync.test);
    assert!(oac.rows_replaced > 0, "no stale read was repaired: the check would be vacuous");
    assert_eq!(oac.entities.precision(), Packing::Bf16);
    assert!(all_bf16(&oac.entity_rows()), "a stored value is not a bf16");
    let f32_run =
        replay(&d, &TrainConfig { precision: Precision::F32, ..cfg }, &oac.order).unwrap();
    assert!(!all_bf16(&f32_run.entity_rows()));
    assert_ne!(bits(&f32_run.entity_rows()), bits(&oac.entity_rows()));
    let (first, last) = (oac.epochs[0].valid.mrr, oac.epochs[1].valid.mrr);
    assert!(last > first, "it learns: valid MRR {first} then {last}");
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ordo-e2e-bf16-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Under bf16, 4 epochs equal 2 epochs checkpointed and resumed for 2 more: bit for bit in
/// sync; in oac the resumed run equals the replay of its whole order. The checkpoint's `.npy`
/// files are f32 (the bf16s widened), its manifest names bf16, and a resume asking for f32 is
/// refused with [`CheckpointError::Precision`] before any row is read (and an f32 checkpoint
/// resumed as bf16 likewise).
#[test]
fn bf16_resumes_exactly_and_only_as_bf16() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { epochs: 4, dim: 16, optimizer: Optimizer::Adam, lr: 0.01, ..config() };
    let half = TrainConfig { epochs: 2, ..cfg };
    let slow = |c: EngineConfig| c.hook(slow_writes());
    for mode in [TrainMode::Sync, TrainMode::Oac] {
        let dir = temp_dir(mode.name());
        let checkpointed =
            Resumable { checkpoint: Some(dir.clone()), every: 1, ..Resumable::default() };
        let first =
            train_resumable(&d, &half, mode, checkpointed, &mut |_| {}, Some(&slow)).unwrap();
        let ck = Checkpoint::read(&dir, &d, &cfg).unwrap();
        assert_eq!(ck.entities.precision(), Packing::Bf16);
        assert_eq!(bits(&ck.entities.snapshot()), bits(&first.entity_rows()));
        let sub = dir.join(std::fs::read_to_string(dir.join("latest")).unwrap().trim());
        let npy = std::fs::read(sub.join("entities.npy")).unwrap();
        assert!(String::from_utf8_lossy(&npy[..128]).contains("'descr': '<f4'"));
        let manifest = std::fs::read_to_string(sub.join("manifest.json")).unwrap();
        assert!(manifest.contains("\"precision\": \"bf16\""), "{manifest}");
        let as_f32 = TrainConfig { precision: Precision::F32, ..cfg };
        let e = Checkpoint::read(&dir, &d, &as_f32).unwrap_err();
        assert!(matches!(&e, CheckpointError::Precision { saved, .. } if saved == "bf16"), "{e}");
        assert!(e.to_string().contains("--precision bf16"), "{e}");
        let resumed = Resumable { resume: Some(ck), ..Resumable::default() };
        let rest = train_resumable(&d, &cfg, mode, resumed, &mut |_| {}, Some(&slow)).unwrap();
        assert_eq!(rest.order[..2], first.order[..]);
        let reference = match mode {
            TrainMode::Sync => train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).unwrap(),
            _ => replay(&d, &cfg, &rest.order).unwrap(),
        };
        assert_eq!(bits(&rest.entity_rows()), bits(&reference.entity_rows()), "{mode:?}");
        assert_eq!(bits(&rest.dense), bits(&reference.dense), "{mode:?}");
        assert_eq!(curve(&rest), curve(&reference), "{mode:?}");
        assert_eq!(rest.test, reference.test);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // An f32 checkpoint is refused as bf16.
    let dir = temp_dir("f32");
    let f32_cfg = TrainConfig { epochs: 1, precision: Precision::F32, ..cfg };
    let checkpointed =
        Resumable { checkpoint: Some(dir.clone()), every: 1, ..Resumable::default() };
    train_resumable(&d, &f32_cfg, TrainMode::Sync, checkpointed, &mut |_| {}, None).unwrap();
    let e = Checkpoint::read(&dir, &d, &TrainConfig { epochs: 2, ..cfg }).unwrap_err();
    assert!(matches!(&e, CheckpointError::Precision { saved, .. } if saved == "f32"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
