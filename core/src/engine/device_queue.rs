//! A device with batches in flight: the engine submits a stamped batch now and collects its
//! stepped rows later, so a device with its own streams (a GPU's copy and compute streams)
//! overlaps the transfers of one batch with the compute of another.
//!
//! [`DeviceQueue`] is the engine's one device interface. A synchronous device (the
//! [`CpuDevice`](crate::engine::CpuDevice), or `ordo-gpu`'s `CudaDevice`) is a queue of depth 1: it
//! steps a batch when it is submitted and hands it back at the next collect. The engine's
//! driver is the same at every depth: it stamps a batch when it
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

use crate::engine::block::RowBlock;
use crate::engine::error::{DeviceError, EngineError, panic_message};
use crate::engine::model::{BatchRows, Model, StepError};
use crate::engine::queue_cache::QueueCache;
use crate::engine::record::Staleness;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// One stamped batch handed to a [`DeviceQueue`].
#[derive(Debug)]
pub struct Submission<'a, D> {
    /// The batch's run-local stamp (the engine's `ts`, `0, 1, 2, …` across a session).
    pub ts: u64,
    /// The batch's id.
    pub batch_id: u64,
    /// Validate the rows against the cache (`Oac`, except a batch stamped alone by
    /// `Session::submit_inline`: it read every row's newest version).
    pub validate: bool,
    /// Insert the stepped rows into the cache at `ts` (`Oac`, except a batch stamped alone: it
    /// is written before any later batch reads).
    pub insert: bool,
    /// The ts each row was read at (`None`: a value from before the run).
    pub read: &'a [Option<u64>],
    /// The batch's payload for the step.
    pub data: &'a D,
}

/// Why a [`DeviceQueue`] refused a batch (it is then not stamped, and nothing of it is written).
/// `E` is the model's step error ([`Model::Error`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
/// then, per batch, [`evict`](DeviceQueue::evict) and [`submit`](DeviceQueue::submit) in stamp
/// order and, later,
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
/// (the error's [`unwritten`](crate::engine::EngineError::Stopped) list names them); the batches
/// before it are written. A failed `collected` stops it after the batch is written. A failed
/// `reset` ends the session before anything runs ([`EngineError::DeviceReset`]). Device failures
/// are kept whole ([`StageError::Device`](crate::engine::StageError::Device)).
///
/// **Checks on a device's own cache.** A queue that keeps its own validation cache should carry
/// the mutation hooks [`Mutant::EvictStePlusOne`](crate::mutation::Mutant::EvictStePlusOne) (in
/// its eviction test) and [`Mutant::ValidateGe`](crate::mutation::Mutant::ValidateGe) (in its
/// comparison) as [`CpuValidationCache`](crate::engine::validation_cache::CpuValidationCache) does, so
/// the engine's checks can be shown to catch those bugs on it too. Run-local stamps are used
/// throughout (see [`crate::engine`]).
pub trait DeviceQueue<M: Model> {
    /// Forget the cache and anything in flight (called when a session starts).
    fn reset(&mut self) -> Result<(), DeviceError>;

    /// Batches it holds in flight at most (at least 1).
    fn depth(&self) -> usize;

    /// Evict the cached rows stamped below `ste`, before the next [`submit`](DeviceQueue::submit)
    /// validates (now, or queued on the device ahead of it). The sequencer calls it before every
    /// submission, in every mode (the STE is 0 outside `Oac`, so nothing goes): the rule
    /// "evict what is older than the STE, validate, step, insert" is the sequencer's, the same
    /// for every device, and a device cannot skip the eviction on some batches.
    ///
    /// The default evicts [`cache_mut`](DeviceQueue::cache_mut) now.
    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        self.cache_mut().evict(ste)
    }

    /// Take the batch `job` with its rows as read (`rows`, which the engine keeps unchanged
    /// until the batch is collected): validate (if `job.validate`) against a cache evicted by
    /// the [`evict`](DeviceQueue::evict) just before, run the step, insert at `job.ts` (if
    /// `job.insert`), now or on the device in order.
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

    /// The device's validation cache ([`reset`](DeviceQueue::reset) empties it,
    /// [`evict`](DeviceQueue::evict) evicts it).
    fn cache(&self) -> &dyn QueueCache;

    /// The device's validation cache, to empty or evict.
    fn cache_mut(&mut self) -> &mut dyn QueueCache;

    /// Rows in the cache now.
    fn cache_len(&self) -> usize {
        self.cache().cached_rows()
    }
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

/// Run `model`'s step on the host rows of a submission: its error, or its panic (caught, with
/// its message), as a [`SubmitError`]. For a queue whose step runs on the host (the
/// [`CpuDevice`](crate::engine::CpuDevice), or a device that keeps only its cache elsewhere).
pub fn host_step<M: Model>(
    model: &mut M,
    data: &M::Data,
    rows: &mut BatchRows<'_>,
) -> Result<(), SubmitError<M::Error>> {
    match catch_unwind(AssertUnwindSafe(|| model.step(data, rows))) {
        Ok(r) => r.map_err(SubmitError::Step),
        Err(payload) => Err(SubmitError::StepPanicked(panic_message(&*payload))),
    }
}

/// A borrowed queue is a queue (e.g. boxed for the simulation while its owner reads its counts
/// afterwards).
impl<M: Model, Q: DeviceQueue<M> + ?Sized> DeviceQueue<M> for &mut Q {
    fn reset(&mut self) -> Result<(), DeviceError> {
        (**self).reset()
    }
    fn depth(&self) -> usize {
        (**self).depth()
    }
    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        (**self).evict(ste)
    }
    fn submit(
        &mut self,
        model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>> {
        (**self).submit(model, job, rows)
    }
    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        (**self).collect(rows)
    }
    fn collected(&mut self, ts: u64, block: &Arc<RowBlock>) -> Result<(), DeviceError> {
        (**self).collected(ts, block)
    }
    fn cache(&self) -> &dyn QueueCache {
        (**self).cache()
    }
    fn cache_mut(&mut self) -> &mut dyn QueueCache {
        (**self).cache_mut()
    }
    fn cache_len(&self) -> usize {
        (**self).cache_len()
    }
}
