//! The user's storage reports its own I/O failure through `StoreError`, and the user gets it
//! back from the engine, typed, with its `io::ErrorKind`.

use ordo::engine::{Engine, EngineConfig, EngineError, Mode, Stage, StageError, StopCause};
use ordo::row_store::StoreError;
use ordo_downstream_user::{Factors, TwoTables, batch};
use std::io::ErrorKind;

#[test]
fn a_failed_read_comes_back_as_the_storage_io_error() -> Result<(), Box<dyn std::error::Error>> {
    let store = TwoTables::new(5, 4).failing_reads();
    let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    let mut model = Factors { users: 5, bias: 0.0 };
    let err = engine.run(&mut model, &store, (0..20).map(|i| batch(i, 5, 4, None))).unwrap_err();
    match err {
        EngineError::Stopped {
            cause:
                StopCause::StageFailed {
                    stage: Stage::Reader,
                    source: StageError::Store(StoreError::Io(io)),
                    ..
                },
            stamped: 0,
            ..
        } => assert_eq!(io.kind(), ErrorKind::UnexpectedEof),
        other => panic!("not the storage's I/O error: {other:?}"),
    }
    Ok(())
}

#[test]
fn a_failed_write_comes_back_as_the_storage_io_error() -> Result<(), Box<dyn std::error::Error>> {
    let store = TwoTables::new(5, 4).failing_write(7);
    let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    let mut model = Factors { users: 5, bias: 0.0 };
    let err = engine.run(&mut model, &store, (0..20).map(|i| batch(i, 5, 4, None))).unwrap_err();
    let EngineError::Stopped { cause: StopCause::StageFailed { stage, source, .. }, .. } = err
    else {
        panic!("not a stage failure: {err:?}")
    };
    assert_eq!(stage, Stage::Writer);
    let StageError::Store(StoreError::Io(io)) = source else { panic!("{source:?}") };
    assert_eq!(io.kind(), ErrorKind::Other);
    assert_eq!(io.to_string(), "disk full");
    Ok(())
}
