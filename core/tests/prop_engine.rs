//! Engine-level checks of OAC's claim: after an `Oac` run the store and the dense parameters equal,
//! bit for bit, the sequential replay of the recorded computation order, which is the submission
//! order in every mode, however the readers race; the same check fails for
//! `Async` (teeth); the validation cache stays bounded; bad input and failing stages end in typed
//! errors without hanging.
#![cfg(not(ordo_loom))]

use ordo::engine::simulation::{FuzzCase, Simulation, compare_with_replay, fuzz_check};
use ordo::engine::testing::{MixModel, ReadsBeforeWrite};
use ordo::engine::{
    AsyncWrite, Batch, BatchError, BatchRows, CpuDevice, Engine, EngineConfig, EngineError,
    HookAction, HookPoint, Mode, Model, RunReport, StageHook, Stamp, StepError, StopCause,
    TrySubmitError,
};
use ordo::row_store::{RowStore, Version};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A random batch set: `n` batches over `rows` rows; each row of a batch is drawn from a small
/// hot set with probability `hot/8`, else uniformly, so overlap ranges from none to total. A
/// batch's rows come in increasing order, rotated by a drawn amount: the engine takes distinct
/// rows in the model's order, and the checks hold for any.
fn batch_set() -> impl Strategy<Value = (usize, usize, Vec<Batch<f32>>)> {
    (1usize..40, 1usize..4, 0u32..=8, 1usize..24).prop_flat_map(|(rows, width, hot, n)| {
        // At least one pick, so no batch is empty (an empty batch is rejected: `BatchError::Empty`).
        let picks = prop::collection::vec((0u32..8, 0..rows as u64, 0u64..3), 1..6);
        let batch = (picks, -8i8..8, 0usize..6);
        prop::collection::vec(batch, n).prop_map(move |bs| {
            let batches = bs
                .into_iter()
                .enumerate()
                .map(|(i, (picks, data, turn))| {
                    let set: BTreeSet<u64> = picks
                        .into_iter()
                        .map(|(coin, r, h)| if coin < hot { h.min(rows as u64 - 1) } else { r })
                        .collect();
                    let mut rows: Vec<u64> = set.into_iter().collect();
                    let len = rows.len();
                    rows.rotate_left(turn % len);
                    Batch { id: i as u64, rows, data: f32::from(data) / 4.0 }
                })
                .collect();
            (rows, width, batches)
        })
    })
}

/// Random delays (0–300 µs, about one point in three) at every stage, from a seed.
fn delays(seed: u64) -> StageHook {
    StageHook::new(move |point, id| {
        let mut x = seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((point as u64) << 56);
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 29;
        if x.is_multiple_of(3) {
            HookAction::Delay(Duration::from_micros(x % 300))
        } else {
            HookAction::Continue
        }
    })
}

fn store(rows: usize, width: usize) -> RowStore {
    RowStore::from_fn(rows, width, |r, c| (r * 7 + c) as f32 * 0.125)
}

/// Run `config` on a fresh store; compare with the replay of the recorded order.
fn run_and_compare(
    config: EngineConfig,
    rows: usize,
    width: usize,
    batches: &[Batch<f32>],
) -> (RunReport, bool) {
    let store = store(rows, width);
    let initial = store.snapshot();
    let mut model = MixModel::new(width);
    let report = Engine::new(config).unwrap().run(&mut model, &store, batches.to_vec()).unwrap();
    assert_eq!(report.order.len(), batches.len(), "every batch stamped once");
    let cmp = compare_with_replay(
        MixModel::new(width),
        &initial,
        batches,
        &report,
        &store,
        &model.dense(),
    )
    .unwrap();
    (report, cmp.is_equal())
}

/// The cache never holds more rows than the batches stamped at or after the STE it evicted
/// below (the validation cache's invariant).
fn assert_cache_bounded(report: &RunReport, batches: &[Batch<f32>]) {
    for (ts, stamp) in report.order.iter().enumerate() {
        let window: usize = report.order[stamp.ste as usize..=ts]
            .iter()
            .map(|s| batches[s.position].rows.len())
            .sum();
        assert!(stamp.cache_rows <= window, "ts {ts}: {} rows cached > {window}", stamp.cache_rows);
    }
}

/// `Oac` with the given threads and queue depths, every stage delayed from `seed`.
fn oac_config(
    readers: usize,
    writers: usize,
    input: usize,
    output: usize,
    seed: u64,
) -> EngineConfig {
    EngineConfig::new(Mode::Oac).threads(readers, writers).depths(input, output).hook(delays(seed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn oac_equals_the_replay_of_its_order(
        (rows, width, batches) in batch_set(),
        readers in 1usize..4, writers in 1usize..4,
        input in 1usize..4, output in 1usize..4,
        seed in any::<u64>(),
    ) {
        let config = oac_config(readers, writers, input, output, seed);
        let (report, equal) = run_and_compare(config, rows, width, &batches);
        prop_assert!(equal, "Oac diverged from the replay of {:?}", report.batch_ids());
        prop_assert!(report.positions().into_iter().eq(0..batches.len()), "not the submission order");
        assert_cache_bounded(&report, &batches);
    }

    #[test]
    fn inline_batches_keep_the_replay_and_their_place(
        (rows, width, batches) in batch_set(),
        inline in prop::collection::vec(any::<bool>(), 24),
        readers in 1usize..4, writers in 1usize..4,
        input in 1usize..4, output in 1usize..4,
        seed in any::<u64>(),
        owned in any::<bool>(),
    ) {
        // Batches `i` with `inline[i]` go through `submit_inline`, the rest through `submit`,
        // of the scoped session or (`owned`) of the owned one.
        let config = oac_config(readers, writers, input, output, seed);
        let store = std::sync::Arc::new(store(rows, width));
        let initial = store.snapshot();
        let engine = Engine::new(config).unwrap();
        let (report, dense) = if owned {
            let mut s = engine.start(CpuDevice::new(), MixModel::new(width), store.clone()).unwrap();
            for (i, b) in batches.iter().enumerate() {
                if inline[i] { s.submit_inline(b.clone()) } else { s.submit(b.clone()) }.unwrap();
            }
            let report = s.finish().unwrap();
            (report, s.close().model.dense())
        } else {
            let mut model = MixModel::new(width);
            let report = engine
                .session(&mut CpuDevice::new(), &mut model, &*store, |s| {
                    for (i, b) in batches.iter().enumerate() {
                        if inline[i] { s.submit_inline(b.clone())? } else { s.submit(b.clone())? }
                    }
                    s.finish()
                })
                .unwrap();
            (report, model.dense())
        };
        prop_assert_eq!(report.order.len(), batches.len(), "every batch stamped once");
        let cmp =
            compare_with_replay(MixModel::new(width), &initial, &batches, &report, &store, &dense)
                .unwrap();
        prop_assert!(cmp.is_equal(), "diverged from the replay of {:?}", report.batch_ids());
        // An inline batch's stamp splits the order: every batch submitted before it first.
        let positions = report.positions();
        for (ts, &p) in positions.iter().enumerate() {
            if inline[p] {
                prop_assert!(
                    positions.iter().enumerate().all(|(t, &q)| (q < p) == (t < ts)),
                    "inline batch {} out of place in {:?}", p, positions
                );
            }
        }
        assert_cache_bounded(&report, &batches);
    }

    #[test]
    fn sync_and_bounded_one_equal_the_replay(
        (rows, width, batches) in batch_set(),
        bounded in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mode = if bounded { Mode::Bounded(1) } else { Mode::Sync };
        let config = EngineConfig::new(mode).threads(2, 2).hook(delays(seed));
        let (_, equal) = run_and_compare(config, rows, width, &batches);
        prop_assert!(equal);
    }

    #[test]
    fn simulated_schedules_equal_the_replay(data in prop::collection::vec(any::<u8>(), 0..256)) {
        fuzz_check(&data);
    }

    #[test]
    fn simulated_oac_keeps_the_cache_bounded(
        (rows, width, batches) in batch_set(),
        schedule in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let store = store(rows, width);
        let config = EngineConfig::new(Mode::Oac).threads(3, 2).depths(2, 2);
        let sim = Simulation::new(config, MixModel::new(width), &store, batches.clone()).unwrap();
        let (_, report) = sim.run(&schedule).unwrap();
        assert_cache_bounded(&report, &batches);
    }
}

/// The first batch's write waits until the device has taken the second, so both read the
/// initial rows: a forced interleaving, deterministic on any machine.
fn all_read_before_any_write() -> StageHook {
    ReadsBeforeWrite::new(|id| id == 0, 1, Duration::from_secs(5)).into()
}

fn two_overlapping() -> Vec<Batch<f32>> {
    vec![Batch { id: 0, rows: vec![0, 1], data: 1.0 }, Batch { id: 1, rows: vec![1, 2], data: 2.0 }]
}

#[test]
fn teeth_async_breaks_the_replay_on_overlapping_batches() {
    for write in [AsyncWrite::Overwrite, AsyncWrite::AddDelta] {
        let config = EngineConfig::new(Mode::Async(write))
            .threads(2, 2)
            .depths(2, 2)
            .hook(all_read_before_any_write());
        let (_, equal) = run_and_compare(config, 3, 2, &two_overlapping());
        assert!(!equal, "{write:?}: the checker must see the lost update");
    }
    // The same forced interleaving under Oac is still equivalent: validation repairs it.
    let config =
        EngineConfig::new(Mode::Oac).threads(2, 2).depths(2, 2).hook(all_read_before_any_write());
    let (report, equal) = run_and_compare(config, 3, 2, &two_overlapping());
    assert!(equal);
    assert_eq!(report.rows_replaced, 1, "row 1 of the second batch came from the cache");
}

#[test]
fn teeth_simulated_async_and_bounded_fail_for_some_schedule() {
    // Deterministic: the schedules are fixed; we look for one that breaks the claim.
    let modes =
        [Mode::Async(AsyncWrite::Overwrite), Mode::Async(AsyncWrite::AddDelta), Mode::Bounded(2)];
    for mode in modes {
        let failing = (0u8..64).find(|&s| {
            let store = store(3, 1);
            let initial = store.snapshot();
            let batches = two_overlapping();
            let config = EngineConfig::new(mode).threads(2, 1).depths(2, 2);
            let sim = Simulation::new(config, MixModel::new(1), &store, batches.clone()).unwrap();
            let schedule: Vec<u8> =
                (0..64u8).map(|i| s.wrapping_mul(37).wrapping_add(i.wrapping_mul(11))).collect();
            let (model, report) = sim.run(&schedule).unwrap();
            let cmp = compare_with_replay(
                MixModel::new(1),
                &initial,
                &batches,
                &report,
                &store,
                &model.dense(),
            )
            .unwrap();
            !cmp.is_equal()
        });
        assert!(failing.is_some(), "{mode:?} never broke the replay: the check has no teeth");
    }
}

#[test]
fn fuzz_case_check_is_the_claim() {
    let case_bytes: Vec<u8> = (0..200u32).map(|i| (i * 13 % 251) as u8).collect();
    fuzz_check(&case_bytes);
    let mut u = arbitrary::Unstructured::new(&case_bytes);
    let case: FuzzCase = arbitrary::Arbitrary::arbitrary(&mut u).unwrap();
    assert!(case.check().is_ok());
}

/// Every committed fuzz input — the minimized corpus (`fuzz/corpus/engine_schedule`) and the
/// regression inputs (`fuzz/regressions/engine_schedule`: one crashing input per mutant the
/// fuzzer killed, so each replays a found bug) — passes the claim on the correct code. Both
/// folders are committed: a missing or empty one fails the test instead of skipping it.
#[test]
fn simulation_replays_saved_fuzz_inputs() {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for sub in ["corpus/engine_schedule", "regressions/engine_schedule"] {
        let dir = fuzz.join(sub);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("committed fuzz inputs missing at {}: {e}", dir.display()));
        let mut replayed = 0;
        for e in entries.flatten() {
            fuzz_check(&std::fs::read(e.path()).unwrap());
            replayed += 1;
        }
        assert!(replayed > 0, "no fuzz inputs in {}", dir.display());
    }
}

/// Run `f` on a thread; fail the test if it does not return within `secs` (a hang).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the engine hung for {secs} s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the checked closure panicked (above)"),
    }
}

#[test]
fn malformed_batches_are_rejected_before_anything_runs() {
    let cases: Vec<(Vec<u64>, BatchError)> = vec![
        (vec![0, 5], BatchError::RowOutOfRange { row: 5, rows: 4 }),
        (vec![1, 1], BatchError::Duplicate { row: 1 }),
        (vec![3, 0, 2, 0], BatchError::Duplicate { row: 0 }),
        (vec![2, 9, 1], BatchError::RowOutOfRange { row: 9, rows: 4 }),
        (vec![], BatchError::Empty),
    ];
    for (rows, kind) in cases {
        let store = store(4, 2);
        let before = store.snapshot();
        let batches =
            vec![Batch { id: 9, rows: vec![0], data: 1.0 }, Batch { id: 7, rows, data: 1.0 }];
        let err = Engine::new(EngineConfig::new(Mode::Oac))
            .unwrap()
            .run(&mut MixModel::new(2), &store, batches)
            .unwrap_err();
        assert!(
            matches!(err, EngineError::InvalidBatch { position: 1, batch_id: 7, kind: k } if k == kind),
            "{err}"
        );
        assert_eq!(store.snapshot(), before, "nothing ran");
    }
    let err = Engine::new(EngineConfig::new(Mode::Oac))
        .unwrap()
        .run(&mut MixModel::new(3), &store(4, 2), Vec::new())
        .unwrap_err();
    assert!(matches!(err, EngineError::WidthMismatch { model: 3, store: 2 }));
    assert!(matches!(
        Engine::new(EngineConfig::new(Mode::Bounded(0))),
        Err(EngineError::Config(_))
    ));
}

/// MixModel that fails (or panics) on one batch.
struct Faulty {
    inner: MixModel,
    bad: u64,
    panic: bool,
}

impl Model for Faulty {
    type Data = (u64, f32);
    type Error = StepError;
    fn row_width(&self) -> usize {
        self.inner.row_width()
    }
    fn step(&mut self, data: &(u64, f32), rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        if data.0 == self.bad {
            if self.panic {
                panic!("boom on {}", data.0);
            }
            return Err("model says no".into());
        }
        self.inner.step(&data.1, rows)
    }
}

fn order_of(mode: Mode, positions: &[usize]) -> RunReport {
    RunReport {
        mode,
        order: positions
            .iter()
            .enumerate()
            .map(|(ts, &p)| Stamp {
                ts: ts as u64,
                batch_id: p as u64,
                position: p,
                read_prefix: 0,
                staleness: Default::default(),
                ste: 0,
                cache_rows: 0,
            })
            .collect(),
        ts_base: 0,
        cache_peak: 0,
        rows_validated: 0,
        rows_replaced: 0,
        elapsed: Duration::ZERO,
    }
}

#[test]
fn a_failing_or_panicking_step_stops_the_pipeline_and_every_stamped_batch_is_written() {
    let cases =
        [(Mode::Oac, true), (Mode::Oac, false), (Mode::Sync, true), (Mode::Bounded(1), false)];
    for (mode, panic) in cases {
        within(30, move || {
            let (rows, width) = (16, 2);
            let store = store(rows, width);
            let initial = store.snapshot();
            let batches: Vec<Batch<f32>> = (0..40u64)
                .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 11], data: i as f32 / 8.0 })
                .collect();
            let tagged: Vec<Batch<(u64, f32)>> = batches
                .iter()
                .map(|b| Batch { id: b.id, rows: b.rows.clone(), data: (b.id, b.data) })
                .collect();
            let mut model = Faulty { inner: MixModel::new(width), bad: 20, panic };
            let config = EngineConfig::new(mode).threads(2, 2).hook(delays(7));
            let err = Engine::new(config).unwrap().run(&mut model, &store, tagged).unwrap_err();
            let EngineError::Stopped { cause, stamped, order, unwritten, .. } = err else {
                panic!("{err}")
            };
            match cause {
                StopCause::StepPanicked { batch_id: 20, .. } if panic => {}
                StopCause::StepFailed { batch_id: 20, .. } if !panic => {}
                other => panic!("{other}"),
            }
            assert!(unwritten.is_empty());
            // Ids are the input positions here.
            let positions: Vec<usize> = order.iter().map(|&id| id as usize).collect();
            assert_eq!(positions.len() as u64, stamped);
            assert!(!positions.contains(&20), "the failed batch is not stamped");
            // Every stamped batch is fully written: the store is the replay of the stamped order.
            let cmp = compare_with_replay(
                MixModel::new(width),
                &initial,
                &batches,
                &order_of(mode, &positions),
                &store,
                &model.inner.dense(),
            )
            .unwrap();
            assert!(cmp.is_equal(), "{mode:?}: {cmp:?}");
        });
    }
}

#[test]
fn a_failing_writer_stops_the_pipeline_and_is_reported() {
    within(30, || {
        let store = store(8, 1);
        let batches: Vec<Batch<f32>> =
            (0..30u64).map(|i| Batch { id: i, rows: vec![i % 8], data: 1.0 }).collect();
        let hook = StageHook::new(|point, id| {
            if point == HookPoint::WriteFinish && id == 10 {
                HookAction::Fail
            } else {
                HookAction::Continue
            }
        });
        let config = EngineConfig::new(Mode::Oac).hook(hook);
        let err =
            Engine::new(config).unwrap().run(&mut MixModel::new(1), &store, batches).unwrap_err();
        let EngineError::Stopped { cause, stamped, order, unwritten, .. } = err else {
            panic!("{err}")
        };
        assert!(matches!(
            cause,
            StopCause::Injected { point: HookPoint::WriteFinish, batch_id: 10 }
        ));
        let ts = order.iter().position(|&id| id == 10).expect("batch 10 was stamped") as u64;
        // Batch 10 and every batch stamped after it (held back) are unwritten.
        let after: Vec<(u64, u64)> = (ts..stamped).map(|t| (t, order[t as usize])).collect();
        assert_eq!(unwritten, after);
        assert!(stamped > ts);
    });
}

#[test]
fn runs_are_repeatable_epochs_on_one_store() {
    let (rows, width) = (10, 2);
    let store = store(rows, width);
    let initial = store.snapshot();
    let batches: Vec<Batch<f32>> =
        (0..20u64).map(|i| Batch { id: i, rows: vec![i % 3, 3 + i % 7], data: 0.5 }).collect();
    let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
    let mut model = MixModel::new(width);
    let r1 = engine.run(&mut model, &store, batches.clone()).unwrap();
    let r2 = engine.run(&mut model, &store, batches.clone()).unwrap();
    assert_eq!(r2.ts_base, r1.ts_base + 20, "store versions continue across epochs");
    let mut order = r1.positions();
    order.extend(r2.positions());
    let mut table = initial;
    let mut fresh = MixModel::new(width);
    ordo::engine::replay(&mut fresh, &mut table, &batches, &order).unwrap();
    assert_eq!(store.snapshot(), table);
    assert_eq!(model.dense(), fresh.dense());
}

/// Readers that race: each batch's read starts after a pseudo-random 0–3 ms (from its id), so
/// with 4 readers the batches reach the device in a scrambled order.
fn racing_readers() -> StageHook {
    StageHook::new(|point, id| {
        let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        match point {
            HookPoint::ReadStart => HookAction::Delay(Duration::from_micros(x % 3000)),
            _ => HookAction::Continue,
        }
    })
}

/// The device takes batches in submission order whatever order the readers finish them in:
/// in every mode the recorded order is the identity, and the modes that promise their order
/// (`Oac`, `Bounded(1)`) end with the store and dense parameters of the sequential run, bit
/// for bit, over two epochs of one session. (Before the device kept the submission order,
/// racing readers permuted the order and `Oac` diverged from `Sync`.)
#[test]
fn racing_readers_leave_the_submission_order_in_every_mode() {
    let (rows, width) = (12, 2);
    let batches: Vec<Batch<f32>> = (0..40u64)
        .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 7], data: (i % 9) as f32 / 4.0 })
        .collect();
    let run = |config: EngineConfig| {
        let store = store(rows, width);
        let mut model = MixModel::new(width);
        let engine = Engine::new(config.threads(4, 2)).unwrap();
        let reports = engine
            .session(&mut CpuDevice::new(), &mut model, &store, |s| {
                (0..2)
                    .map(|_| {
                        s.submit_all(batches.clone())?;
                        s.finish()
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap();
        (reports, store.snapshot(), model.dense())
    };
    let (_, sequential, sequential_dense) = run(EngineConfig::new(Mode::Sync));
    let identity: Vec<usize> = (0..batches.len()).collect();
    let modes = [Mode::Oac, Mode::Bounded(1), Mode::Bounded(3), Mode::Async(AsyncWrite::Overwrite)];
    for mode in modes {
        let (reports, table, dense) = run(EngineConfig::new(mode).hook(racing_readers()));
        for report in &reports {
            assert_eq!(report.positions(), identity, "{mode:?}: not the submission order");
        }
        if mode.is_equivalent() {
            assert!(table == sequential, "{mode:?}: the store differs from the sequential run");
            assert_eq!(dense, sequential_dense, "{mode:?}: dense parameters differ");
        }
    }
}

/// The owned session (the Python binding's) keeps the submission order too, with batches
/// submitted one call at a time while the readers race.
#[test]
fn racing_readers_leave_the_submission_order_in_an_owned_session() {
    let store = std::sync::Arc::new(store(8, 1));
    let config = EngineConfig::new(Mode::Oac).threads(4, 2).hook(racing_readers());
    let mut s =
        Engine::new(config).unwrap().start(CpuDevice::new(), MixModel::new(1), store).unwrap();
    let batches = (0..30u64).map(|i| Batch { id: i, rows: vec![i % 8], data: 0.25 });
    let mut ids: Vec<u64> = Vec::new();
    for b in batches {
        s.submit(b).unwrap();
        ids.extend(s.drain_order().iter().map(|stamp| stamp.batch_id));
    }
    ids.extend(s.finish().unwrap().batch_ids());
    assert_eq!(ids, (0..30).collect::<Vec<u64>>(), "not the submission order");
}

/// A model that records, at each inline batch's step, the version of every row of the store it
/// shares with the session (`Data`: whether the batch was submitted inline).
struct InlineWitness {
    store: std::sync::Arc<RowStore>,
    seen: Vec<Vec<Version>>,
}

impl Model for InlineWitness {
    type Data = bool;
    type Error = StepError;
    fn row_width(&self) -> usize {
        1
    }
    fn step(&mut self, inline: &bool, _rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        if *inline {
            self.seen.push(self.store.versions());
        }
        Ok(())
    }
}

/// An inline batch is read once every batch submitted before it is written (its other promise
/// besides its place in the order, which the submission-order device now keeps for every
/// batch): at its step the store holds the write of every earlier batch, in the scoped and in
/// the owned session, while writers lag behind the device by 1 ms a batch. Kills
/// `inline-without-drain` and `owned-inline-pipelined`, which send it through the pipeline.
#[test]
fn an_inline_batch_sees_every_earlier_batch_written() {
    let rows = 6;
    let batches: Vec<Batch<bool>> = (0..30u64)
        .map(|i| Batch { id: i, rows: vec![i % 6, (i * 5 + 1) % 6], data: i % 5 == 4 })
        .collect();
    let slow_writers = StageHook::new(|point, _| match point {
        HookPoint::WriteStart => HookAction::Delay(Duration::from_millis(1)),
        _ => HookAction::Continue,
    });
    // What the store must hold when batch `p` is read: each row's last write before `p`.
    let expected = |p: usize| -> Vec<Version> {
        (0..rows as u64)
            .map(|r| {
                (0..p)
                    .rev()
                    .find(|&q| batches[q].rows.contains(&r))
                    .map_or(Version::Initial, |q| Version::Written(q as u64))
            })
            .collect()
    };
    let inline_positions: Vec<usize> = (0..batches.len()).filter(|&p| batches[p].data).collect();
    for owned in [false, true] {
        let store = std::sync::Arc::new(RowStore::zeros(rows, 1));
        let mut model = InlineWitness { store: store.clone(), seen: Vec::new() };
        let config = EngineConfig::new(Mode::Oac).threads(2, 2).hook(slow_writers.clone());
        let engine = Engine::new(config).unwrap();
        if owned {
            let mut s = engine.start(CpuDevice::new(), model, store.clone()).unwrap();
            for b in &batches {
                if b.data { s.submit_inline(b.clone()) } else { s.submit(b.clone()) }.unwrap();
            }
            let report = s.finish().unwrap();
            assert_eq!(report.positions().len(), batches.len());
            model = s.close().model;
        } else {
            engine
                .session(&mut CpuDevice::new(), &mut model, &*store, |s| {
                    for b in &batches {
                        if b.data { s.submit_inline(b.clone())? } else { s.submit(b.clone())? }
                    }
                    s.finish()
                })
                .unwrap();
        }
        assert_eq!(model.seen.len(), inline_positions.len(), "owned {owned}: inline steps");
        for (seen, &p) in model.seen.iter().zip(&inline_positions) {
            assert_eq!(
                seen,
                &expected(p),
                "owned {owned}: inline batch {p} read before earlier writes"
            );
        }
    }
}

/// Feed an owned session as the Python binding feeds it (`python/src/session.rs`) for `budget`:
/// each batch offered with `submit_timeout` (every fifth `submit_inline_timeout`) and a short
/// timeout, again until it goes in, the outbox's completions counted after each offer; each
/// epoch (one to three batches) ended by waiting until the outbox holds a completion for every
/// batch submitted, then `finish`. Returns the epochs run, or how the caller got stuck: waiting
/// past `stalled` for completions.
fn feed_as_the_binding(seed: u64, budget: Duration, stalled: Duration) -> Result<usize, String> {
    const OFFER: Duration = Duration::from_millis(1);
    let store = std::sync::Arc::new(store(8, 1));
    let config = EngineConfig::new(Mode::Oac).hook(delays(seed));
    let mut s =
        Engine::new(config).unwrap().start(CpuDevice::new(), MixModel::new(1), store).unwrap();
    let started = Instant::now();
    let (mut id, mut epochs) = (0u64, 0usize);
    while started.elapsed() < budget {
        let n = 1 + epochs % 3;
        let mut written = 0;
        for _ in 0..n {
            let mut batch = Batch { id, rows: vec![id % 8], data: 0.25 };
            loop {
                let offered = if id % 5 == 4 {
                    s.submit_inline_timeout(batch, OFFER)
                } else {
                    s.submit_timeout(batch, OFFER)
                };
                written += s.completions().len();
                match offered {
                    Ok(()) => break,
                    Err(TrySubmitError::Full(back)) => batch = back,
                    Err(TrySubmitError::Failed(e)) => return Err(e.to_string()),
                }
            }
            id += 1;
        }
        let waited = Instant::now();
        while written < n {
            written += s.completions().len();
            if waited.elapsed() > stalled {
                return Err(format!(
                    "epoch {epochs}: {written} of {n} batches written after {stalled:?}"
                ));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        let positions = s.finish().map_err(|e| e.to_string())?.positions();
        assert_eq!(
            positions,
            (0..n).collect::<Vec<_>>(),
            "epoch {epochs}: not the submission order"
        );
        epochs += 1;
    }
    Ok(epochs)
}

/// A caller fed as the binding feeds its session (see `feed_as_the_binding`) learns of a write
/// only through the outbox, so the device thread must never sleep while it holds a completion
/// it has not published: nothing would wake it again, and the caller would wait forever (an
/// `oac` run of the Python recommender example hung so, once in hundreds of runs). Four
/// sessions at once, with random delays at every stage, make thousands of epoch ends on more
/// threads than cores, each a chance for the epoch's last completion to come at any point of
/// a device thread's round, preempted or not. A stuck caller fails the test instead of
/// hanging.
#[test]
fn an_owned_session_fed_as_the_binding_feeds_it_publishes_every_completion() {
    let (budget, stalled) = (Duration::from_secs(3), Duration::from_secs(5));
    let runs: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let feeders: Vec<_> = (0..4u64)
            .map(|seed| scope.spawn(move || feed_as_the_binding(seed, budget, stalled)))
            .collect();
        feeders.into_iter().map(|f| f.join().unwrap()).collect()
    });
    for (seed, run) in runs.into_iter().enumerate() {
        match run {
            Ok(epochs) => {
                assert!(epochs >= 10, "session {seed}: only {epochs} epochs in {budget:?}")
            }
            Err(stuck) => panic!(
                "session {seed}: {stuck}: the device thread sleeps on a completion it did not publish"
            ),
        }
    }
}
