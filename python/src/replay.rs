//! `ordo.replay`: the sequential execution of a recorded computation order, the oracle of the
//! equivalence (`oac`'s table equals it bit for bit).

use crate::device::{Device, RowsAs};
use crate::errors::to_py;
use crate::lent::Lender;
use crate::step::{Payload, PyStep};
use crate::tables::EngineTables;
use ordo::engine::{Batch, EngineError, Mode, replay_into};
use pyo3::prelude::*;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Run the batches of `order` (batch ids) one by one onto `table`: `batch_of(id)` returns the
/// batch as `(ids, payload)` (or `None` for an id it does not know), and `step` is called as
/// in a session. With the table at the run's initial state, this is the synchronous run.
/// `table` may be a dict of named tables, as for `ordo.Engine`: `ids` is then a dict too.
/// `device`, `rows` and `batch_rows` are `ordo.Engine`'s, checked the same way before anything
/// runs (a replay is sequential: its device buffers are those of a `sync` engine).
#[pyfunction]
#[pyo3(signature = (table, order, batch_of, step, *, device = "cpu", rows = None, batch_rows = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn replay(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    order: Vec<u64>,
    batch_of: &Bound<'_, PyAny>,
    step: Py<PyAny>,
    device: &str,
    rows: Option<&str>,
    batch_rows: Option<usize>,
) -> PyResult<()> {
    let device = Device::parse(device)?;
    let tables = EngineTables::from_py(table)?;
    let rows_as = RowsAs::choose(py, rows, device)?;
    crate::device::check(py, device, batch_rows, Mode::Sync, 1, tables.width())?;
    replay_on(py, &tables, rows_as, order, batch_of, step)
}

/// [`replay`] onto an engine's tables.
pub(crate) fn replay_on(
    py: Python<'_>,
    tables: &EngineTables,
    rows_as: RowsAs,
    order: Vec<u64>,
    batch_of: &Bound<'_, PyAny>,
    step: Py<PyAny>,
) -> PyResult<()> {
    let _held = tables.take("replaying onto it")?;
    let layout = tables.layout();
    let mut model = PyStep {
        step,
        width: tables.width(),
        failed: Arc::new(AtomicBool::new(false)),
        cancel: Arc::new(AtomicBool::new(false)),
        times: Arc::default(),
        layout: layout.clone(),
        rows_as,
        lender: Lender::default(),
    };
    // An exception of `batch_of` stops the replay and is raised as it is.
    let mut raised: Option<PyErr> = None;
    let batch = |id: u64| {
        let got = batch_of.call1((id,)).and_then(|b| {
            if b.is_none() {
                return Ok(None);
            }
            let (ids, data): (Bound<'_, PyAny>, Py<PyAny>) = b.extract()?;
            let rows = crate::tables::batch_ids(layout.as_deref(), id, &ids)?;
            Ok(Some(Batch { id, rows, data: Payload { id, data } }))
        });
        got.unwrap_or_else(|e| {
            raised = Some(e);
            None
        })
    };
    let result = match tables {
        EngineTables::One(t) => replay_into(&mut model, &*t.get().store, &order, batch),
        EngineTables::Named { storage, .. } => replay_into(&mut model, &**storage, &order, batch),
    };
    match (raised, result) {
        (Some(e), Err(EngineError::UnknownBatch { .. })) => Err(e),
        (_, r) => r.map_err(|e| to_py(py, e)),
    }
}
