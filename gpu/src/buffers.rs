//! Small helpers for device buffers shared by the kernel wrappers.

use crate::error::GpuError;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// Copy `data` to a new device buffer of at least one element (cudarc does not allocate zero
/// bytes; kernels get the logical length separately).
pub(crate) fn upload<T: DeviceRepr + ValidAsZeroBits + Default + Clone>(
    stream: &Arc<CudaStream>,
    data: &[T],
) -> Result<CudaSlice<T>, GpuError> {
    if data.is_empty() { Ok(stream.alloc_zeros::<T>(1)?) } else { Ok(stream.clone_htod(data)?) }
}

/// A zeroed device buffer of at least one element.
pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, GpuError> {
    Ok(stream.alloc_zeros::<T>(len.max(1))?)
}

/// `n` as a kernel's `u32` count.
pub(crate) fn count_u32(what: &'static str, n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).map_err(|_| GpuError::TooLarge { what, elems: n })
}

/// Make `buf` hold at least `len` elements (reallocating, zeroed, if it is smaller).
pub(crate) fn ensure<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), GpuError> {
    if buf.len() < len {
        *buf = zeros(stream, len)?;
    }
    Ok(())
}
