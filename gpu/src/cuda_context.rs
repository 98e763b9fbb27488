//! Opening a CUDA context, behind the gate that keeps the crate usable without CUDA.

use crate::error::GpuError;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

/// Whether a CUDA driver, NVRTC and at least one device can be used on this machine.
///
/// Checks, in order: the driver library loads, the NVRTC library loads, the device count is
/// positive. Never calls `CudaContext::new` (which panics when the driver is missing).
pub fn cuda_available() -> bool {
    gate().is_ok()
}

/// Why [`cuda_available`] is false (`None` when it is true): which library or check failed.
/// Print it where a skip could hide a misconfigured GPU machine (e.g. NVRTC not loadable).
pub fn cuda_unavailable_reason() -> Option<&'static str> {
    match gate() {
        Ok(()) => None,
        Err(GpuError::NoDevice { reason }) => Some(reason),
        Err(_) => Some("the CUDA check failed"),
    }
}

fn gate() -> Result<(), GpuError> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library and reports whether it
    // loaded; it calls no CUDA function.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDevice {
            reason: "the CUDA driver library (libcuda) is not loadable",
        });
    }
    // SAFETY: as above, for the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoDevice {
            reason: "the NVRTC library is not loadable (cudarc looks for libnvrtc.so, \
                     libnvrtc.so.12, …; with only CUDA 13's libnvrtc.so.13, link it as libnvrtc.so \
                     on LD_LIBRARY_PATH)",
        });
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err(GpuError::NoDevice { reason: "the driver reports no CUDA device" }),
        Err(_) => Err(GpuError::NoDevice { reason: "the driver failed to count devices" }),
    }
}

/// A CUDA context on one device, opened only after [`cuda_available`]'s checks pass, with
/// blocking synchronization (`CU_CTX_SCHED_BLOCKING_SYNC`).
///
/// ```
/// match ordo_gpu::Gpu::open(0) {
///     Ok(gpu) => println!("using {}", gpu.name()),
///     Err(ordo_gpu::GpuError::NoDevice { reason }) => println!("skipped: {reason}"),
///     Err(e) => panic!("{e}"),
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
}

impl Gpu {
    /// Open device `ordinal`, or [`GpuError::NoDevice`] when CUDA is not usable here.
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        gate()?;
        let count = CudaContext::device_count()?;
        if ordinal >= usize::try_from(count).unwrap_or(0) {
            return Err(GpuError::NoDevice { reason: "no device with that ordinal" });
        }
        let ctx = CudaContext::new(ordinal)?;
        // The host blocks while it waits for the device instead of spinning: a wait costs no
        // core (and `kge_roofline`'s host core-µs count work, not waiting).
        ctx.set_blocking_synchronize()?;
        Ok(Gpu { ctx })
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A new stream on this device.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        Ok(self.ctx.new_stream()?)
    }

    /// The device's name (e.g. "NVIDIA H100 80GB HBM3"), or "unknown".
    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown".to_owned())
    }
}
