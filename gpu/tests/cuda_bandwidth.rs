//! The device-to-device copy that `gpu_bench` reports the kernels' bandwidth as a fraction of
//! (`ordo_gpu::bandwidth`): measured on the device, it is a plausible bandwidth — positive, and
//! not above the card's rated figure when the driver reports one (a byte count off by a factor
//! of two would put it there). Needs a CUDA device; `#[ignore]`d: run with `--ignored` on a GPU
//! machine, where it fails without a device.
//!
//! Under compute-sanitizer (`ORDO_UNDER_SANITIZER=1`, set by `run-gpu-checks.sh`'s `sanitize`
//! step) the lower bound is not checked: the sanitizer instruments every access of the copy
//! kernel (on an H100 it ran at 187 GB/s under memcheck against 2805 GB/s without), so only the
//! upper bound, a byte count off by two, still means anything there.
#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo_gpu::bandwidth::{device_rated_gbps, measure_d2d_copy};

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_d2d_copy_is_a_plausible_fraction_of_the_rated_bandwidth() {
    let gpu = require_gpu::gpu();
    // 512 MiB a buffer: far larger than any L2 cache, so the copy goes to memory.
    let d2d = measure_d2d_copy(&gpu, 512, 5).unwrap();
    let rated = device_rated_gbps(&gpu);
    let instrumented = std::env::var("ORDO_UNDER_SANITIZER").is_ok_and(|v| v == "1");
    eprintln!("{}: {d2d:?}, rated {rated:?} GB/s", gpu.name());
    assert_eq!(d2d.bytes, 512 << 20);
    for gbps in [d2d.memcpy_gbps, d2d.kernel_gbps] {
        assert!(gbps.is_finite() && gbps > 1.0, "{d2d:?}");
        if let Some(rated) = rated {
            // Event timing and clocks allow a little over; twice the bytes would be ~2×.
            assert!(gbps <= 1.1 * rated, "copy {gbps:.1} GB/s above rated {rated:.1} GB/s");
            assert!(
                instrumented || gbps >= 0.2 * rated,
                "copy {gbps:.1} GB/s under a fifth of rated {rated:.1}"
            );
        }
    }
}
