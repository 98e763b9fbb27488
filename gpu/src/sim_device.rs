//! The engine's device stage over the host port of the validation-cache kernels: the same
//! adapter logic as [`CudaDevice`](crate::pipeline::CudaDevice) (timestamps → version words,
//! replacing versions → [`Staleness`]) with the table in host memory, so the adapter and the
//! table algorithm run inside the real engine on machines without a GPU.

use crate::cache::{CacheConfig, CacheError, HostBatch, SimValidationCache};
use ordo::engine::{BatchRows, DeviceError, DeviceStage, Model, RowBlock, Staleness};
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

/// A device stage whose validation cache is [`SimValidationCache`]; the model step runs on the
/// host. Errors are returned by the failing method, as in `CudaDevice`.
#[derive(Debug)]
pub struct SimDevice {
    cache: SimValidationCache,
    error: Option<CacheError>,
}

impl SimDevice {
    /// A device whose cache is sized by `config`.
    pub fn new(config: CacheConfig) -> Result<Self, CacheError> {
        Ok(SimDevice { cache: SimValidationCache::new_host(config)?, error: None })
    }

    /// The first error since the last call, if any.
    pub fn take_error(&mut self) -> Option<CacheError> {
        self.error.take()
    }
}

impl<M: Model> DeviceStage<M> for SimDevice {
    fn reset(&mut self) -> Result<(), DeviceError> {
        self.error = None;
        Ok(self.cache.clear()?)
    }

    fn evict_before(&mut self, ste: u64) -> Result<(), DeviceError> {
        Ok(self.cache.evict(ste).map(drop)?)
    }

    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, DeviceError> {
        let mut b = HostBatch::new(
            rows.ids().to_vec(),
            version_words(read).collect(),
            rows.values().to_vec(),
        );
        self.cache.validate(&mut b)?;
        Ok(apply_validation(read, &b.values, &b.replaced, rows))
    }

    fn insert(&mut self, ts: u64, rows: &Arc<RowBlock>) -> Result<(), DeviceError> {
        let b = HostBatch::new(rows.ids().to_vec(), vec![0; rows.len()], rows.values().to_vec());
        Ok(self.cache.insert(&b, ts)?)
    }

    fn cache_len(&self) -> usize {
        self.cache.len()
    }
}
