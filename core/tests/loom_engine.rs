//! loom: the OAC pipeline on the real reader/device/writer tasks and the real primitives, under
//! every interleaving within the preemption bound: the store and the dense parameters equal the
//! sequential replay of the recorded computation order, which is the submission order.
//!
//! Two models: the whole pipeline (2 readers, the device, 2 writers = loom's 5 threads) on 3
//! batches over 2 rows, with the preemption bound capped at 1 (at bound 2 it ran past 14 min
//! on this 2-core machine); and a 3-thread pipeline (1 reader, device, 1 writer) on 2 batches,
//! at the bound CI sets (`LOOM_MAX_PREEMPTIONS`, 2), on the CPU device and on a device holding
//! both batches in flight (`DeferredCpuDevice`, as a GPU queue does).
#![cfg(ordo_loom)]

use ordo::engine::testing::MixModel;
use ordo::engine::{Batch, DeferredCpuDevice, EngineConfig, Mode, Model, model_harness, replay};
use ordo::row_store::RowStore;

fn batches() -> Vec<Batch<f32>> {
    vec![
        Batch { id: 0, rows: vec![0, 1], data: 1.0 },
        Batch { id: 1, rows: vec![1], data: 2.0 },
        Batch { id: 2, rows: vec![0], data: 3.0 },
    ]
}

fn check(
    builder: loom::model::Builder,
    n: usize,
    readers: &'static [&'static [usize]],
    writers: usize,
    depth: usize,
) {
    builder.check(move || {
        let store: &'static RowStore =
            Box::leak(Box::new(RowStore::from_fn(2, 1, |r, _| r as f32 + 0.5)));
        let initial = store.snapshot();
        let mut config = EngineConfig::new(Mode::Oac);
        config.max_in_flight = Some(n);
        let readers: Vec<Vec<usize>> = readers.iter().map(|r| r.to_vec()).collect();
        let mut work = batches();
        work.truncate(n);
        let (model, report) = if depth == 1 {
            model_harness::run(&config, MixModel::new(1), store, work.clone(), &readers, writers)
        } else {
            let device = DeferredCpuDevice::new(depth);
            let model = MixModel::new(1);
            model_harness::run_on(&config, device, model, store, work.clone(), &readers, writers)
        };
        assert!(report.positions().into_iter().eq(0..n), "not the submission order");
        let mut table = initial;
        let mut fresh = MixModel::new(1);
        replay(&mut fresh, &mut table, &work, &report.positions()).unwrap();
        assert_eq!(store.snapshot(), table, "order {:?}", report.batch_ids());
        assert_eq!(model.dense(), fresh.dense());
    });
}

#[test]
fn whole_pipeline_equals_the_replay_under_all_interleavings() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(1, |p| p.min(1)));
    check(b, 3, &[&[0, 2], &[1]], 2, 1);
}

#[test]
fn small_pipeline_equals_the_replay_at_the_ci_bound() {
    check(loom::model::Builder::new(), 2, &[&[0, 1]], 1, 1);
}

#[test]
fn batches_in_flight_on_the_device_equal_the_replay_at_the_ci_bound() {
    check(loom::model::Builder::new(), 2, &[&[0, 1]], 1, 2);
}
