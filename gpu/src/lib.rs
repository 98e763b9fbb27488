//! ordo-gpu: the engine's device stage on CUDA, loaded at run time through cudarc so the crate
//! builds and tests on machines without CUDA.

#![warn(missing_docs)]

/// Whether a CUDA driver and at least one device can be used on this machine.
pub fn cuda_available() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library and reports whether it
    // loaded; it calls no CUDA function.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    present && cudarc::driver::CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
}
