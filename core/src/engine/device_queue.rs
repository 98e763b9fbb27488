//! A device with batches in flight: the engine submits a stamped batch now and collects its
//! stepped rows later, so a device with its own streams (a GPU's copy and compute streams)
//! overlaps the transfers of one batch with the compute of another.
//!
//! [`DeviceQueue`] is what such a device supplies; a synchronous [`DeviceStage`] (the
//! [`CpuDevice`](super::CpuDevice), or `ordo-gpu`'s `CudaDevice`) runs through it one batch at a
//! time ([`OneInFlight`]). The engine's driver is the same either way: it stamps a batch when it
//! submits it, collects the oldest batch in flight before it submits another once
//! [`depth`](DeviceQueue::depth) are in flight or the MFT window is full, and hands collected
//! batches to the writers in stamp order.
//!
//! **Why the order is still the computation order.** A queue computes its batches in submission
//! order: batch `ts` is evicted, validated, stepped and inserted into the validation cache after
//! every earlier batch was inserted. So it validates against the stepped rows of every earlier
//! batch, in flight or not, exactly as the one-at-a-time device does. The STE handed with a
//! submission is computed when it is submitted; every batch in flight is still registered (its
//! registration is dropped only once it is written), so that STE never passes a batch in flight,
//! and evicting with it later on the device is safe (an STE only grows).

#[cfg(feature = "testing")]
use super::validation_cache::ValidationCache;
use super::{
    BatchRows, DeviceError, DeviceStage, EngineError, Model, RowBlock, Staleness, StepError,
};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// One stamped batch handed to a [`DeviceQueue`].
#[derive(Debug)]
pub struct Submission<'a, D> {
    /// The batch's run-local stamp (the engine's `ts`, `0, 1, 2, …` across a session).
    pub ts: u64,
    /// The batch's id.
    pub batch_id: u64,
    /// Evict cached rows with `ts < ste` before validating (meaningful when `validate`).
    pub ste: u64,
    /// Validate the rows against the cache (`Oac`).
    pub validate: bool,
    /// Insert the stepped rows into the cache at `ts` (`Oac`).
    pub insert: bool,
    /// The ts each row was read at (`None`: a value from before the run).
    pub read: &'a [Option<u64>],
    /// The batch's payload for the step.
    pub data: &'a D,
}

/// Why a [`DeviceQueue`] refused a batch (it is then not stamped, and nothing of it is written).
/// `E` is the model's step error ([`Model::Error`]).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError<E = StepError> {
    /// The device failed (eviction, validation, transfer, or queueing).
    #[error("device failed")]
    Device(#[source] DeviceError),
    /// The model step returned an error.
    #[error("model step failed")]
    Step(#[source] E),
    /// The model step panicked (a queue that runs the host model's step catches the panic and
    /// reports its message here).
    #[error("model step panicked: {0}")]
    StepPanicked(String),
}

/// A device that holds up to [`depth`](DeviceQueue::depth) batches in flight.
///
/// The engine calls it from one thread: [`reset`](DeviceQueue::reset) when a session starts;
/// then, per batch, [`submit`](DeviceQueue::submit) in stamp order and, later,
/// [`collect`](DeviceQueue::collect) in the same order (never more than `depth` submitted and
/// not collected), and right after each collect [`collected`](DeviceQueue::collected) with the
/// batch's stepped rows when its submission asked for an insert.
///
/// **What a queue must keep:** it computes its batches in submission order, and by the time it
/// validates batch `ts` it has inserted the stepped rows of every batch before it (a queue with
/// `depth() > 1` must insert when it computes a batch, not in `collected`). With that, the
/// engine's claim holds at any depth: in `Oac` the store equals the replay of the recorded order.
///
/// **Errors.** A failed `submit` stops the pipeline before the batch is stamped. A failed
/// `collect` stops it with that batch and every later one in flight stamped but not written
/// (the error's [`unwritten`](super::EngineError::Stopped) list names them); the batches before
/// it are written. A failed `collected` stops it after the batch is written.
pub trait DeviceQueue<M: Model> {
    /// Forget the cache and anything in flight (called when a session starts).
    fn reset(&mut self) -> Result<(), DeviceError>;

    /// Batches it holds in flight at most (at least 1).
    fn depth(&self) -> usize;

    /// Take the batch `job` with its rows as read (`rows`, which the engine keeps unchanged
    /// until the batch is collected): evict below `job.ste` and validate (if `job.validate`),
    /// run the step, insert at `job.ts` (if `job.insert`), now or on the device in order.
    fn submit(
        &mut self,
        model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>>;

    /// Wait for the oldest batch in flight and leave its stepped values in `rows` (the rows it
    /// was submitted with); returns what its validation measured.
    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError>;

    /// The collected batch stamped `ts`, as the writers will write it (called only when its
    /// submission asked for an insert). A device whose cache lives on the host inserts here;
    /// one that inserted on the device does nothing (the default).
    fn collected(&mut self, ts: u64, block: &Arc<RowBlock>) -> Result<(), DeviceError> {
        let _ = (ts, block);
        Ok(())
    }

    /// Rows in the cache now.
    fn cache_len(&self) -> usize;
}

/// Make `device` ready for a session: it must hold at least one batch, and its cache and
/// anything in flight are forgotten ([`DeviceQueue::reset`]).
pub(crate) fn start<M: Model, Q: DeviceQueue<M> + ?Sized>(
    device: &mut Q,
) -> Result<(), EngineError<M::Error>> {
    if device.depth() == 0 {
        return Err(EngineError::Config("a device queue holds at least one batch"));
    }
    device.reset().map_err(EngineError::DeviceReset)
}

/// Run a model step, its error or panic as a [`SubmitError`].
fn caught<E>(step: impl FnOnce() -> Result<(), E>) -> Result<(), SubmitError<E>> {
    match catch_unwind(AssertUnwindSafe(step)) {
        Ok(r) => r.map_err(SubmitError::Step),
        Err(payload) => Err(SubmitError::StepPanicked(super::device::panic_message(&*payload))),
    }
}

/// A [`DeviceStage`] as a [`DeviceQueue`] of depth 1: `submit` evicts, validates and steps;
/// `collected` inserts (before the next submit, since one batch is in flight at most).
#[derive(Debug)]
pub struct OneInFlight<D> {
    device: D,
    staleness: Option<Staleness>,
}

impl<D> OneInFlight<D> {
    /// `device`, one batch at a time.
    pub fn new(device: D) -> Self {
        OneInFlight { device, staleness: None }
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device back.
    pub fn into_inner(self) -> D {
        self.device
    }
}

impl<M: Model, D: DeviceStage<M>> DeviceQueue<M> for OneInFlight<D> {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.staleness = None;
        self.device.reset()
    }

    fn depth(&self) -> usize {
        1
    }

    fn submit(
        &mut self,
        model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>> {
        let mut staleness = Staleness::default();
        if job.validate {
            self.device.evict_before(job.ste).map_err(SubmitError::Device)?;
            staleness = self.device.validate(job.read, rows).map_err(SubmitError::Device)?;
        }
        caught(|| self.device.step(model, job.data, rows))?;
        self.staleness = Some(staleness);
        Ok(())
    }

    fn collect(&mut self, _rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        self.staleness.take().ok_or_else(|| "collect with nothing in flight".into())
    }

    fn collected(&mut self, ts: u64, block: &Arc<RowBlock>) -> Result<(), DeviceError> {
        self.device.insert(ts, block)
    }

    fn cache_len(&self) -> usize {
        self.device.cache_len()
    }
}

/// A CPU device with up to `depth` batches in flight, the way a GPU queue runs them: a batch is
/// evicted, validated, stepped and inserted into a host [`ValidationCache`] when it is
/// submitted, and its stepped values wait until it is collected. For checking the driver at
/// depth > 1 without a GPU (the simulation, the fuzzer, the mutation table); the insert copies
/// the rows, which the one-at-a-time [`CpuDevice`](super::CpuDevice) does not.
#[cfg(feature = "testing")]
#[derive(Debug)]
pub struct DeferredCpuDevice {
    depth: usize,
    cache: ValidationCache,
    done: std::collections::VecDeque<(Vec<f32>, Staleness)>,
}

#[cfg(feature = "testing")]
impl DeferredCpuDevice {
    /// A device holding up to `depth` batches (0 is taken as 1).
    pub fn new(depth: usize) -> Self {
        DeferredCpuDevice {
            depth: depth.max(1),
            cache: ValidationCache::default(),
            done: Default::default(),
        }
    }
}

#[cfg(feature = "testing")]
impl<M: Model> DeviceQueue<M> for DeferredCpuDevice {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.cache.clear();
        self.done.clear();
        Ok(())
    }

    fn depth(&self) -> usize {
        self.depth
    }

    fn submit(
        &mut self,
        model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>> {
        if self.done.len() >= self.depth {
            return Err(SubmitError::Device("all slots are in flight".into()));
        }
        let mut staleness = Staleness::default();
        if job.validate {
            self.cache.evict_before(job.ste);
            staleness = self.cache.validate(job.read, rows);
        }
        // The step works on a copy: the engine's rows stay as read until the batch is collected.
        let mut values = rows.values().to_vec();
        let mut stepped =
            BatchRows::new(rows.ids(), rows.width(), &mut values).expect("same shape");
        caught(|| model.step(job.data, &mut stepped))?;
        if job.insert {
            let block = RowBlock::new(rows.ids().to_vec(), rows.width(), values.clone());
            self.cache.insert(job.ts, &Arc::new(block.expect("same shape")));
        }
        self.done.push_back((values, staleness));
        Ok(())
    }

    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        let (values, staleness) = self.done.pop_front().ok_or("collect with nothing in flight")?;
        if values.len() != rows.values().len() {
            return Err("collect into rows of another batch".into());
        }
        rows.values_mut().copy_from_slice(&values);
        Ok(staleness)
    }

    fn cache_len(&self) -> usize {
        self.cache.len()
    }
}
