//! The CPU device: the engine's default [`DeviceQueue`], one batch at a time on the calling
//! thread.

use crate::engine::block::RowBlock;
use crate::engine::device_queue::{DeviceQueue, Submission, SubmitError, host_step};
use crate::engine::error::DeviceError;
use crate::engine::model::{BatchRows, Model};
use crate::engine::queue_cache::QueueCache;
use crate::engine::record::Staleness;
use crate::engine::validation_cache::CpuValidationCache;
use std::sync::Arc;

/// The CPU device: a [`CpuValidationCache`] in host memory, the model step on the thread that
/// drives the session (a model may use rayon inside its step). A [`DeviceQueue`] of depth 1:
/// [`evict`](DeviceQueue::evict) evicts, [`submit`](DeviceQueue::submit) validates and steps; the stepped rows stay in the
/// engine's buffer; [`collected`](DeviceQueue::collected) inserts them into the cache, before
/// the next submit, since one batch is in flight at most.
#[derive(Debug, Default)]
pub struct CpuDevice {
    cache: CpuValidationCache,
    /// What the batch in flight's validation measured (`None`: nothing in flight).
    staleness: Option<Staleness>,
}

impl CpuDevice {
    /// A device with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cache (for inspection).
    pub fn cache(&self) -> &CpuValidationCache {
        &self.cache
    }
}

impl<M: Model> DeviceQueue<M> for CpuDevice {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.staleness = None;
        self.cache.clear();
        Ok(())
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
            staleness = self.cache.validate(job.read, rows);
        }
        host_step(model, job.data, rows)?;
        self.staleness = Some(staleness);
        Ok(())
    }

    fn collect(&mut self, _rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        self.staleness.take().ok_or_else(|| "collect with nothing in flight".into())
    }

    fn collected(&mut self, ts: u64, block: &Arc<RowBlock>) -> Result<(), DeviceError> {
        self.cache.insert(ts, block);
        Ok(())
    }

    fn cache(&self) -> &dyn QueueCache {
        &self.cache
    }

    fn cache_mut(&mut self) -> &mut dyn QueueCache {
        &mut self.cache
    }
}
