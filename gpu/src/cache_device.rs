//! The engine's device with its validation cache off the host's [`CpuValidationCache`]: on the GPU
//! ([`CudaDevice`](crate::pipeline::CudaDevice)) or in the host port of the GPU's table
//! ([`SimDevice`](crate::sim_device::SimDevice)), with the model step on the host. Both are one
//! [`CacheDevice`] over a [`CacheBackend`]: the engine's [`DeviceQueue`] is implemented once,
//! and each backend supplies only its table.
//!
//! [`CpuValidationCache`]: ordo::engine::validation_cache::CpuValidationCache

use crate::error::GpuError;
use ordo::engine::{
    BatchRows, DeviceError, DeviceQueue, Model, QueueCache, RowBlock, Staleness, Submission,
    SubmitError, host_step,
};
use std::sync::Arc;

/// The version words of the engine's read timestamps (`None` = before the run = version 0).
pub(crate) fn version_words(read: &[Option<u64>]) -> impl Iterator<Item = u64> + '_ {
    read.iter().map(|r| r.map_or(0, |ts| ts.saturating_add(1)))
}

/// The staleness validation repaired in a batch, as the engine defines it: the rows with a
/// replacing version (`replaced[i] != 0`), and the largest gap between that version and the
/// version read (`read_versions[i]`). Version gap = ts gap, with the pre-run value at ts −1
/// (version 0). A replacing version is always newer than the one read; a device that reports
/// otherwise counts a gap of 0, not a panic.
pub(crate) fn repaired(
    read_versions: impl IntoIterator<Item = u64>,
    replaced: &[u64],
) -> Staleness {
    let mut st = Staleness::default();
    for (&v, read_version) in replaced.iter().zip(read_versions) {
        if v != 0 {
            st.replaced = st.replaced.saturating_add(1);
            st.max_gap = st.max_gap.max(v.saturating_sub(read_version));
        }
    }
    st
}

/// Copy the replaced rows of a validated batch (`values`, `replaced` versions per row) into
/// `rows`, and measure the staleness ([`repaired`]).
pub(crate) fn apply_validation(
    read: &[Option<u64>],
    values: &[f32],
    replaced: &[u64],
    rows: &mut BatchRows<'_>,
) -> Staleness {
    let w = rows.width();
    for (i, _) in replaced.iter().enumerate().filter(|(_, v)| **v != 0) {
        rows.row_mut(i).copy_from_slice(&values[i * w..(i + 1) * w]);
    }
    repaired(version_words(read), replaced)
}

/// A validation cache table as a [`CacheDevice`] uses it, with the engine's run-local stamps
/// (emptied, evicted and counted as every device's cache is: [`QueueCache`]).
pub trait CacheBackend: QueueCache {
    /// Replace every row of `rows` whose cached ts is newer than the ts it was read at
    /// (`read[i]`, `None` for a value from before the run); what was repaired.
    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, GpuError>;
    /// Cache the stepped rows of the batch stamped `ts`.
    fn insert(&mut self, ts: u64, block: &RowBlock) -> Result<(), GpuError>;
}

/// The engine's device over a cache `C`: a [`DeviceQueue`] of depth 1 whose
/// [`evict`](DeviceQueue::evict) evicts (every batch, as the sequencer calls it),
/// [`submit`](DeviceQueue::submit) validates and runs the host step, and whose
/// [`collected`](DeviceQueue::collected) inserts the stepped rows (before the next submit, as
/// one batch is in flight at most). A failure of the cache is returned from the method that
/// met it, and the engine stops with it as [`ordo::engine::StageError::Device`].
#[derive(Debug)]
pub struct CacheDevice<C> {
    pub(crate) cache: C,
    /// What the batch in flight's validation measured (`None`: nothing in flight).
    staleness: Option<Staleness>,
}

impl<C> CacheDevice<C> {
    /// A device over `cache`.
    pub(crate) fn over(cache: C) -> Self {
        CacheDevice { cache, staleness: None }
    }

    /// Kept for callers of the earlier API, which kept a device's first error aside: every
    /// error is now returned by the method that met it, so this is always `None`.
    pub fn take_error(&mut self) -> Option<GpuError> {
        None
    }
}

impl<M: Model, C: CacheBackend> DeviceQueue<M> for CacheDevice<C> {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.staleness = None;
        self.cache.clear()
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
        let device = |e: GpuError| SubmitError::Device(e.into());
        let mut staleness = Staleness::default();
        if job.validate {
            staleness = self.cache.validate(job.read, rows).map_err(device)?;
        }
        host_step(model, job.data, rows)?;
        self.staleness = Some(staleness);
        Ok(())
    }

    fn collect(&mut self, _rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        self.staleness.take().ok_or_else(|| GpuError::Pipeline("nothing in flight").into())
    }

    fn collected(&mut self, ts: u64, block: &Arc<RowBlock>) -> Result<(), DeviceError> {
        Ok(self.cache.insert(ts, block)?)
    }

    fn cache(&self) -> &dyn QueueCache {
        &self.cache
    }

    fn cache_mut(&mut self) -> &mut dyn QueueCache {
        &mut self.cache
    }
}
