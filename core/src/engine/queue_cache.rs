//! [`QueueCache`]: a device's validation cache as the engine drives it between batches.

use crate::engine::error::DeviceError;

/// A device's validation cache, as a [`DeviceQueue`](crate::engine::DeviceQueue) drives it
/// outside a batch: emptied when a session starts, evicted below the STE before each
/// submission, counted for the reports. Validation and insertion stay with each device, which
/// does them on its own streams or threads.
///
/// The host [`CpuValidationCache`](crate::engine::validation_cache::CpuValidationCache) and `ordo-gpu`'s tables implement it; an `Option<C>` is a
/// cache a device may run without (`None`: nothing to empty or evict, no rows).
pub trait QueueCache {
    /// Forget every cached row.
    fn clear(&mut self) -> Result<(), DeviceError>;

    /// Evict the cached rows stamped below `ste`.
    fn evict(&mut self, ste: u64) -> Result<(), DeviceError>;

    /// Rows cached now.
    fn cached_rows(&self) -> usize;
}

impl<C: QueueCache> QueueCache for Option<C> {
    fn clear(&mut self) -> Result<(), DeviceError> {
        self.as_mut().map_or(Ok(()), C::clear)
    }

    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        self.as_mut().map_or(Ok(()), |c| c.evict(ste))
    }

    fn cached_rows(&self) -> usize {
        self.as_ref().map_or(0, C::cached_rows)
    }
}
