//! The user's model names its own step error, and matches it from the engine's error as that
//! type: no downcast.

use ordo::engine::{Engine, EngineConfig, EngineError, Mode, StopCause};
use ordo_downstream_user::{Diverged, Factors, TwoTables, batch};

#[test]
fn a_diverged_step_comes_back_as_the_users_own_error() -> Result<(), Box<dyn std::error::Error>> {
    for mode in [Mode::Oac, Mode::Sync] {
        let store = TwoTables::new(6, 5);
        let engine = Engine::new(EngineConfig::new(mode))?;
        let mut model = Factors { users: 6, bias: 0.0 };
        let result = engine.run(&mut model, &store, (0..30).map(|i| batch(i, 6, 5, Some(12))));
        match result {
            Err(EngineError::Stopped {
                cause: StopCause::StepFailed { batch_id: 12, source: Diverged::NotFinite { batch } },
                ..
            }) => assert_eq!(batch, 12),
            other => panic!("{mode:?}: not the user's error: {other:?}"),
        }
    }
    Ok(())
}
