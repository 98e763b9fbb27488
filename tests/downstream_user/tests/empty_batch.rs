//! A loader bug that yields a batch with no rows: the engine refuses it, typed, before it
//! enters the pipeline, through every way of running (whole epoch, scoped session, owned
//! session), and nothing is written.

use ordo::engine::{
    Batch, BatchError, BatchRows, CpuDevice, Engine, EngineConfig, EngineError, Mode, Model,
    StepError,
};
use ordo::row_store::RowStore;
use std::sync::Arc;

/// The user's model: moves every row halfway to the batch's target.
struct Halfway;

impl Model for Halfway {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        2
    }
    fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v));
        Ok(())
    }
}

fn is_empty_batch(err: &EngineError, id: u64, at: usize) -> bool {
    matches!(err, EngineError::InvalidBatch { batch_id, position, kind: BatchError::Empty }
        if *batch_id == id && *position == at)
}

#[test]
fn a_whole_epoch_with_an_empty_batch_is_refused_before_anything_runs() {
    let store = RowStore::zeros(4, 2);
    let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
    let batches = vec![
        Batch { id: 10, rows: vec![0, 1], data: 1.0 },
        Batch { id: 11, rows: vec![], data: 1.0 },
    ];
    let err = engine.run(&mut Halfway, &store, batches).unwrap_err();
    assert!(is_empty_batch(&err, 11, 1), "{err}");
    assert_eq!(store.snapshot(), vec![0.0; 8], "nothing ran");
}

#[test]
fn a_session_refuses_an_empty_batch_and_goes_on() {
    let store = RowStore::zeros(4, 2);
    let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
    let report = engine
        .session(&mut CpuDevice::new(), &mut Halfway, &store, |s| {
            s.submit(Batch { id: 0, rows: vec![0], data: 1.0 })?;
            let err = s.submit(Batch { id: 1, rows: vec![], data: 1.0 }).unwrap_err();
            assert!(is_empty_batch(&err, 1, 1), "{err}");
            s.submit(Batch { id: 2, rows: vec![3], data: 1.0 })?;
            s.finish()
        })
        .unwrap();
    // Two readers (the default) may finish batch 2 before batch 0: the computation order is
    // the engine's to choose and is reported, so only the set of stamped batches is fixed.
    let mut stamped = report.batch_ids();
    stamped.sort_unstable();
    assert_eq!(stamped, vec![0, 2], "the empty batch was never stamped");
}

#[test]
fn an_owned_session_refuses_an_empty_batch_on_the_callers_thread() {
    let store = Arc::new(RowStore::zeros(4, 2));
    let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
    let mut session = engine.start(CpuDevice::new(), Halfway, store).unwrap();
    let err = session.submit(Batch { id: 5, rows: vec![], data: 1.0 }).unwrap_err();
    assert!(is_empty_batch(&err, 5, 0), "{err}");
    session.submit(Batch { id: 6, rows: vec![2], data: 1.0 }).unwrap();
    assert_eq!(session.finish().unwrap().batch_ids(), vec![6]);
}
