//! A CPU device with batches in flight, for checking the driver at depth > 1 without a GPU.

use crate::engine::device_queue::{DeviceQueue, Submission, SubmitError, host_step};
use crate::engine::validation_cache::CpuValidationCache;
use crate::engine::{BatchRows, DeviceError, Model, QueueCache, RowBlock, Staleness};
use std::sync::Arc;

/// A CPU device with up to `depth` batches in flight, the way a GPU queue runs them: a batch is
/// evicted, validated, stepped and inserted into a host [`CpuValidationCache`] when it is
/// submitted, and its stepped values wait until it is collected. For checking the driver at
/// depth > 1 without a GPU (the simulation, the fuzzer, the mutation table); the insert copies
/// the rows, which the one-at-a-time [`CpuDevice`](crate::engine::CpuDevice) does not.
#[derive(Debug)]
pub struct DeferredCpuDevice {
    depth: usize,
    cache: CpuValidationCache,
    done: std::collections::VecDeque<(Vec<f32>, Staleness)>,
}

impl DeferredCpuDevice {
    /// A device holding up to `depth` batches (0 is taken as 1).
    pub fn new(depth: usize) -> Self {
        DeferredCpuDevice {
            depth: depth.max(1),
            cache: CpuValidationCache::default(),
            done: Default::default(),
        }
    }
}

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
            staleness = self.cache.validate(job.read, rows);
        }
        // The step works on a copy: the engine's rows stay as read until the batch is collected.
        let mut values = rows.values().to_vec();
        let mut stepped =
            BatchRows::new(rows.ids(), rows.width(), &mut values).expect("same shape");
        host_step(model, job.data, &mut stepped)?;
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

    fn cache(&self) -> &dyn QueueCache {
        &self.cache
    }

    fn cache_mut(&mut self) -> &mut dyn QueueCache {
        &mut self.cache
    }
}
