//! The chunked KGE step ([`ChunkedKernels`]) as a [`DeviceModel`] of the [`Pipeline`]: the
//! batch's data is its packed ids ([`ChunkedIds`]), built by the loader or a reader, so the
//! device thread only copies kilobytes of ids and launches.
//!
//! [`Pipeline`]: crate::pipeline::Pipeline

use crate::cache::DeviceBatch;
use crate::error::GpuError;
use crate::kge::{ChunkedIds, ChunkedKernels, KgeHyper};
use crate::pipeline::{DeviceModel, Streams, on_device};
use ordo::engine::{BatchRows, Model, SubmitError};

/// The chunked step on the batch's rows; the relations live in the kernels on the device.
#[derive(Debug)]
pub struct ChunkedDeviceModel {
    /// The kernels (and the relation rows they own).
    pub kernels: ChunkedKernels,
    /// Learning rate, epsilon, L2 weight and loss.
    pub hyper: KgeHyper,
}

impl Model for ChunkedDeviceModel {
    type Data = ChunkedIds;
    type Error = GpuError;

    fn row_width(&self) -> usize {
        2 * self.kernels.shape().dim
    }

    /// The same kernels on host rows: upload, step, copy back (blocking).
    fn step(&mut self, ids: &ChunkedIds, rows: &mut BatchRows<'_>) -> Result<(), GpuError> {
        let stream = self.kernels.stream().clone();
        let mut values = stream.clone_htod(rows.values())?;
        self.kernels.step(ids, &mut values, &self.hyper)?;
        stream.memcpy_dtoh(&values, rows.values_mut())?;
        stream.synchronize()?;
        Ok(())
    }

    /// The relation rows (parameters and Adagrad sums); empty if the copy fails.
    fn dense(&self) -> Vec<f32> {
        self.kernels.relations().unwrap_or_default()
    }
}

impl DeviceModel for ChunkedDeviceModel {
    fn step_on_device(
        &mut self,
        _streams: &Streams,
        ids: &ChunkedIds,
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<GpuError>> {
        crate::cache::check_len("chunked batch rows", batch.rows().len(), ids.rows())
            .map_err(|e| on_device(e.into()))?;
        self.kernels.step(ids, batch.values_mut(), &self.hyper).map_err(on_device)
    }
}
