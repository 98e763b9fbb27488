//! `ordo.replay`: the sequential execution of a recorded computation order, the oracle of the
//! equivalence (`oac`'s table equals it bit for bit).

use crate::errors::to_py;
use crate::step::{Payload, PyStep};
use crate::table::Table;
use ordo::engine::{Batch, EngineError, replay_into};
use pyo3::prelude::*;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Run the batches of `order` (batch ids) one by one onto `table`: `batch_of(id)` returns the
/// batch as `(ids, payload)` (or `None` for an id it does not know), and `step` is called as
/// in a session. With the table at the run's initial state, this is the synchronous run.
#[pyfunction]
pub(crate) fn replay(
    py: Python<'_>,
    table: PyRef<'_, Table>,
    order: Vec<u64>,
    batch_of: &Bound<'_, PyAny>,
    step: Py<PyAny>,
) -> PyResult<()> {
    let _held = table.take("replaying onto it")?;
    let mut model = PyStep {
        step,
        width: table.store.width(),
        failed: Arc::new(AtomicBool::new(false)),
        cancel: Arc::new(AtomicBool::new(false)),
        times: Arc::default(),
    };
    // An exception of `batch_of` stops the replay and is raised as it is.
    let mut raised: Option<PyErr> = None;
    let result = replay_into(&mut model, &*table.store, &order, |id| {
        let got = batch_of.call1((id,)).and_then(|b| {
            if b.is_none() {
                return Ok(None);
            }
            let (ids, data): (Bound<'_, PyAny>, Py<PyAny>) = b.extract()?;
            Ok(Some(Batch { id, rows: crate::row_ids(&ids)?, data: Payload { id, data } }))
        });
        got.unwrap_or_else(|e| {
            raised = Some(e);
            None
        })
    });
    match (raised, result) {
        (Some(e), Err(EngineError::UnknownBatch { .. })) => Err(e),
        (_, r) => r.map_err(|e| to_py(py, e)),
    }
}
