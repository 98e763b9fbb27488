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
