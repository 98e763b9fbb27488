//! The Python step as an [`ordo::engine::Model`]: called on the engine's device thread, in the
//! computation order, holding the interpreter lock only for the call.

use numpy::ndarray::ArrayViewMut2;
use numpy::{PyArray1, PyArray2};
use ordo::engine::{BatchRows, Model};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a batch carries through the pipeline: its id (the step's first argument) and the
/// caller's payload, opaque to the engine.
pub(crate) struct Payload {
    pub(crate) id: u64,
    pub(crate) data: Py<PyAny>,
}

/// The base object of the rows array lent to one step call. The array and every view of it
/// (numpy collapses a view's base to this object, and `torch.from_numpy` keeps the array)
/// hold a reference to it, so after the call its reference count says whether the step kept
/// the rows: the memory is the engine's and is valid only during the call.
#[pyclass(module = "ordo", frozen)]
pub(crate) struct LentRows;

/// Where the device thread's time in the Python step went, summed over the steps since the
/// last [`StepTimes::take`]: inside the callable, and the crossing around it (waiting for the
/// interpreter lock, lending the rows as numpy, checking they were not kept). Four clock reads
/// a step.
#[derive(Debug, Default)]
pub(crate) struct StepTimes {
    steps: AtomicU64,
    python_ns: AtomicU64,
    crossing_ns: AtomicU64,
    lock_wait_ns: AtomicU64,
}

/// [`StepTimes`] taken: steps, then seconds inside the callable, in the crossing, and (part of
/// the crossing) waiting for the interpreter lock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StepTimesTaken {
    pub(crate) steps: u64,
    pub(crate) python_s: f64,
    pub(crate) crossing_s: f64,
    pub(crate) lock_wait_s: f64,
}

impl StepTimes {
    fn add(&self, python: Duration, crossing: Duration, lock_wait: Duration) {
        // Relaxed: independent counters, read only by `take` after the steps they sum.
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.python_ns.fetch_add(python.as_nanos() as u64, Ordering::Relaxed);
        self.crossing_ns.fetch_add(crossing.as_nanos() as u64, Ordering::Relaxed);
        self.lock_wait_ns.fetch_add(lock_wait.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The sums so far, and reset them.
    pub(crate) fn take(&self) -> StepTimesTaken {
        let s = |a: &AtomicU64| a.swap(0, Ordering::Relaxed) as f64 * 1e-9;
        StepTimesTaken {
            steps: self.steps.swap(0, Ordering::Relaxed),
            python_s: s(&self.python_ns),
            crossing_s: s(&self.crossing_ns),
            lock_wait_s: s(&self.lock_wait_ns),
        }
    }
}

/// A Python callable `step(batch_id, ids, rows, payload)` of rows `width` floats wide.
pub(crate) struct PyStep {
    pub(crate) step: Py<PyAny>,
    pub(crate) width: usize,
    /// Set when a step fails, for a caller waiting on the session (the pipeline has halted).
    pub(crate) failed: Arc<AtomicBool>,
    /// Set by the caller to close the session now: every step not yet run fails at once
    /// (without calling Python), so the batches queued behind it are not applied and the
    /// threads join after the step in progress.
    pub(crate) cancel: Arc<AtomicBool>,
    /// The time of each call, for the session's `Report`.
    pub(crate) times: Arc<StepTimes>,
}

impl Model for PyStep {
    type Data = Payload;
    type Error = PyErr;

    fn row_width(&self) -> usize {
        self.width
    }

    fn step(&mut self, data: &Payload, rows: &mut BatchRows<'_>) -> Result<(), PyErr> {
        // Acquire: pairs with the Release of `Session::shut`; only the flag is read.
        let result = if self.cancel.load(Ordering::Acquire) {
            Err(pyo3::exceptions::PyKeyboardInterrupt::new_err("the session was closed"))
        } else {
            self.call(data, rows)
        };
        if result.is_err() {
            // Release: pairs with the Acquire of the waiting caller; only the flag is read.
            self.failed.store(true, Ordering::Release);
        }
        result
    }
}

impl PyStep {
    /// One call of the Python step on the batch's rows, lent as a numpy array.
    fn call(&self, data: &Payload, rows: &mut BatchRows<'_>) -> Result<(), PyErr> {
        let asked = Instant::now();
        let mut clock = (asked, asked, asked);
        let result = Python::attach(|py| {
            clock.0 = Instant::now();
            let ids = PyArray1::from_slice(py, rows.ids());
            let shape = (rows.len(), rows.width());
            let view = ArrayViewMut2::from_shape(shape, rows.values_mut())
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let lent = Bound::new(py, LentRows)?;
            // SAFETY: the array borrows `rows`' values, which stay allocated and unmoved for the
            // whole call below (`rows` is borrowed mutably by this function, and nothing else
            // touches it meanwhile); the array's base is `lent`. After the call, the array is
            // dropped and `lent`'s count shows whether Python kept a reference to the memory:
            // if it did, the run stops with an error naming the batch (the contract, stated in
            // the step's documentation, is that the rows are valid only during the call).
            let array = unsafe { PyArray2::borrow_from_array(&view, lent.clone().into_any()) };
            clock.1 = Instant::now();
            let result = self.step.call1(py, (data.id, ids, &array, data.data.clone_ref(py)));
            clock.2 = Instant::now();
            drop(array);
            if let Err(e) = result {
                // The traceback's frames hold the step's locals, `rows` among them: clear them
                // so no reference to the lent memory outlives the call through the error.
                if let Some(tb) = e.traceback(py) {
                    py.import("traceback")?.call_method1("clear_frames", (tb,))?;
                }
                return Err(e);
            }
            // SAFETY: `lent` is a live object (this function holds a reference to it) and the
            // interpreter lock is held, as `Py_REFCNT` requires.
            let kept = unsafe { pyo3::ffi::Py_REFCNT(lent.as_ptr()) } > 1;
            if kept {
                return Err(PyRuntimeError::new_err(format!(
                    "the step of batch {} kept a reference to its rows after returning; \
                     they are valid only during the call (copy what you keep)",
                    data.id
                )));
            }
            Ok(())
        });
        let (locked, called, returned) = clock;
        let python = returned.saturating_duration_since(called);
        self.times.add(python, asked.elapsed().saturating_sub(python), locked - asked);
        result
    }
}
