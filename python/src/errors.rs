//! The engine's typed errors as Python exceptions: `ordo.OrdoError` and its subclasses
//! `ordo.StepFailed` (chained to the step's own exception) and `ordo.InvalidBatch`.

use ordo::engine::{EngineError, StopCause};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

create_exception!(_ordo, OrdoError, PyException, "Any error of the ordo engine.");
create_exception!(
    _ordo,
    StepFailed,
    OrdoError,
    "The run stopped: the step of batch `batch_id` failed (its exception is `__cause__`)."
);
create_exception!(
    _ordo,
    InvalidBatch,
    OrdoError,
    "A malformed batch, refused before it entered the pipeline."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("OrdoError", py.get_type::<OrdoError>())?;
    m.add("StepFailed", py.get_type::<StepFailed>())?;
    m.add("InvalidBatch", py.get_type::<InvalidBatch>())?;
    Ok(())
}

/// The Python exception of an engine error.
pub(crate) fn to_py(py: Python<'_>, e: EngineError<PyErr>) -> PyErr {
    stopped(py, e, Vec::new())
}

/// The Python exception of an engine error of a session whose device thread had moved the
/// stamps `outbox` (ids, in order) out of the epoch's report, not yet handed to the caller.
///
/// A stopped run's exception carries what the table holds: `stamped` (batches stamped in the
/// epoch), `order` (the epoch's stamped ids not handed out by `drain_order`), `prefix` (the
/// epoch's batches the table holds, counted from its first, in `sync`/`oac`/`bounded(1)`;
/// `None` otherwise) and `applied` (the ids of `order` among them; in the other modes, those
/// whose writes all landed).
pub(crate) fn stopped(py: Python<'_>, e: EngineError<PyErr>, outbox: Vec<u64>) -> PyErr {
    let message = e.to_string();
    match e {
        EngineError::InvalidBatch { position, batch_id, kind } => {
            let err = InvalidBatch::new_err(message);
            let v = err.value(py);
            let _ = v.setattr("batch_id", batch_id);
            let _ = v.setattr("position", position);
            let _ = v.setattr("reason", kind.to_string());
            err
        }
        EngineError::Stopped { cause, stamped, order, prefix, unwritten, .. } => {
            let order: Vec<u64> = outbox.into_iter().chain(order).collect();
            let first = stamped.saturating_sub(order.len() as u64);
            let applied: Vec<u64> = order
                .iter()
                .enumerate()
                .map(|(i, &id)| (first + i as u64, id))
                .filter(|&(ts, _)| match prefix {
                    Some(p) => ts < p,
                    None => !unwritten.iter().any(|&(u, _)| u == ts),
                })
                .map(|(_, id)| id)
                .collect();
            let (batch_id, source) = match cause {
                StopCause::StepFailed { batch_id, source } => (batch_id, Some(source)),
                StopCause::StepPanicked { batch_id, .. }
                | StopCause::StageFailed { batch_id, .. }
                | StopCause::Injected { batch_id, .. } => (batch_id, None),
            };
            let err = match &source {
                Some(s) => StepFailed::new_err(format!("the step of batch {batch_id} failed: {s}")),
                None => OrdoError::new_err(message),
            };
            let v = err.value(py);
            let _ = v.setattr("batch_id", batch_id);
            let _ = v.setattr("stamped", stamped);
            let _ = v.setattr("order", order);
            let _ = v.setattr("prefix", prefix);
            let _ = v.setattr("applied", applied);
            if let Some(s) = source {
                err.set_cause(py, Some(s));
            }
            err
        }
        EngineError::WidthMismatch { .. } | EngineError::Config(_) => {
            PyValueError::new_err(message)
        }
        _ => OrdoError::new_err(message),
    }
}
