//! OAC on the GPU pipeline equals the sequential run of the same batches (bit for bit: same
//! kernels, same order), and Async without validation does not (so the check has teeth).
//! Both run with the engine's own driver over the pipeline as a device queue
//! (the `Pipeline` is the engine's `DeviceQueue`). Needs a CUDA device; `#[ignore]`d: run with `--ignored` on a GPU machine, where it fails without a device.

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo::engine::simulation::Simulation;
use ordo::engine::{AsyncWrite, Batch, EngineConfig, Mode};
use ordo::row_store::RowStore;
use ordo_gpu::Gpu;
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::kge::{KgeBatch, KgeHyper, KgeKernels, KgeModel, KgeShape};
use ordo_gpu::pipeline::{KgeDeviceModel, Pipeline, PipelineConfig};
use ordo_gpu::workload::{Rng, random_kge_batch};

const ENTITIES: usize = 120;
const SHAPE: KgeShape = KgeShape { model: KgeModel::ComplEx, dim: 16, relations: 4 };
const WIDTH: usize = 2 * SHAPE.dim;
const MAX_ROWS: usize = 24;

struct Work {
    rows: Vec<Vec<u64>>,
    batches: Vec<KgeBatch>,
    table: Vec<f32>,
    relations: Vec<f32>,
}

fn work(seed: u64, n: usize) -> Work {
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let mut batches = Vec::new();
    for _ in 0..n {
        let n = 4 + rng.below((MAX_ROWS - 4) as u64) as usize;
        let r = rng.distinct_rows(n, ENTITIES as u64);
        batches.push(random_kge_batch(&mut rng, 6, 3, r.len(), SHAPE.relations));
        rows.push(r);
    }
    let table = rng.params(ENTITIES, SHAPE.dim);
    let relations = rng.params(SHAPE.relations, SHAPE.dim);
    Work { rows, batches, table, relations }
}

/// Run every batch through a pipeline of `depth` slots with the engine's driver, scheduled by
/// the deterministic simulation with every reader action first (the stalest schedule: up to
/// `ahead` batches wait read before the device takes them). `Mode::Sync` when `depth` is 1 and
/// nothing is read ahead, else `Oac` with the cache or `Async` without. Returns the final table
/// and relations.
fn run(gpu: &Gpu, w: &Work, depth: usize, ahead: usize, oac: bool) -> (Vec<f32>, Vec<f32>) {
    // Live entries have ts ≥ STE = the oldest read prefix among batches read and not collected,
    // at most 2·depth + read-ahead + 1 stamps behind the newest.
    let live = 2 * depth + ahead + 2;
    let cache = oac.then(|| CacheConfig::for_in_flight(live, MAX_ROWS, WIDTH).unwrap());
    let config = PipelineConfig { depth, max_rows: MAX_ROWS, width: WIDTH, cache, timing: true };
    let hyper = KgeHyper { eps: 1e-8, ..KgeHyper::new(0.05) };
    let compute = gpu.new_stream().unwrap();
    let kernels = KgeKernels::new(gpu, compute.clone(), SHAPE, &w.relations).unwrap();
    let model = KgeDeviceModel::new(kernels, hyper);
    let mut p = Pipeline::new(gpu, config, compute).unwrap();
    let mode = match (oac, depth, ahead) {
        (true, _, _) => Mode::Oac,
        (false, 1, 0) => Mode::Sync,
        _ => Mode::Async(AsyncWrite::Overwrite),
    };
    let store = RowStore::from_values(ENTITIES, WIDTH, &w.table).unwrap();
    let batches = w.rows.iter().zip(&w.batches).enumerate().map(|(i, (rows, b))| Batch {
        id: i as u64,
        rows: rows.clone(),
        data: b.clone(),
    });
    // One reader: the computation order is the order of the batches, as in Sync.
    let engine = EngineConfig::new(mode).threads(1, 2).depths(ahead.max(1), depth);
    let sim = Simulation::with_device(engine, Box::new(&mut p), model, &store, batches).unwrap();
    let (model, report) = sim.run(&[0; 4096]).unwrap();
    assert_eq!(report.order.len(), w.rows.len());
    assert_eq!(oac, report.rows_replaced > 0, "only Oac validates, and these batches overlap");
    assert!(p.compute_busy_ms() > 0.0, "timing events were recorded");
    assert_eq!(p.waits(), report.order.len() as u64, "one blocking wait a batch");
    let relations = model.kernels.relations().unwrap();
    (store.snapshot(), relations)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
#[ignore = "needs a CUDA device"]
fn oac_pipeline_equals_the_sequential_run_and_async_does_not() {
    let gpu = require_gpu::gpu();
    let w = work(5, 80);
    let (sync_table, sync_rel) = run(&gpu, &w, 1, 0, false);
    for (depth, ahead) in [(1, 3), (2, 0), (4, 4), (8, 2)] {
        let (t, r) = run(&gpu, &w, depth, ahead, true);
        assert_eq!(bits(&t), bits(&sync_table), "Oac depth {depth} ahead {ahead}: entity rows");
        assert_eq!(bits(&r), bits(&sync_rel), "Oac depth {depth} ahead {ahead}: relations");
    }
    let (t, _) = run(&gpu, &w, 4, 4, false);
    assert_ne!(bits(&t), bits(&sync_table), "Async must lose updates on overlapping batches");
}
