//! The device stage: takes batches one at a time, and so fixes the computation order.
//!
//! [`DeviceStage`] is what a device supplies (the CPU one here, a CUDA one in `ordo-gpu`): the
//! validation cache and the step. The engine's sequencer calls it in the order that keeps OAC's
//! invariants: admission → evict below STE → validate → step → stamp ts → cache insert.

use super::context::{RunCtx, at};
use super::error::Stage;
use super::reader::Staged;
use super::validation_cache::ValidationCache;
use super::{
    BatchRows, DeviceError, HookPoint, Mode, Model, RowBlock, StageError, StageHook, Staleness,
    Stamp, StepError, StopCause,
};
use crate::mutation::{self, Mutant};
use crate::outstanding::Registration;
use crate::storage::RowStorage;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A device: where the validation cache lives and the model step runs.
///
/// The engine calls these methods from one thread, one batch at a time, in this order per batch:
/// `evict_before` and `validate` (`Oac` only), `step`, then `insert` (`Oac` only). Run-local
/// stamps are used throughout (see [`crate::engine`]). A device that keeps its own cache should
/// carry the mutation hooks [`Mutant::EvictStePlusOne`] (in its eviction test) and
/// [`Mutant::ValidateGe`] (in its comparison) as [`ValidationCache`] does, so the engine's checks
/// can be shown to catch those bugs on it too. [`Arc`] is `std::sync::Arc` under every cfg.
///
/// **Errors.** Every method but `cache_len` can fail. A failure of `reset` ends the session
/// before anything runs ([`EngineError::DeviceReset`](super::EngineError::DeviceReset)); a
/// failure of `evict_before`, `validate` or `step` stops the pipeline before the batch is
/// stamped (it writes nothing); a failure of `insert` stops it after the batch is stamped, and
/// the batch is still written (the store is complete up to it), so the error's
/// [`applied`](super::EngineError::applied) list includes it. The cause is kept whole ([`StageError::Device`]).
pub trait DeviceStage<M: Model> {
    /// Forget the cache (called when a session starts).
    fn reset(&mut self) -> Result<(), DeviceError>;

    /// Evict cached rows with `ts < ste`.
    fn evict_before(&mut self, ste: u64) -> Result<(), DeviceError>;

    /// Replace every row of `rows` whose cached ts is newer than the ts it was read at
    /// (`read[i]`, `None` for a value from before the run).
    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, DeviceError>;

    /// Run the model step on the batch's rows.
    fn step(
        &mut self,
        model: &mut M,
        data: &M::Data,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), StepError> {
        model.step(data, rows)
    }

    /// Cache the stepped rows of the batch stamped `ts`.
    fn insert(&mut self, ts: u64, rows: &Arc<RowBlock>) -> Result<(), DeviceError>;

    /// Rows in the cache now.
    fn cache_len(&self) -> usize;
}

/// The CPU device: a [`ValidationCache`] in host memory; the step runs on the calling thread
/// (a model may use rayon inside its step).
#[derive(Debug, Default)]
pub struct CpuDevice {
    cache: ValidationCache,
}

impl CpuDevice {
    /// A device with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cache (for inspection).
    pub fn cache(&self) -> &ValidationCache {
        &self.cache
    }
}

impl<M: Model> DeviceStage<M> for CpuDevice {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.cache.clear();
        Ok(())
    }
    fn evict_before(&mut self, ste: u64) -> Result<(), DeviceError> {
        self.cache.evict_before(ste);
        Ok(())
    }
    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, DeviceError> {
        Ok(self.cache.validate(read, rows))
    }
    fn insert(&mut self, ts: u64, rows: &Arc<RowBlock>) -> Result<(), DeviceError> {
        self.cache.insert(ts, rows);
        Ok(())
    }
    fn cache_len(&self) -> usize {
        self.cache.len()
    }
}

/// A stepped, stamped batch on its way to the writers.
pub(crate) struct Stamped {
    pub ts: u64,
    pub id: u64,
    pub block: Arc<RowBlock>,
    pub registration: Option<Registration>,
}

/// The device's bookkeeping: the next stamp and the record of the computation order.
#[derive(Default)]
pub(crate) struct Sequencer {
    pub next_ts: u64,
    pub order: Vec<Stamp>,
    pub cache_peak: usize,
    pub rows_validated: u64,
    pub rows_replaced: u64,
}

impl Sequencer {
    /// Whether the next stamp fits the MFT window (admission control).
    pub fn admits<St: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, St>) -> bool {
        !cx.mode.timestamped() || cx.mft.admits(self.next_ts)
    }

    /// Process one admitted batch. On `Err` the batch is not stamped. A failed cache insert
    /// comes back beside the stamped batch: it must still be written, then the run stops.
    pub fn process<M: Model, D: DeviceStage<M> + ?Sized, St: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, St>,
        stage: &mut D,
        model: &mut M,
        job: Staged<M::Data>,
        hook: Option<&StageHook>,
    ) -> Result<(Stamped, Option<StopCause>), StopCause> {
        at(hook, HookPoint::Device, job.id)?;
        let Staged {
            position,
            id,
            data,
            ids,
            mut values,
            read,
            registration,
            read_prefix,
            original,
        } = job;
        let mut rows = BatchRows::new(&ids, cx.width, &mut values).expect("reader sized the rows");
        let mut staleness = Staleness::default();
        let mut ste = 0;
        if cx.mode == Mode::Oac {
            // Eviction below the STE computed now: every batch that is registered, or registers
            // later, has read the store after its writes below the STE were visible.
            ste = cx.outstanding.ste(&cx.mft);
            stage.evict_before(ste).map_err(|e| device_failed(id, e))?;
            if !mutation::active(Mutant::ValidationSkipped) {
                staleness = stage.validate(&read, &mut rows).map_err(|e| device_failed(id, e))?;
                self.rows_validated += ids.len() as u64;
                self.rows_replaced += u64::from(staleness.replaced);
            }
        }
        match catch_unwind(AssertUnwindSafe(|| stage.step(model, &data, &mut rows))) {
            Ok(Ok(())) => {}
            Ok(Err(source)) => return Err(StopCause::StepFailed { batch_id: id, source }),
            Err(payload) => {
                return Err(StopCause::StepPanicked {
                    batch_id: id,
                    message: panic_message(&*payload),
                });
            }
        }
        drop(data);
        let ts = self.next_ts;
        self.next_ts += 1;
        let block = RowBlock::new(ids, cx.width, values).expect("sized");
        let block = Arc::new(block.with_original(original).recycled_into(&cx.buffers));
        let inserted = if cx.mode == Mode::Oac && !mutation::active(Mutant::CacheInsertSkipped) {
            stage.insert(ts, &block).map_err(|e| device_failed(id, e))
        } else {
            Ok(())
        };
        let cache_rows = stage.cache_len();
        self.cache_peak = self.cache_peak.max(cache_rows);
        self.order.push(Stamp { batch_id: id, position, read_prefix, staleness, ste, cache_rows });
        Ok((Stamped { ts, id, block, registration }, inserted.err()))
    }
}

/// A device-stage failure on batch `batch_id`.
fn device_failed(batch_id: u64, source: DeviceError) -> StopCause {
    StopCause::StageFailed { stage: Stage::Device, batch_id, source: StageError::Device(source) }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
