//! The engine in `Oac` mode with the CUDA device stage ([`CudaDevice`]) gives the store that
//! the sequential replay of its recorded order gives. Needs a CUDA device; is `#[ignore]`d:
//! run with `--ignored` on a GPU machine, where it fails without a device.

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

#[path = "support/oac_replay.rs"]
mod oac_replay;

use oac_replay::assert_oac_equals_replay;
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::pipeline::CudaDevice;

#[test]
#[ignore = "needs a CUDA device"]
fn engine_oac_with_the_cuda_device_equals_the_sequential_replay() {
    let gpu = require_gpu::gpu();
    // Generous: a stalled reader pins the STE (see ordo::validation_cache); an overflow would
    // stop the run with a typed error, not corrupt it.
    let config = CacheConfig::for_in_flight(4096, 4, 3).unwrap();
    let mut device = CudaDevice::new(&gpu, config, 4).unwrap();
    for threads in [(2, 2), (3, 1)] {
        assert_oac_equals_replay(&mut device, threads);
        assert!(device.take_error().is_none());
    }
}
