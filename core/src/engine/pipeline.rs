//! The threaded engine: parallel readers, the device on the caller's thread, parallel writers,
//! bounded queues, all inside one `thread::scope` so no thread outlives [`Engine::session`].

use crate::engine::config::EngineConfig;
use crate::engine::context::RunCtx;
use crate::engine::cpu_device::CpuDevice;
use crate::engine::device_queue::{DeviceQueue, start};
use crate::engine::error::EngineError;
use crate::engine::mode::Mode;
use crate::engine::model::{Batch, Model};
use crate::engine::prepare;
use crate::engine::record::RunReport;
use crate::engine::session::Session;
use crate::engine::stage_loops::{DeviceLoop, spawn_stages};
use crate::engine::stop::StopState;
use crate::storage::RowStorage;
use crate::sync::host::thread;

/// The OAC pipeline engine. Build once; [`run`](Engine::run) one epoch from a batch iterator,
/// or stream epochs through a [`session`](Engine::session).
///
/// A bad configuration is a typed error, and so is a bad batch (before anything runs):
///
/// ```
/// use ordo::engine::{Batch, BatchError, Engine, EngineConfig, EngineError, Mode};
/// # use ordo::engine::{BatchRows, Model, StepError};
/// # /// Pull every row of the batch towards the batch's target; a dense bias counts the steps.
/// # struct Pull { bias: f32 }
/// # impl Model for Pull {
/// #     type Data = f32;
/// #     type Error = StepError;
/// #     fn row_width(&self) -> usize { 1 }
/// #     fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
/// #         rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v) + self.bias);
/// #         self.bias += 0.01;
/// #         Ok(())
/// #     }
/// #     fn dense(&self) -> Vec<f32> { vec![self.bias] }
/// # }
/// use ordo::row_store::RowStore;
/// assert!(Engine::new(EngineConfig::new(Mode::Oac).threads(0, 1)).is_err());
///
/// let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2))?;
/// let store = RowStore::zeros(4, 1);
/// let bad = vec![Batch { id: 7, rows: vec![2, 1, 2], data: 1.0 }];
/// let err = engine.run(&mut Pull { bias: 0.0 }, &store, bad).unwrap_err();
/// assert!(matches!(err, EngineError::InvalidBatch { batch_id: 7, kind: BatchError::Duplicate { row: 2 }, .. }));
/// assert_eq!(store.snapshot(), vec![0.0; 4], "nothing ran");
///
/// let good = (0..10).map(|i| Batch { id: i, rows: vec![i % 4], data: 1.0 });
/// let report = engine.run(&mut Pull { bias: 0.0 }, &store, good)?;
/// assert_eq!(report.order.len(), 10);
/// # Ok::<(), EngineError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    config: EngineConfig,
}

impl Engine {
    /// An engine with `config` (checked).
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(Engine { config })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Train `model` on `batches` against `store`, on the CPU device: one epoch through a
    /// [`Session`] (see [`session`](Engine::session) to stream batches instead).
    ///
    /// Every batch is checked before anything runs (an error leaves the store untouched). On
    /// success the report holds the computation order; in `Oac`, `Sync` and `Bounded(1)` the
    /// store and `model.dense()` then equal [`replay`](crate::engine::replay) of that order.
    pub fn run<M: Model, S: RowStorage + ?Sized>(
        &self,
        model: &mut M,
        store: &S,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<RunReport, EngineError<M::Error>> {
        let batches = prepare(model, store, batches)?;
        self.session(&mut CpuDevice::new(), model, store, |session| {
            // Every batch was checked above, so a submit fails only once the pipeline stopped,
            // and `finish` then returns why.
            let _ = session.submit_all(batches);
            session.finish()
        })
    }

    /// Start the pipeline once and run `f` with a [`Session`] on it: `f` streams batches in with
    /// [`Session::submit`] (blocking on back-pressure) or [`Session::try_submit`], takes
    /// per-batch [`Session::completions`] and the order as it is stamped
    /// ([`Session::drain_order`]), and ends each epoch with [`Session::finish`]. The reader and
    /// writer threads live until `f` returns; the device stage runs on this thread, inside the
    /// session's calls. Returns what `f` returns; a failure to start the session (a width
    /// mismatch, a failed device reset) comes back as `f`'s error type, so one `?` handles both.
    /// To hold a session across calls instead (an event loop, a binding), see
    /// [`Engine::start`].
    ///
    /// Batches of an epoch not finished when `f` returns: those already stamped are written,
    /// the others are not applied ([`Session::close`] does this and reports the stamped part).
    ///
    /// ```
    /// use ordo::engine::{Batch, CpuDevice, Engine, EngineConfig, Mode};
    /// use ordo::row_store::RowStore;
    /// # use ordo::engine::{BatchRows, Model, StepError};
    /// # struct Nudge;
    /// # impl Model for Nudge {
    /// #     type Data = f32;
    /// #     type Error = StepError;
    /// #     fn row_width(&self) -> usize { 1 }
    /// #     fn step(&mut self, d: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
    /// #         rows.values_mut().iter_mut().for_each(|v| *v = 0.5 * *v + d);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let store = RowStore::zeros(8, 1);
    /// let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    /// let mut model = Nudge;
    /// let reports = engine.session(&mut CpuDevice::new(), &mut model, &store, |s| {
    ///     (0..3u64)
    ///         .map(|epoch| {
    ///             // Any iterator: nothing is collected, queues are bounded.
    ///             s.submit_all((0..20).map(|i| Batch { id: epoch * 100 + i, rows: vec![i % 8], data: 1.0 }))?;
    ///             s.finish()
    ///         })
    ///         .collect::<Result<Vec<_>, _>>()
    /// })?;
    /// assert_eq!(reports.len(), 3);
    /// assert!(reports.iter().all(|r| r.order.len() == 20));
    /// # Ok::<(), ordo::engine::EngineError>(())
    /// ```
    pub fn session<M, S, D, R, E>(
        &self,
        device: &mut D,
        model: &mut M,
        store: &S,
        f: impl FnOnce(&mut Session<'_, M, S>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        M: Model,
        S: RowStorage + ?Sized,
        D: DeviceQueue<M>,
        E: From<EngineError<M::Error>>,
    {
        if model.row_width() != store.width() {
            return Err(EngineError::WidthMismatch {
                model: model.row_width(),
                store: store.width(),
            }
            .into());
        }
        let cx = RunCtx::new(store, &self.config)?;
        start(device)?;
        let stop = StopState::default();
        let hook = self.config.hook.as_ref();
        let observer = self.config.observer.as_ref().map(|o| &*o.0);
        if self.config.mode == Mode::Sync {
            let dev = DeviceLoop::new(&cx, &stop, hook, observer, device, model, None);
            let mut session = Session::new(dev);
            let out = f(&mut session);
            session.shut_down();
            out
        } else {
            thread::scope(|scope| {
                let lanes = spawn_stages(scope, &self.config, &cx, &stop);
                let dev = DeviceLoop::new(&cx, &stop, hook, observer, device, model, Some(lanes));
                let mut session = Session::new(dev);
                let out = f(&mut session);
                session.shut_down();
                out
            })
        }
    }
}
