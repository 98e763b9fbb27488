//! Shared by the `cuda_*` tests (all `#[ignore = "needs a CUDA device"]`, run with `--ignored`
//! on a GPU machine by `gpu/run-gpu-checks.sh`): open device 0 or fail the test with the reason.
//! A GPU test never skips: without the driver, NVRTC or a device it fails, so a run that tested
//! nothing cannot pass, whether or not `ORDO_REQUIRE_GPU=1` is set.

use ordo_gpu::Gpu;

/// Device 0, or a panic naming which check of the gate failed (driver library, NVRTC, device).
pub fn gpu() -> Gpu {
    Gpu::open(0).unwrap_or_else(|e| panic!("{e} (this test is #[ignore]d: run it on a GPU)"))
}
