//! The user's storage fails its N-th row write; the engine's error names a prefix of the order,
//! and the tables equal the replay of that prefix onto fresh tables.

use ordo::engine::{Engine, EngineConfig, EngineError, Mode, replay_into};
use ordo_downstream_user::{Factors, TwoTables, batch};

#[test]
fn after_a_failed_write_the_tables_are_the_named_prefix() -> Result<(), Box<dyn std::error::Error>>
{
    for (mode, nth) in [(Mode::Oac, 1), (Mode::Oac, 37), (Mode::Oac, 150), (Mode::Sync, 61)] {
        let store = TwoTables::new(7, 5).failing_write(nth);
        let engine = Engine::new(EngineConfig::new(mode).threads(2, 3))?;
        let mut model = Factors { users: 7, bias: 0.0 };
        let err =
            engine.run(&mut model, &store, (0..120).map(|i| batch(i, 7, 5, None))).unwrap_err();
        let EngineError::Stopped { order, prefix: Some(prefix), .. } = err else {
            panic!("{mode:?}: no prefix named: {err:?}")
        };
        let fresh = TwoTables::new(7, 5);
        let mut replayed = Factors { users: 7, bias: 0.0 };
        let done = &order[..prefix as usize];
        replay_into(&mut replayed, &fresh, done, |id| Some(batch(id, 7, 5, None)))?;
        assert_eq!(fresh.tables(), store.tables(), "{mode:?}, write {nth}: prefix {prefix}");
    }
    Ok(())
}
