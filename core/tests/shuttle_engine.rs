//! shuttle: the OAC pipeline (the real reader, device and writer tasks through the one driver,
//! `ordo::engine::model_harness`, on the real primitives) at 4 readers + the device + 2 writers
//! (7 threads) and 240 batches, beyond what loom explores (`loom_engine.rs`: at most 5 threads,
//! 3 batches, preemption bound 1), under shuttle's randomized and PCT schedulers.
//!
//! Run: `RUSTFLAGS="--cfg ordo_shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release
//! -p ordo --features testing --test shuttle_engine`.
//!
//! **Oracle.** The final store and dense parameters equal, bit for bit, the sequential replay of
//! the recorded computation order (by batch id) on the initial state, and that order is the
//! submission order (the readers finish in any order; the device takes them in order). Few rows, heavy overlap
//! and a small in-flight window (4 slots) keep the validation cache, the STE and admission
//! control busy. Shuttle sees only sequentially consistent interleavings: a weakened ordering
//! is invisible to it (loom's job, `loom_engine.rs` and the primitives' loom tests).
#![cfg(ordo_shuttle)]

use ordo::engine::testing::MixModel;
use ordo::engine::{
    Batch, DeferredCpuDevice, EngineConfig, Mode, Model, model_harness, replay_ids,
};
use ordo::row_store::RowStore;

const ROWS: usize = 6;

/// `n` batches over `ROWS` rows, each touching 1–3 rows (sorted, distinct).
fn batches(n: u64) -> Vec<Batch<f32>> {
    (0..n)
        .map(|i| {
            let mut rows: Vec<u64> =
                [i % 6, (i * 5 + 1) % 6, (i * 7 + 3) % 6][..1 + (i % 3) as usize].to_vec();
            rows.sort_unstable();
            rows.dedup();
            Batch { id: 1000 + i, rows, data: (i % 11) as f32 / 4.0 - 1.0 }
        })
        .collect()
}

/// One execution: `readers` reader threads (batch positions dealt round-robin), `writers`
/// writer threads, `n` batches; panics unless the run equals its replay.
fn run_pipeline(readers: usize, writers: usize, n: u64) {
    run_pipeline_on(readers, writers, n, 1);
}

/// [`run_pipeline`] on a device holding up to `depth` batches in flight (depth 1: the CPU
/// device one batch at a time; more: `DeferredCpuDevice`, stepped ahead of the writers as a GPU
/// queue does).
fn run_pipeline_on(readers: usize, writers: usize, n: u64, depth: usize) {
    let store: &'static RowStore =
        Box::leak(Box::new(RowStore::from_fn(ROWS, 2, |r, c| r as f32 * 0.25 + c as f32 + 0.5)));
    let initial = store.snapshot();
    let mut config = EngineConfig::new(Mode::Oac);
    config.max_in_flight = Some(4);
    let work = batches(n);
    let deal: Vec<Vec<usize>> =
        (0..readers).map(|r| (r..work.len()).step_by(readers).collect()).collect();
    let (model, report) = if depth == 1 {
        model_harness::run(&config, MixModel::new(2), store, work.clone(), &deal, writers)
    } else {
        let device = DeferredCpuDevice::new(depth);
        model_harness::run_on(
            &config,
            device,
            MixModel::new(2),
            store,
            work.clone(),
            &deal,
            writers,
        )
    };
    assert_eq!(report.order.len(), work.len(), "every batch stamped once");
    assert!(report.positions().into_iter().eq(0..work.len()), "not the submission order");
    let mut table = initial;
    let mut fresh = MixModel::new(2);
    replay_ids(&mut fresh, &mut table, &report.batch_ids(), |id| work.get((id - 1000) as usize))
        .expect("replay");
    assert_eq!(store.snapshot(), table, "store differs from the replay of the recorded order");
    assert_eq!(model.dense(), fresh.dense(), "dense parameters differ from the replay");
}

/// Randomized scheduler: 4 readers, 2 writers, 240 batches, 60 executions.
#[test]
fn seven_threads_equal_the_replay_random() {
    shuttle::check_random(|| run_pipeline(4, 2, 240), 60);
}

/// PCT (depth 3): 5 readers, 3 writers (9 threads with the device), 200 batches.
#[test]
fn nine_threads_equal_the_replay_pct() {
    shuttle::check_pct(|| run_pipeline(5, 3, 200), 60, 3);
}

/// Randomized scheduler with 3 batches in flight on the device (4 readers, 2 writers, 200
/// batches): the MFT window (4 slots) is mostly held by batches the device has not collected.
#[test]
fn batches_in_flight_on_the_device_equal_the_replay_random() {
    shuttle::check_random(|| run_pipeline_on(4, 2, 200, 3), 40);
}
