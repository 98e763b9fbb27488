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
use ordo::store::RowStore;
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
            let EngineError::Stopped { cause, order, unwritten, prefix, stamped } = err else {
                panic!("{mode:?}: {err}")
            };
            assert!(
                matches!(cause, StopCause::Injected { point: HookPoint::WriteFinish, batch_id } if batch_id == bad),
                "{mode:?}: {cause}"
            );
            let ts = order.iter().position(|&id| id == bad).expect("stamped") as u64;
            assert_eq!(prefix, Some(ts), "{mode:?}: the prefix ends before the failed batch");
            // Ids are input positions here.
            let positions: Vec<usize> =
                order[..ts as usize].iter().map(|&id| id as usize).collect();
            let mut table = start.clone();
            replay(&mut MixModel::new(2), &mut table, &batches(), &positions).unwrap();
            assert_eq!(store.snapshot(), table, "{mode:?}, batch {bad}: not the prefix's replay");
            assert!(unwritten.iter().all(|&(t, _)| t >= ts), "{mode:?}: {unwritten:?}");
            assert_eq!(unwritten.len() as u64, stamped - ts, "{mode:?}: every later batch held");
        }
    }
}

/// A [`RowStore`] whose write of one row fails once, when armed: the failing batch's writer
/// then stops in the middle of its rows, with some landed and some not.
struct FailsOneWrite {
    inner: RowStore,
    row: u64,
    /// Writes of `row` fail from this moment on, once (`None`: not armed).
    armed: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ordo::storage::RowStorage for FailsOneWrite {
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    fn width(&self) -> usize {
        self.inner.width()
    }
    fn read(
        &self,
        row: u64,
        out: &mut [f32],
    ) -> Result<ordo::store::Version, ordo::store::StoreError> {
        self.inner.read(row, out)
    }
    fn version(&self, row: u64) -> Result<ordo::store::Version, ordo::store::StoreError> {
        self.inner.version(row)
    }
    fn write_if_newer(
        &self,
        row: u64,
        ts: u64,
        values: &[f32],
    ) -> Result<bool, ordo::store::StoreError> {
        let mut armed = self.armed.lock().unwrap();
        if row == self.row && armed.is_some_and(|at| std::time::Instant::now() >= at) {
            *armed = None;
            return Err(ordo::store::StoreError::RowOutOfRange { row, rows: 0 });
        }
        self.inner.write_if_newer(row, ts, values)
    }
    fn snapshot(&self) -> Result<Vec<f32>, ordo::store::StoreError> {
        Ok(self.inner.snapshot())
    }
    fn next_version(&self) -> Result<u64, ordo::store::StoreError> {
        Ok(self.inner.next_version())
    }
}

/// A batch whose write fails after its first row landed and before its last is written: the
/// store is still the named prefix's replay (the landed row rolled back, the unwritten one left
/// alone). Rows `[i % 5, 5 + i % 7, 12 + i % 3]`; the middle row's write fails.
#[test]
fn a_write_failing_midway_leaves_the_named_prefix() {
    let batches: Vec<Batch<f32>> = (0..40u64)
        .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 7, 12 + i % 3], data: i as f32 / 16.0 })
        .collect();
    for mode in [Mode::Oac, Mode::Bounded(1), Mode::Sync] {
        for bad in [0u64, 9, 23] {
            let inner = RowStore::from_fn(15, 2, |r, c| (r * 2 + c) as f32 / 10.0);
            let start = inner.snapshot();
            let store = std::sync::Arc::new(FailsOneWrite {
                inner,
                row: 5 + bad % 7,
                armed: std::sync::Mutex::new(None),
            });
            let delay = Duration::from_millis(150);
            // Armed when the batch's delayed writer starts: the batches before it have written
            // by then, and those after it are held back behind it.
            let armer = store.clone();
            let hook = StageHook::new(move |point, id| match point {
                HookPoint::WriteStart if id == bad => {
                    *armer.armed.lock().unwrap() = Some(std::time::Instant::now() + delay);
                    HookAction::Delay(delay)
                }
                _ => HookAction::Continue,
            });
            let config = EngineConfig::new(mode).threads(2, 3).hook(hook);
            let err = Engine::new(config)
                .unwrap()
                .run(&mut MixModel::new(2), &*store, batches.clone())
                .unwrap_err();
            let EngineError::Stopped { order, prefix, .. } = err else { panic!("{mode:?}: {err}") };
            let ts = order.iter().position(|&id| id == bad).expect("stamped") as u64;
            assert_eq!(prefix, Some(ts), "{mode:?}: the prefix ends before the failed batch");
            let positions: Vec<usize> =
                order[..ts as usize].iter().map(|&id| id as usize).collect();
            let mut table = start.clone();
            replay(&mut MixModel::new(2), &mut table, &batches, &positions).unwrap();
            assert_eq!(store.inner.snapshot(), table, "{mode:?}, batch {bad}: not the prefix");
        }
    }
}
