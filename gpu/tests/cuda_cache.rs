//! The validation cache in device memory against the CPU reference cache on random batch
//! streams (needs a CUDA device; `#[ignore]`d: run with `--ignored` on a GPU machine, where it fails without a device).

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo_gpu::cache::{CacheConfig, CudaValidationCache, DeviceBatch, ReferenceValidationCache};
use ordo_gpu::workload::{Rng, random_stream};
use ordo_gpu::{Gpu, GpuError};

/// Drive the CUDA cache and the CPU cache with the same stream; every validation (values and
/// replacing versions), every insert result (including overflows) and every eviction count must
/// agree exactly.
fn compare_on_stream(gpu: &Gpu, seed: u64, width: usize, capacity: usize, lag: u64) -> usize {
    let stream = gpu.new_stream().unwrap();
    let config = CacheConfig { width, capacity };
    let mut dev = CudaValidationCache::new(gpu, stream.clone(), config).unwrap();
    let mut cpu = ReferenceValidationCache::new(config).unwrap();
    let mut rng = Rng::new(seed);
    let mut overflows = 0;
    for (ts, step) in random_stream(&mut rng.clone(), 300, 24, 400, lag).into_iter().enumerate() {
        let ts = ts as u64;
        assert_eq!(dev.evict(step.ste).unwrap(), cpu.evict(step.ste), "evict at ts {ts}");
        let values: Vec<f32> =
            (0..step.rows.len() * width).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut b =
            DeviceBatch::upload(&stream, &step.rows, &step.read_versions, &values, width).unwrap();
        dev.validate(&mut b).unwrap();
        let mut want = values.clone();
        let replaced = cpu.validate(&step.rows, &step.read_versions, &mut want).unwrap();
        assert_eq!(b.download_values(&stream).unwrap(), want, "validated values at ts {ts}");
        assert_eq!(b.download_replaced(&stream).unwrap(), replaced, "replaced at ts {ts}");

        let stepped: Vec<f32> = want.iter().map(|v| v + ts as f32).collect();
        let b =
            DeviceBatch::upload(&stream, &step.rows, &step.read_versions, &stepped, width).unwrap();
        match (dev.insert(&b, ts), cpu.insert(&step.rows, ts, &stepped)) {
            (Ok(()), Ok(())) => {}
            (Err(GpuError::Cache(got)), Err(want)) => {
                assert_eq!(got, want);
                overflows += 1;
            }
            (got, want) => panic!("insert at ts {ts}: device {got:?}, cpu {want:?}"),
        }
        assert_eq!(dev.len(), cpu.len());
    }
    assert!(!dev.backend().probe_failed().unwrap(), "a kernel probe found no slot");
    overflows
}

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_cache_matches_the_cpu_cache_on_random_streams() {
    let gpu = require_gpu::gpu();
    for (seed, width) in [(1, 1), (2, 3), (3, 64), (4, 129)] {
        // Room for every live entry: no overflow allowed.
        assert_eq!(compare_on_stream(&gpu, seed, width, 8 * 24, 8), 0);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_cache_overflows_and_compacts_like_the_cpu_cache() {
    let gpu = require_gpu::gpu();
    // A small cache with long lags: overflows (checked on the host) and many compactions.
    let overflows = compare_on_stream(&gpu, 9, 4, 40, 6);
    assert!(overflows > 0, "the stream was meant to overflow the cache");
    // Short lags with a cache just big enough: tombstones pile up and force rehashes.
    assert_eq!(compare_on_stream(&gpu, 10, 2, 2 * 24, 1), 0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_cache_handles_empty_batches_and_clear() {
    let gpu = require_gpu::gpu();
    let stream = gpu.new_stream().unwrap();
    let config = CacheConfig { width: 2, capacity: 4 };
    let mut dev = CudaValidationCache::new(&gpu, stream.clone(), config).unwrap();
    let mut empty = DeviceBatch::upload(&stream, &[], &[], &[], 2).unwrap();
    dev.validate(&mut empty).unwrap();
    dev.insert(&empty, 0).unwrap();
    let b = DeviceBatch::upload(&stream, &[7], &[0], &[1.0, 2.0], 2).unwrap();
    dev.insert(&b, 1).unwrap();
    dev.clear().unwrap();
    let mut probe = DeviceBatch::upload(&stream, &[7], &[0], &[5.0, 6.0], 2).unwrap();
    dev.validate(&mut probe).unwrap();
    assert_eq!(probe.download_values(&stream).unwrap(), [5.0, 6.0]);
    assert!(dev.is_empty());
}
