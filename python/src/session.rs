//! `ordo.Engine` and the owned session Python holds across calls (`ordo.Session`).
//!
//! The caller's thread releases the interpreter lock whenever it waits for the pipeline
//! (back-pressure in `submit`, the end of an epoch in `finish`), and checks for signals every
//! [`SIGNAL_POLL`] meanwhile, so Ctrl-C stops a run promptly: the session is then closed (its
//! threads joined, every stamped batch written) and `KeyboardInterrupt` propagates.
//!
//! A session takes one call at a time: a call made while another thread's call on it is in
//! progress, or from inside its own step, raises `ordo.SessionBusy` at once and changes
//! nothing. It does not wait for the other call: a step's call would then wait for a pipeline
//! that waits for that step.

use crate::device::{Device, RowsAs};
use crate::errors::{OrdoError, SessionBusy, closed, stopped, to_py};
use crate::lent::Lender;
use crate::step::{Payload, PyStep, StepTimes, StepTimesTaken};
use crate::table::{Table, TableHeld};
use crate::tables::EngineTables;
use numpy::PyArray1;
use ordo::engine::{
    AsyncWrite, Batch, CpuDevice, Engine as Core, EngineConfig, Mode, OwnedSession, RunReport,
    TrySubmitError,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// How often a waiting call takes the interpreter lock back to check for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);
/// How long `finish` first sleeps between two looks at the written batches, and the longest:
/// see [`Backoff`] (`submit` sleeps in the session's channel instead).
const BACKOFF: Duration = Duration::from_micros(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1);

/// The sleeps of `finish` waiting for the epoch's last writes: the first is [`BACKOFF`], and
/// each next one doubles, up to [`BACKOFF_MAX`]. A caller waiting on millisecond steps then wakes about a
/// thousand times a second instead of fifty thousand; each wake takes a core from the step,
/// which on a 2-core machine made the same PyTorch step 1.5x slower on the device thread. One
/// waiting on tiny steps still looks again after 20 µs.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Backoff(BACKOFF)
    }

    fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }
}

pub(crate) fn parse_mode(mode: &str, bound: Option<usize>) -> PyResult<Mode> {
    Ok(match (mode, bound) {
        ("sync", None) => Mode::Sync,
        ("oac", None) => Mode::Oac,
        ("async", None) => Mode::Async(AsyncWrite::Overwrite),
        ("async-add", None) => Mode::Async(AsyncWrite::AddDelta),
        ("bounded", Some(k)) if k >= 1 => Mode::Bounded(k),
        ("bounded", _) => return Err(PyValueError::new_err("mode 'bounded' needs bound=k >= 1")),
        (m, Some(_)) if matches!(m, "sync" | "oac" | "async" | "async-add") => {
            return Err(PyValueError::new_err(format!(
                "bound= is only for mode 'bounded', not {m:?}"
            )));
        }
        (m, _) => {
            return Err(PyValueError::new_err(format!(
                "unknown mode {m:?}: one of 'sync', 'async', 'async-add', 'bounded', 'oac'"
            )));
        }
    })
}

/// The engine over one table, or over several named ones: its mode and threads.
#[pyclass(module = "ordo", frozen)]
pub struct Engine {
    core: Core,
    tables: EngineTables,
    mode: String,
    device: Device,
    rows_as: RowsAs,
}

#[pymethods]
impl Engine {
    /// `device`: `"cpu"` (the default), `"cuda"` or `"cuda:N"`, checked here, before anything
    /// runs (see `device.rs`); `rows`: how the step receives its rows (`"numpy"`, `"torch"`,
    /// `"dlpack"`; by default numpy on the CPU, torch on CUDA); `batch_rows`: the most rows a
    /// batch has, which CUDA needs to size and check its device buffers.
    #[new]
    #[pyo3(signature = (table, mode = "oac", *, bound = None, readers = 2, writers = 2, depth = 4, device = "cpu", rows = None, batch_rows = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        table: &Bound<'_, PyAny>,
        mode: &str,
        bound: Option<usize>,
        readers: usize,
        writers: usize,
        depth: usize,
        device: &str,
        rows: Option<&str>,
        batch_rows: Option<usize>,
    ) -> PyResult<Self> {
        let device = Device::parse(device)?;
        let tables = EngineTables::from_py(table)?;
        let parsed = parse_mode(mode, bound)?;
        let rows_as = RowsAs::choose(py, rows, device)?;
        let config = EngineConfig::new(parsed).threads(readers, writers).depths(depth, depth);
        let core = Core::new(config).map_err(|e| PyValueError::new_err(e.to_string()))?;
        crate::device::check(py, device, batch_rows, parsed, depth, tables.width())?;
        let mode = match bound {
            Some(k) => format!("bounded({k})"),
            None => mode.to_string(),
        };
        Ok(Engine { core, tables, mode, device, rows_as })
    }

    /// The device, as `"cpu"` or `"cuda:N"`.
    #[getter]
    fn device(&self) -> String {
        self.device.name()
    }

    /// How the step receives its rows: `"numpy"`, `"torch"` or `"dlpack"`.
    #[getter]
    fn rows(&self) -> &'static str {
        match self.rows_as {
            RowsAs::Numpy => "numpy",
            RowsAs::Torch => "torch",
            RowsAs::Dlpack => "dlpack",
        }
    }

    /// The mode, as given.
    #[getter]
    fn mode(&self) -> &str {
        &self.mode
    }

    /// The engine's table (an engine of several tables raises `OrdoError`: see `tables`).
    #[getter]
    fn table(&self, py: Python<'_>) -> PyResult<Py<Table>> {
        self.tables.one(py)
    }

    /// The engine's named tables as a dict, in their order; `None` for an engine of one table.
    #[getter]
    fn tables<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        self.tables.named(py)
    }

    /// Start a session running `step` on the engine's device thread.
    fn session(&self, py: Python<'_>, step: Py<PyAny>) -> PyResult<PySession> {
        let held = self.tables.take("starting another")?;
        let failed = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(AtomicBool::new(false));
        let times = Arc::new(StepTimes::default());
        let model = PyStep {
            step,
            width: self.tables.width(),
            failed: failed.clone(),
            cancel: cancel.clone(),
            times: times.clone(),
            layout: self.tables.layout(),
            rows_as: self.rows_as,
            lender: Lender::default(),
        };
        let core = self.core.clone();
        let inner = match &self.tables {
            EngineTables::One(t) => {
                let store = t.get().store.clone();
                py.detach(move || core.start(CpuDevice::new(), model, store))
            }
            EngineTables::Named { storage, .. } => {
                let store = storage.clone();
                py.detach(move || core.start(CpuDevice::new(), model, store))
            }
        }
        .map_err(|e| to_py(py, e))?;
        let state = SessionState {
            inner: Some((inner, held)),
            tables: self.tables.layout(),
            process: std::process::id(),
            failed,
            cancel,
            times,
            next_id: 0,
            submitted: 0,
            written: 0,
        };
        let id = PyStep::session(&state.failed);
        Ok(PySession { state: Mutex::new(state), id })
    }

    /// Replay `order` sequentially onto the engine's table (see `ordo.replay`).
    fn replay(
        &self,
        py: Python<'_>,
        order: Vec<u64>,
        batch_of: &Bound<'_, PyAny>,
        step: Py<PyAny>,
    ) -> PyResult<()> {
        crate::replay::replay_on(py, &self.tables, self.rows_as, order, batch_of, step)
    }

    fn __repr__(&self) -> String {
        match self.device {
            Device::Cpu => format!("Engine({}, mode='{}')", self.tables.describe(), self.mode),
            d => format!(
                "Engine({}, mode='{}', device='{}')",
                self.tables.describe(),
                self.mode,
                d.name()
            ),
        }
    }
}

/// What `finish` returns: the epoch's computation order (the stamps not drained) and its
/// telemetry.
#[pyclass(module = "ordo", frozen, get_all)]
pub struct Report {
    /// Batch ids in computation order (`uint64`), after those handed out by `drain_order`.
    order: Py<PyArray1<u64>>,
    /// Wall seconds of the epoch's pipeline.
    elapsed: f64,
    /// Rows validated against the validation cache (`oac`).
    rows_validated: u64,
    /// Rows the validation replaced with a newer version (`oac`).
    rows_replaced: u64,
    /// The validation cache's largest size, in rows.
    cache_peak: usize,
    /// Steps run since the last report.
    steps: u64,
    /// Seconds the device thread spent inside the Python step (the callable itself).
    step_s: f64,
    /// Seconds the device thread spent crossing into and out of Python around the steps:
    /// waiting for the interpreter lock, lending the rows (numpy or DLPack), checking they were
    /// not kept.
    crossing_s: f64,
    /// The part of `crossing_s` spent waiting for the interpreter lock (held meanwhile by
    /// another Python thread, e.g. the one building and submitting batches).
    lock_wait_s: f64,
}

impl Report {
    fn new(py: Python<'_>, r: RunReport, t: StepTimesTaken) -> Self {
        Report {
            order: PyArray1::from_vec(py, r.batch_ids()).unbind(),
            elapsed: r.elapsed.as_secs_f64(),
            rows_validated: r.rows_validated,
            rows_replaced: r.rows_replaced,
            cache_peak: r.cache_peak,
            steps: t.steps,
            step_s: t.python_s,
            crossing_s: t.crossing_s,
            lock_wait_s: t.lock_wait_s,
        }
    }
}

/// A running session. Each method waits with the interpreter lock released.
///
/// Its state is behind a mutex that a call takes with `try_lock`: a second thread's call, made
/// while the first waits without the interpreter lock, is refused (`SessionBusy`), not queued.
#[pyclass(module = "ordo", name = "Session", frozen)]
pub struct PySession {
    state: Mutex<SessionState>,
    /// Its identity ([`PyStep::session`]), to refuse a call from inside its own step.
    id: usize,
}

/// What a session holds, one call at a time.
struct SessionState {
    /// The running session, and its tables taken for it (given back once it is closed).
    inner: Option<(OwnedSession<PyStep>, Vec<TableHeld>)>,
    /// The engine's named tables, to map a batch's `{name: ids}`; `None` for one table.
    tables: Option<Arc<ordo::tables::Tables>>,
    /// The process that started it: in a forked child its threads do not exist.
    process: u32,
    /// Set by the step when it fails: the pipeline has halted and `finish` returns why.
    failed: Arc<AtomicBool>,
    /// Tells the step to run no more batches (see `PyStep::cancel`).
    cancel: Arc<AtomicBool>,
    /// The steps' times, taken by each `finish`.
    times: Arc<StepTimes>,
    /// The id the next `submit` without one gets.
    next_id: u64,
    /// Batches submitted this epoch and batches written (the completions taken so far).
    submitted: u64,
    written: u64,
}

/// What one wait without the interpreter lock ended with.
enum Wait {
    Done,
    Again(Batch<Payload>),
}

impl PySession {
    /// The state for one call, or `SessionBusy` while another call holds it.
    fn state(&self) -> PyResult<MutexGuard<'_, SessionState>> {
        if crate::step::inside_step_of(self.id) {
            return Err(SessionBusy::new_err(
                "called from inside the session's own step, which the pipeline waits for: \
                 a step cannot submit to, finish, drain or close its session; nothing changed",
            ));
        }
        match self.state.try_lock() {
            Ok(s) => Ok(s),
            // A call that panicked left the state as a call may leave it: usable.
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(SessionBusy::new_err(
                "another thread's call on this session is in progress: a session takes one \
                 call at a time (share it between threads behind a lock); nothing changed",
            )),
        }
    }
}

impl SessionState {
    fn open(&mut self) -> PyResult<&mut OwnedSession<PyStep>> {
        self.forked()?;
        self.inner.as_mut().map(|(s, _)| s).ok_or_else(closed)
    }

    /// Refuse a call from a forked child: the session's threads live in its parent, and a call
    /// would wait for them forever.
    fn forked(&self) -> PyResult<()> {
        if std::process::id() == self.process {
            return Ok(());
        }
        Err(OrdoError::new_err(format!(
            "the session belongs to another process ({}), this one a fork of it: start a session here",
            self.process
        )))
    }

    /// Close: join every thread without the lock (in a forked child, which has none of them,
    /// only forget them), then give the table back.
    fn join(&mut self, py: Python<'_>) {
        if let Some((s, held)) = self.inner.take() {
            if std::process::id() == self.process {
                py.detach(move || drop(s));
            } else {
                std::mem::forget(s);
            }
            drop(held);
        }
    }

    /// Close after a failure or an interrupt: join every thread without the lock.
    fn shut(&mut self, py: Python<'_>) {
        // Release: pairs with the Acquire of the step; only the flag is read.
        self.cancel.store(true, Ordering::Release);
        self.join(py);
    }

    /// The failure that halted the pipeline, from `finish`.
    fn failure(&mut self, py: Python<'_>) -> PyErr {
        let Some((s, _)) = self.inner.as_mut() else {
            return closed();
        };
        let err = match py.detach(|| s.finish()) {
            Err(e) => stopped(py, e, s.drain_order().iter().map(|st| st.batch_id).collect()),
            Ok(_) => OrdoError::new_err("the session halted without a failure"),
        };
        self.shut(py);
        err
    }
}

impl SessionState {
    /// Feed one batch: `ids` (unique row ids, in the order the step sees its rows; see
    /// `ordo.unique_rows`) and an opaque `payload` handed to the step. Blocks while the
    /// pipeline is full, without the lock.
    /// Returns the batch's id (`batch_id`, or the next of a counter from 0). With `inline`, the
    /// session's device thread reads, steps and writes the batch itself once every batch
    /// before it is written (`OwnedSession::submit_inline`): the reader and writer threads sit
    /// it out, which saves their CPU where every core is busy with other work.
    fn submit(
        &mut self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        payload: Option<Py<PyAny>>,
        batch_id: Option<u64>,
        inline: bool,
    ) -> PyResult<u64> {
        let id = batch_id.unwrap_or(self.next_id);
        let rows = crate::tables::batch_ids(self.tables.as_deref(), id, ids)?;
        let data = Payload { id, data: payload.unwrap_or_else(|| py.None()) };
        let mut batch = Batch { id, rows, data };
        loop {
            let s = self.open()?;
            let (waited, written) = py.detach(|| {
                // Sleeps in the session's channel until there is room, for at most one signal
                // poll: no wake-ups while the pipeline is full.
                let tried = if inline {
                    s.submit_inline_timeout(batch, SIGNAL_POLL)
                } else {
                    s.submit_timeout(batch, SIGNAL_POLL)
                };
                let written = s.completions().len() as u64;
                match tried {
                    Ok(()) => (Ok(Wait::Done), written),
                    Err(TrySubmitError::Full(back)) => (Ok(Wait::Again(back)), written),
                    Err(TrySubmitError::Failed(e)) => (Err(e), written),
                }
            });
            self.written += written;
            match waited {
                Ok(Wait::Done) => break,
                Ok(Wait::Again(back)) => {
                    if let Err(e) = py.check_signals() {
                        self.shut(py);
                        return Err(e);
                    }
                    batch = back;
                }
                Err(ordo::engine::EngineError::Halted) => return Err(self.failure(py)),
                Err(e) => return Err(to_py(py, e)),
            }
        }
        self.submitted += 1;
        self.next_id = id.wrapping_add(1);
        Ok(id)
    }

    /// End the epoch: wait (without the lock) until every batch submitted is written, and
    /// return its `Report`. The session goes on for the next epoch.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Report> {
        loop {
            let (submitted, written) = (self.submitted, self.written);
            let failed = self.failed.clone();
            let s = self.open()?;
            let (written, halted) = py.detach(|| {
                let until = Instant::now() + SIGNAL_POLL;
                let mut w = written;
                let mut backoff = Backoff::new();
                while w < submitted && Instant::now() < until {
                    w += s.completions().len() as u64;
                    if w < submitted {
                        backoff.sleep();
                    }
                }
                // Acquire: pairs with the Release of the failing step; only the flag is read.
                (w, failed.load(Ordering::Acquire))
            });
            self.written = written;
            if written >= submitted || halted {
                break;
            }
            if let Err(e) = py.check_signals() {
                self.shut(py);
                return Err(e);
            }
        }
        let s = self.open()?;
        let report = py.detach(|| s.finish()).map_err(|e| {
            let outbox = s.drain_order().iter().map(|st| st.batch_id).collect();
            stopped(py, e, outbox)
        });
        self.submitted = 0;
        self.written = 0;
        match report {
            Ok(r) => Ok(Report::new(py, r, self.times.take())),
            Err(err) => {
                self.shut(py);
                Err(err)
            }
        }
    }
}

/// Each method takes the session's state for the call (`SessionBusy` while another call has
/// it), then waits with the interpreter lock released.
#[pymethods]
impl PySession {
    /// Feed one batch: `ids` (unique row ids, in the order the step sees its rows; see
    /// `ordo.unique_rows`) and an opaque `payload` handed to the step; see
    /// [`SessionState::submit`].
    #[pyo3(signature = (ids, payload = None, batch_id = None, *, inline = false))]
    fn submit(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        payload: Option<Py<PyAny>>,
        batch_id: Option<u64>,
        inline: bool,
    ) -> PyResult<u64> {
        self.state()?.submit(py, ids, payload, batch_id, inline)
    }

    /// End the epoch: wait (without the lock) until every batch submitted is written, and
    /// return its `Report`. The session goes on for the next epoch.
    fn finish(&self, py: Python<'_>) -> PyResult<Report> {
        self.state()?.finish(py)
    }

    /// Batch ids stamped since the last call, in computation order (`uint64`). Draining as
    /// the run goes keeps a long run's memory flat; `finish` reports only what is left.
    fn drain_order<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let mut state = self.state()?;
        let ids: Vec<u64> = state.open()?.drain_order().iter().map(|st| st.batch_id).collect();
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Records the session holds for the caller (stamps not drained and completions not
    /// taken): flat for a caller that drains the order.
    #[getter]
    fn retained(&self) -> PyResult<usize> {
        Ok(self.state()?.open()?.retained())
    }

    /// Whether the session is closed (`SessionBusy` while another thread's call is in
    /// progress: it may be closing it).
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.state()?.inner.is_none())
    }

    /// Stop the session and join its threads: batches stamped are written, the others not
    /// applied. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.state()?.shut(py);
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving the `with` block finishes the epoch (unless an exception is on its way) and
    /// closes the session.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let mut state = self.state()?;
        let result = if exc_type.is_none() && state.inner.is_some() {
            state.finish(py).map(drop)
        } else {
            Ok(())
        };
        state.shut(py);
        result.map(|()| false)
    }
}

/// A session dropped by the garbage collector is closed like `close()`: the lock is released
/// while its threads are joined (the device thread may need it for a step in flight).
impl Drop for PySession {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // Release: as in `shut`.
        state.cancel.store(true, Ordering::Release);
        if state.inner.is_some() {
            Python::attach(|py| state.join(py));
        }
    }
}
