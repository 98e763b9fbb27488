//! The engine's typed errors as Python exceptions: `ordo.OrdoError` and its subclasses
//! `ordo.StepFailed` (chained to the step's own exception), `ordo.InvalidBatch`,
//! `ordo.SessionClosed` and `ordo.SessionBusy`. Their module is `ordo` (where the package exports them), so they print
//! and pickle as `ordo.InvalidBatch`, not as the extension's `ordo._ordo`.

use ordo::engine::{EngineError, StopCause};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

create_exception!(
    ordo,
    OrdoError,
    PyException,
    "Any error of the ordo engine.

A stopped run's error (this class or `StepFailed`) carries what the table holds, as attributes:

* `batch_id`: the batch whose step (or stage) failed.
* `stamped`: batches stamped in the epoch (given their place in the computation order).
* `drained`: how many of them, the first ones, `Session.drain_order` had handed out.
* `order`: the ids of the rest (`stamped - drained` ids), in computation order.
* `prefix`: in `sync`, `oac` and `bounded(1)`, how many batches of `order` the table holds:
  it equals `replay`, from the epoch's initial table, of the drained ids followed by
  `order[:prefix]` (the Rust error's `order[..prefix]`). `None` in the other modes.
* `epoch_prefix`: the same count from the epoch's first batch, drained ones included
  (`prefix == max(0, epoch_prefix - drained)`; below `drained` only if a drained batch's writes
  failed, which a `Table` does not do).
* `applied`: the ids of `order` the table holds: `order[:prefix]`, or in the other modes those
  whose writes all landed."
);
create_exception!(
    ordo,
    StepFailed,
    OrdoError,
    "The run stopped: the step of batch `batch_id` failed (its exception is `__cause__`).

Its attributes say what the table holds (see `OrdoError`): `replay` of the ids drained before
the failure followed by `order[:prefix]` (those are `applied`) equals the table."
);
create_exception!(
    ordo,
    InvalidBatch,
    OrdoError,
    "A malformed batch (empty, duplicated or out-of-range row id), refused before it entered the
pipeline; nothing changed and the session goes on. Attributes: `batch_id`, `position` (its
place in the epoch) and `reason`."
);
create_exception!(
    ordo,
    SessionClosed,
    OrdoError,
    "The session was closed (by `close()`, leaving its `with` block, Ctrl-C, or the error that
stopped its run, raised once): it takes no more calls. Start another with `Engine.session`."
);

create_exception!(
    ordo,
    SessionBusy,
    OrdoError,
    "A call on a session while another call on it is in progress (from another thread), or from
inside its own step: a session takes one call at a time, and this one was refused at once, not
queued. Nothing changed and the session goes on; share a session between threads behind a
lock."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("OrdoError", py.get_type::<OrdoError>())?;
    m.add("StepFailed", py.get_type::<StepFailed>())?;
    m.add("InvalidBatch", py.get_type::<InvalidBatch>())?;
    m.add("SessionClosed", py.get_type::<SessionClosed>())?;
    m.add("SessionBusy", py.get_type::<SessionBusy>())?;
    Ok(())
}

/// The error of a call on a closed session.
pub(crate) fn closed() -> PyErr {
    SessionClosed::new_err("the session is closed")
}

/// The Python exception of an engine error.
pub(crate) fn to_py(py: Python<'_>, e: EngineError<PyErr>) -> PyErr {
    stopped(py, e, Vec::new())
}

/// The Python exception of an engine error of a session whose device thread had moved the
/// stamps `outbox` (ids, in order) out of the epoch's report, not yet handed to the caller.
///
/// A stopped run's exception carries what the table holds (see `OrdoError`'s docstring):
/// `stamped`, `drained` (the first stamped ids handed out by `drain_order`), `order` (the
/// rest), `prefix` (how many of `order` the table holds, so that `order[:prefix]` means what the
/// Rust error's `order[..prefix]` does), `epoch_prefix` (counted from the epoch's first batch)
/// and `applied` (the ids of `order` the table holds).
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
            // The engine counts its prefix from the epoch's first batch; the exception's `order`
            // starts after the `first` drained ones.
            let in_order = prefix.map(|p| p.saturating_sub(first));
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
            let _ = v.setattr("drained", first);
            let _ = v.setattr("order", order);
            let _ = v.setattr("prefix", in_order);
            let _ = v.setattr("epoch_prefix", prefix);
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
