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

/// The sequencer evicts below the STE before every batch, whatever the device: batches stamped
/// alone (`submit_inline`, which neither validate nor insert) still empty a device cache that
/// earlier pipelined batches filled, as they empty the CPU device's.
#[test]
fn batches_stamped_alone_evict_the_device_cache_too() {
    use ordo::engine::{Engine, EngineConfig, Mode};
    use ordo::row_store::RowStore;
    let mut device = SimDevice::new(CacheConfig::for_in_flight(4096, 4, 3).unwrap()).unwrap();
    let mut cpu = ordo::engine::CpuDevice::new();
    let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
    let mut left = Vec::new();
    for_each_device(&mut device, &mut cpu, |mut device| {
        let store = RowStore::zeros(500, 3);
        let mut model = oac_replay::Pull { bias: 0.0 };
        let report = engine
            .session(&mut device, &mut model, &store, |s| {
                let mut work = oac_replay::batches().into_iter();
                s.submit_all(work.by_ref().take(50))?;
                // Everything before is written once each inline batch is: the STE passes it.
                for b in work.take(5) {
                    s.submit_inline(b)?;
                }
                s.finish()
            })
            .unwrap();
        left.push(report.order.last().expect("a batch").cache_rows);
    });
    assert_eq!(left, [0, 0], "rows left cached after the inline batches (sim, cpu)");
}

/// Run `f` on the sim device, then on the CPU device.
fn for_each_device(
    sim: &mut SimDevice,
    cpu: &mut ordo::engine::CpuDevice,
    mut f: impl FnMut(&mut dyn ordo::engine::DeviceQueue<oac_replay::Pull>),
) {
    f(sim);
    f(cpu);
}
