//! The engine's device over the host port of the validation-cache kernels: the same
//! [`CacheDevice`] as [`CudaDevice`](crate::pipeline::CudaDevice) (timestamps → version words,
//! replacing versions → [`Staleness`]) with the table in host memory, so the device and the
//! table algorithm run inside the real engine on machines without a GPU.

use crate::cache::{CacheConfig, CacheError, HostBatch, SimValidationCache};
use crate::cache_device::{CacheBackend, CacheDevice, apply_validation, version_words};
use crate::error::GpuError;
use ordo::engine::{BatchRows, RowBlock, Staleness};

/// A device whose validation cache is [`SimValidationCache`]; the model step runs on the host.
pub type SimDevice = CacheDevice<SimValidationCache>;

impl SimDevice {
    /// A device whose cache is sized by `config`.
    pub fn new(config: CacheConfig) -> Result<Self, CacheError> {
        Ok(CacheDevice::over(SimValidationCache::new_host(config)?))
    }
}

impl CacheBackend for SimValidationCache {
    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, GpuError> {
        let mut b = HostBatch::new(
            rows.ids().to_vec(),
            version_words(read).collect(),
            rows.values().to_vec(),
        );
        SimValidationCache::validate(self, &mut b)?;
        Ok(apply_validation(read, &b.values, &b.replaced, rows))
    }

    fn insert(&mut self, ts: u64, rows: &RowBlock) -> Result<(), GpuError> {
        let b = HostBatch::new(rows.ids().to_vec(), vec![0; rows.len()], rows.values().to_vec());
        Ok(SimValidationCache::insert(self, &b, ts)?)
    }
}
