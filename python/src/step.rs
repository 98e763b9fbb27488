//! The Python step as an [`ordo::engine::Model`]: called on the engine's device thread, in the
//! computation order, holding the interpreter lock only for the call.

use crate::device::RowsAs;
use crate::lent::{Lender, LentRows};
use numpy::{PyArray1, PyArray2, PyArrayDescrMethods, PyArrayMethods, PyUntypedArrayMethods};
use ordo::engine::{BatchRows, Model};
use ordo::tables::Tables;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PySlice;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a batch carries through the pipeline: its id (the step's first argument) and the
/// caller's payload, opaque to the engine.
pub(crate) struct Payload {
    pub(crate) id: u64,
    pub(crate) data: Py<PyAny>,
}

/// Where the device thread's time in the Python step went, summed over the steps since the
/// last [`StepTimes::take`]: inside the callable, and the crossing around it (waiting for the
/// interpreter lock, lending the rows (numpy or DLPack), checking they were not kept). Four
/// clock reads a step.
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

thread_local! {
    /// The session whose step this thread is inside ([`PyStep::session`]), or 0.
    static STEPPING: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread is inside the step of session `session` ([`PyStep::session`]): a call
/// on that session from there would wait for the pipeline, which waits for this step.
pub(crate) fn inside_step_of(session: usize) -> bool {
    STEPPING.with(|s| s.get() == session)
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
    /// The named tables the rows come from, to hand the step one array per table; `None`
    /// for an engine of one table.
    pub(crate) layout: Option<Arc<Tables>>,
    /// How the step receives its rows.
    pub(crate) rows_as: RowsAs,
    /// The buffer the rows are lent from through DLPack (`rows="torch"` or `"dlpack"`).
    pub(crate) lender: Lender,
}

/// A step kept (`what`) its rows of batch `id` past its call.
fn kept_error(id: u64, what: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "the step of batch {id} kept a reference to its rows after returning{what}; \
         they are valid only during the call (copy what you keep)"
    ))
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
    /// The identity of the session running this step: the address of its `failed` flag,
    /// shared by the session and its step alone.
    pub(crate) fn session(failed: &Arc<AtomicBool>) -> usize {
        Arc::as_ptr(failed) as usize
    }

    /// One call of the Python step on the batch's rows, lent as `rows_as` says.
    fn call(&mut self, data: &Payload, rows: &mut BatchRows<'_>) -> Result<(), PyErr> {
        let asked = Instant::now();
        let mut clock = (asked, asked, asked);
        let result = Python::attach(|py| {
            clock.0 = Instant::now();
            match self.rows_as {
                RowsAs::Numpy => self.call_numpy(py, data, rows, &mut clock),
                RowsAs::Torch | RowsAs::Dlpack => self.call_lent(py, data, rows, &mut clock),
            }
        });
        let (locked, called, returned) = clock;
        let python = returned.saturating_duration_since(called);
        self.times.add(python, asked.elapsed().saturating_sub(python), locked - asked);
        result
    }

    /// Call the step on `(batch id, ids, rows, payload)`, marking this thread as inside it.
    fn invoke(
        &self,
        py: Python<'_>,
        data: &Payload,
        ids: Bound<'_, PyAny>,
        lent: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let outer = STEPPING.replace(Self::session(&self.failed));
        let result = self.step.call1(py, (data.id, ids, lent, data.data.clone_ref(py)));
        STEPPING.set(outer);
        if let Err(e) = result {
            // The traceback's frames hold the step's locals, `rows` among them: clear them,
            // so what the step raised does not keep the batch's rows alive needlessly.
            if let Some(tb) = e.traceback(py) {
                py.import("traceback")?.call_method1("clear_frames", (tb,))?;
            }
            return Err(e);
        }
        Ok(())
    }

    /// The step's `ids` and `rows` for a batch: arrays for one table, dicts for named tables,
    /// each table's rows made by `part(rows of the batch, columns)`.
    fn arguments<'py>(
        &self,
        py: Python<'py>,
        ids: &[u64],
        width: usize,
        part: impl FnMut(std::ops::Range<usize>, usize) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let mut part = part;
        match &self.layout {
            None => Ok((PyArray1::from_slice(py, ids).into_any(), part(0..ids.len(), width)?)),
            Some(layout) => crate::tables::split_for_step(py, layout, ids, part),
        }
    }

    /// The rows lent as a numpy array that owns its memory: the rows are copied into it before
    /// the call and out of it after. Whatever the step keeps (the array, a view, a memoryview, a
    /// tensor over it, an exception holding it) stays valid and never reaches the engine's
    /// buffers or the table. Keeping it is still refused, naming the batch, since later writes
    /// to it are lost: the rows are the step's only during the call.
    fn call_numpy(
        &self,
        py: Python<'_>,
        data: &Payload,
        rows: &mut BatchRows<'_>,
        clock: &mut (Instant, Instant, Instant),
    ) -> PyResult<()> {
        let (n, width) = (rows.len(), rows.width());
        let array = PyArray2::<f32>::zeros(py, [n, width], false);
        // SAFETY: `array` was just made here, contiguous, and no other reference to it exists.
        unsafe { array.as_slice_mut() }
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?
            .copy_from_slice(rows.values());
        clock.1 = Instant::now();
        let one_table = self.layout.is_none();
        let (ids, lent) = self.arguments(py, rows.ids(), width, |r, cols| {
            if one_table {
                return Ok(array.clone().into_any());
            }
            let rows = PySlice::new(py, r.start as isize, r.end as isize, 1);
            array.get_item((rows, PySlice::new(py, 0, cols as isize, 1)))
        })?;
        let result = self.invoke(py, data, ids, &lent);
        // Ours: only what the step kept still refers to the array below.
        drop(lent);
        clock.2 = Instant::now();
        result?;
        // SAFETY: `array` is a live object (held here) and the interpreter lock is held, as
        // `Py_REFCNT` requires. A view of it, a memoryview or a tensor over it holds it.
        let kept = unsafe { pyo3::ffi::Py_REFCNT(array.as_ptr()) } > 1;
        if kept {
            return Err(kept_error(data.id, ""));
        }
        // The step may have reshaped the array or viewed it as another dtype in place: its
        // values are taken back only as the float32 rows they were given as.
        let f32_type = numpy::dtype::<f32>(py);
        if !array.dtype().is_equiv_to(&f32_type) || array.len() != n * width {
            return Err(PyRuntimeError::new_err(format!(
                "the step of batch {} changed its rows' dtype or size in place; \
                 update their values, not the array",
                data.id
            )));
        }
        // SAFETY: no reference to `array` other than this one is left (checked above), so
        // nothing else reads or writes it meanwhile.
        let values = unsafe { array.as_slice() }.map_err(|_| {
            PyRuntimeError::new_err(format!(
                "the step of batch {} changed its rows' layout in place",
                data.id
            ))
        })?;
        rows.values_mut().copy_from_slice(values);
        Ok(())
    }

    /// The rows lent through DLPack (see [`crate::lent`]): as torch tensors over ordo's lent
    /// buffer, or as the buffer's `LentRows` themselves. They are taken back only once every
    /// export of them was freed (its DLPack deleter ran): a tensor, view or capsule the step
    /// kept is refused, naming the batch, and the buffer is left to it.
    fn call_lent(
        &mut self,
        py: Python<'_>,
        data: &Payload,
        rows: &mut BatchRows<'_>,
        clock: &mut (Instant, Instant, Instant),
    ) -> PyResult<()> {
        let width = rows.width();
        let buffer = self.lender.lend(rows.values());
        let from_dlpack = match self.rows_as {
            RowsAs::Torch => {
                Some(crate::device::torch(py, "rows='torch'")?.getattr("from_dlpack")?)
            }
            _ => None,
        };
        let mut loans: Vec<Bound<'_, LentRows>> = Vec::new();
        let made = self.arguments(py, rows.ids(), width, |r, cols| {
            let shape = (r.len(), cols);
            let lent =
                Bound::new(py, LentRows::new(buffer.clone(), r.start * width, shape, width))?;
            loans.push(lent.clone());
            match &from_dlpack {
                Some(f) => f.call1((lent,)),
                None => Ok(lent.into_any()),
            }
        });
        drop(buffer);
        clock.1 = Instant::now();
        let result = made.and_then(|(ids, lent)| self.invoke(py, data, ids, &lent));
        clock.2 = Instant::now();
        // Ours (the tensors and dicts are gone with `made`): what the step kept still holds a
        // loan, an export, or both.
        let mut kept_loan = false;
        for lent in loans {
            lent.get().revoke();
            // SAFETY: `lent` is a live object held here, under the interpreter lock.
            kept_loan |= unsafe { pyo3::ffi::Py_REFCNT(lent.as_ptr()) } > 1;
        }
        result?;
        if kept_loan {
            return Err(kept_error(data.id, " (the object lent for the call)"));
        }
        self.lender.take_back(rows.values_mut()).map_err(|_| {
            kept_error(
                data.id,
                " (a tensor, a view or a DLPack capsule of them: its DLPack deleter had not run)",
            )
        })
    }
}
