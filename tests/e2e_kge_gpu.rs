//! `--device cuda` end to end on UMLS (needs a CUDA GPU; `#[ignore]`d: run with `--ignored` on
//! a GPU machine, where it fails without a device): an OAC run on the GPU (kernels + device-side validation cache) equals,
//! bit for bit, the replay of its recorded order on the GPU (the kernels are deterministic), and
//! equals the sequential CPU replay of that order within the tolerance below.
//!
//! **Tolerance (CPU vs GPU):** the two implement the same step (checked without a GPU by
//! `train/tests/gpu_reference.rs`) but sum f32 in other orders, so each step differs by f32
//! rounding (≈ 1e-6 relative) and the differences compound over the run's steps. For this run
//! (ComplEx dim 32, 2 epochs of 41 batches) we allow 1e-3 relative on the scale of the
//! embeddings and 0.01 on each epoch's valid MRR. The bounds were set before any GPU run; the
//! first one (an H100, 2026-11-27) measured 4.3e-6 (entities) and 2.7e-6 (relations), so they
//! leave a margin of over 200×, kept because the drift compounds with longer runs and other
//! devices' f32 paths.
#![cfg(not(ordo_loom))]

use ordo::engine::EngineConfig;
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::device::Device;
use ordo_train::kge::model::gpu::check_device;
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::training::train::{RunResult, TrainConfig, TrainMode, replay, train};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Largest `|a − b|` relative to the largest `|b|`.
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(f64::from(x.abs())));
    let d = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max(f64::from((x - y).abs())));
    d / scale.max(f64::MIN_POSITIVE)
}

fn mrrs(r: &RunResult) -> Vec<f64> {
    r.epochs.iter().map(|e| e.valid.mrr).collect()
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_oac_on_umls_equals_the_replay_of_its_order() {
    if let Err(e) = check_device(Device::Cuda) {
        panic!("no CUDA device ({e}); this test is #[ignore]d: run it on a GPU");
    }
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig {
        score: ScoreFn::ComplEx,
        dim: 32,
        epochs: 2,
        batch_size: 128,
        negatives: 32,
        chunk: 16,
        seed: 11,
        threads: 2,
        device: Device::Cuda,
        ..TrainConfig::default()
    };
    // Slow writers, and each epoch's first write held for two later batches, so those batches
    // read rows before earlier batches wrote them.
    let (gate, hook) = ordo_tests::overlapping_writes(&d, &cfg);
    let oac =
        train(&d, &cfg, TrainMode::Oac, &mut |_| {}, Some(&|c: EngineConfig| c.hook(hook.clone())))
            .expect("GPU training runs");
    assert_eq!(gate.held(), cfg.epochs, "an epoch's first write was not held");
    assert!(oac.rows_replaced > 0, "no stale read was repaired: the check would be vacuous");

    let gpu = replay(&d, &cfg, &oac.order).expect("GPU replay runs");
    assert_eq!(bits(&oac.entity_rows()), bits(&gpu.entity_rows()), "GPU replay: entity rows");
    assert_eq!(bits(&oac.dense), bits(&gpu.dense), "GPU replay: relations");
    assert_eq!(mrrs(&oac), mrrs(&gpu), "GPU replay: valid MRR curve");

    let cpu = replay(&d, &TrainConfig { device: Device::Cpu, ..cfg }, &oac.order).unwrap();
    let emb = |r: &RunResult| r.entity_embeddings(cfg.dim);
    let (e, rel) = (rel_diff(&emb(&oac), &emb(&cpu)), rel_diff(&oac.relations, &cpu.relations));
    eprintln!("GPU vs CPU replay: entities {e:.2e}, relations {rel:.2e} relative");
    assert!(e <= 1e-3 && rel <= 1e-3, "entities {e:e}, relations {rel:e}");
    for (g, c) in mrrs(&oac).iter().zip(mrrs(&cpu)) {
        assert!((g - c).abs() <= 0.01, "valid MRR: GPU {g} vs CPU {c}");
    }
}
