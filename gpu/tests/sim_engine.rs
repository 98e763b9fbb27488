//! The engine in `Oac` mode with [`SimDevice`] (the device-stage adapter over the host port of
//! the cache kernels) equals the sequential replay of its recorded order — the CPU twin of
//! `cuda_engine.rs`, run on every machine.

#![cfg(not(ordo_loom))]

#[path = "support/oac_replay.rs"]
mod oac_replay;

use oac_replay::{assert_oac_equals_replay, run_oac};
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::sim_device::SimDevice;

#[test]
fn engine_oac_with_the_sim_device_equals_the_sequential_replay() {
    for threads in [(2, 2), (3, 1), (1, 3)] {
        let mut device = SimDevice::new(CacheConfig::for_in_flight(4096, 4, 3).unwrap()).unwrap();
        assert_oac_equals_replay(&mut device, threads);
        assert!(device.take_error().is_none());
    }
}

#[test]
fn a_cache_overflow_stops_the_engine_with_the_typed_error() {
    // Room for one batch of 4 rows only: a later insert with new rows overflows.
    let mut device = SimDevice::new(CacheConfig { width: 3, capacity: 4 }).unwrap();
    let err = run_oac(&mut device, (2, 2)).err().expect("the run must stop");
    // The cache's own error is at the end of the source chain.
    let chain: Vec<String> =
        std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(|e| e.to_string())
            .collect();
    assert!(chain.iter().any(|m| m.contains("overflow")), "{chain:?}");
}
