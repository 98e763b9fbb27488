//! After a failed write, the store equals the replay of the prefix of the order that the error
//! names: the writers hold back every batch after the failed one and roll back its rows.
//!
//! Deterministic fault injection (the `testing` feature's `StageHook`): the failing batch's
//! writer is delayed at its start, so the batches after it reach the other writers first, and
//! then fails after writing its rows. Mutant `writes-not-held-back` lets those later batches
//! write on top, which this test catches:
//! `ORDO_MUTANT=writes-not-held-back cargo test -p ordo --features mutants --test prop_write_prefix`.

use ordo::engine::{
    Batch, Engine, EngineConfig, EngineError, HookAction, HookPoint, Mode, StageHook, StopCause,
    replay, testing::MixModel,
};
use ordo::row_store::{RowStore, StoreError, Version};
use ordo::storage::RowStorage;
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

/// Overlapping batches over 12 rows of width 2.
fn batches() -> Vec<Batch<f32>> {
    (0..40u64)
        .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 7], data: i as f32 / 16.0 })
        .collect()
}

fn initial() -> RowStore {
    RowStore::from_fn(12, 2, |r, c| (r * 2 + c) as f32 / 10.0)
}

/// The table `start` after the replay of `order`'s first `ts` batches (ids are input
/// positions here): what the store must hold after a failure of the batch stamped `ts`.
fn replay_of_prefix(start: &[f32], batches: &[Batch<f32>], order: &[u64], ts: u64) -> Vec<f32> {
    let positions: Vec<usize> = order[..ts as usize].iter().map(|&id| id as usize).collect();
    let mut table = start.to_vec();
    replay(&mut MixModel::new(2), &mut table, batches, &positions).unwrap();
    table
}

/// Batch `bad`'s writer waits, then fails after writing all its rows.
fn fail_late(bad: u64) -> StageHook {
    StageHook::new(move |point, id| match point {
        HookPoint::WriteStart if id == bad => HookAction::Delay(Duration::from_millis(150)),
        HookPoint::WriteFinish if id == bad => HookAction::Fail,
        _ => HookAction::Continue,
    })
}

#[test]
fn after_a_failed_write_the_store_is_the_replay_of_the_named_prefix() {
    for mode in [Mode::Oac, Mode::Bounded(1), Mode::Sync] {
        for bad in [0u64, 9, 23] {
            let store = initial();
            let start = store.snapshot();
            let config = EngineConfig::new(mode).threads(2, 3).hook(fail_late(bad));
            let mut model = MixModel::new(2);
            let err = Engine::new(config).unwrap().run(&mut model, &store, batches()).unwrap_err();
            let EngineError::Stopped { cause, order, unwritten, prefix, stamped, .. } = err else {
                panic!("{mode:?}: {err}")
            };
            assert!(
                matches!(cause, StopCause::Injected { point: HookPoint::WriteFinish, batch_id } if batch_id == bad),
                "{mode:?}: {cause}"
            );
            let ts = order.iter().position(|&id| id == bad).expect("stamped") as u64;
            assert_eq!(prefix, Some(ts), "{mode:?}: the prefix ends before the failed batch");
            let table = replay_of_prefix(&start, &batches(), &order, ts);
            assert_eq!(store.snapshot(), table, "{mode:?}, batch {bad}: not the prefix's replay");
            assert!(unwritten.iter().all(|&(t, _)| t >= ts), "{mode:?}: {unwritten:?}");
            assert_eq!(unwritten.len() as u64, stamped - ts, "{mode:?}: every later batch held");
        }
    }
}

/// A [`RowStore`] one of whose writes fails: the one `fails(row, ts)` picks (it sees each
/// write once, in the order the writers call). `promise` is its answer to
/// [`RowStorage::write_fails_only_on_bad_arguments`].
struct FailsOneWrite {
    inner: RowStore,
    fails: Box<dyn Fn(u64, u64) -> bool + Send + Sync>,
    promise: bool,
}

impl RowStorage for FailsOneWrite {
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    fn width(&self) -> usize {
        self.inner.width()
    }
    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        self.inner.read(row, out)
    }
    fn version(&self, row: u64) -> Result<Version, StoreError> {
        self.inner.version(row)
    }
    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        if (self.fails)(row, ts) {
            return Err(StoreError::RowOutOfRange { row, rows: 0 });
        }
        self.inner.write_if_newer(row, ts, values)
    }
    fn write_fails_only_on_bad_arguments(&self) -> bool {
        self.promise
    }
    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        Ok(self.inner.snapshot())
    }
    fn next_version(&self) -> Result<u64, StoreError> {
        Ok(self.inner.next_version())
    }
}

/// 40 batches of three rows, `[i % 5, 5 + i % 7, 12 + i % 3]`, over 15 rows of width 2.
fn batches_of_three() -> Vec<Batch<f32>> {
    (0..40u64)
        .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 7, 12 + i % 3], data: i as f32 / 16.0 })
        .collect()
}

/// The 15 rows of width 2 that [`batches_of_three`] reads and writes, as they start.
fn rows_of_three_row_batches() -> RowStore {
    RowStore::from_fn(15, 2, |r, c| (r * 2 + c) as f32 / 10.0)
}

/// A batch whose write fails after its first row landed and before its last is written: the
/// store is still the named prefix's replay (the landed row rolled back, the unwritten one left
/// alone). Rows `[i % 5, 5 + i % 7, 12 + i % 3]`; the middle row's write fails.
#[test]
fn a_write_failing_midway_leaves_the_named_prefix() {
    let batches = batches_of_three();
    for mode in [Mode::Oac, Mode::Bounded(1), Mode::Sync] {
        for bad in [0u64, 9, 23] {
            let inner = rows_of_three_row_batches();
            let start = inner.snapshot();
            // Armed for the thread that writes batch `bad` (a writer writes one batch to its
            // end), so no other batch's write of that row fails, however the threads run; it
            // fails once. The delay lets the batches after it reach the other writers and be
            // held back.
            let armed: Arc<Mutex<Option<ThreadId>>> = Arc::default();
            let (armer, row) = (armed.clone(), 5 + bad % 7);
            let fails = move |r, _| {
                let mut armed = armed.lock().unwrap();
                let here = r == row && *armed == Some(thread::current().id());
                if here {
                    *armed = None;
                }
                here
            };
            let store = FailsOneWrite { inner, fails: Box::new(fails), promise: false };
            let hook = StageHook::new(move |point, id| match point {
                HookPoint::WriteStart if id == bad => {
                    *armer.lock().unwrap() = Some(thread::current().id());
                    HookAction::Delay(Duration::from_millis(150))
                }
                _ => HookAction::Continue,
            });
            let config = EngineConfig::new(mode).threads(2, 3).hook(hook);
            let err = Engine::new(config)
                .unwrap()
                .run(&mut MixModel::new(2), &store, batches.clone())
                .unwrap_err();
            let EngineError::Stopped { order, prefix, .. } = err else { panic!("{mode:?}: {err}") };
            let ts = order.iter().position(|&id| id == bad).expect("stamped") as u64;
            assert_eq!(prefix, Some(ts), "{mode:?}: the prefix ends before the failed batch");
            let table = replay_of_prefix(&start, &batches, &order, ts);
            assert_eq!(store.inner.snapshot(), table, "{mode:?}, batch {bad}: not the prefix");
        }
    }
}

/// With no hook and a storage whose writes fail only on bad arguments, writers keep no copies
/// to roll back with. If such a storage fails midway anyway, the batch's first row has landed
/// and cannot be restored: the error must name no prefix rather than one the store does not
/// hold. Mutant `roll-back-without-copies` names the prefix before the failed batch.
#[test]
fn a_write_failing_midway_without_copies_names_no_prefix() {
    let batches = batches_of_three();
    for mode in [Mode::Oac, Mode::Bounded(1), Mode::Sync] {
        for bad_ts in [0u64, 9, 23] {
            let inner = rows_of_three_row_batches();
            let start = inner.snapshot();
            // The second write at version `bad_ts`: the second row of the batch stamped so.
            let seen = Mutex::new(0);
            let fails = move |_, ts| {
                let mut seen = seen.lock().unwrap();
                *seen += u32::from(ts == bad_ts);
                ts == bad_ts && *seen == 2
            };
            let store = FailsOneWrite { inner, fails: Box::new(fails), promise: true };
            let config = EngineConfig::new(mode).threads(2, 3);
            let err = Engine::new(config)
                .unwrap()
                .run(&mut MixModel::new(2), &store, batches.clone())
                .unwrap_err();
            let EngineError::Stopped { cause, order, prefix, .. } = err else {
                panic!("{mode:?}: {err}")
            };
            assert!(matches!(cause, StopCause::StageFailed { .. }), "{mode:?}: {cause}");
            assert_eq!(prefix, None, "{mode:?}, ts {bad_ts}: a landed row was not rolled back");
            // The failed batch's first row did land: the store is not the replay of the
            // batches before it, so naming that prefix would be wrong.
            let before = replay_of_prefix(&start, &batches, &order, bad_ts);
            assert_ne!(store.inner.snapshot(), before, "{mode:?}, ts {bad_ts}: nothing landed");
        }
    }
}
