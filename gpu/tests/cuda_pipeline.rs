//! OAC on the GPU pipeline equals the sequential run of the same batches (bit for bit: same
//! kernels, same order), and Async without validation does not (so the check has teeth).
//! Needs a CUDA device; prints "skipped: no CUDA device" and passes without one.

#![cfg(not(loom))]

use ordo_gpu::Gpu;
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::kge::{KgeBatch, KgeHyper, KgeKernels, KgeModel, KgeShape};
use ordo_gpu::pipeline::{KgeDeviceStep, Pipeline, PipelineConfig};
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

/// Run every batch through a pipeline of `depth` slots against a host "store" (`table` +
/// per-row versions): read the rows at submission (stale while earlier batches are in flight),
/// write them back at collection. Returns the final table and relations.
fn run(gpu: &Gpu, w: &Work, depth: usize, oac: bool) -> (Vec<f32>, Vec<f32>) {
    // Live entries have ts ≥ STE = the read prefix of the oldest batch in flight, which is at
    // most 2·depth − 1 stamps behind the newest: room for 2·depth batches.
    let cache = oac.then(|| CacheConfig::for_in_flight(2 * depth, MAX_ROWS, WIDTH).unwrap());
    let config = PipelineConfig { depth, max_rows: MAX_ROWS, width: WIDTH, cache };
    let hyper = KgeHyper { lr: 0.05, eps: 1e-8 };
    let mut p = Pipeline::new(gpu, config, |s| {
        Ok(KgeDeviceStep { kernels: KgeKernels::new(gpu, s.clone(), SHAPE, &w.relations)?, hyper })
    })
    .unwrap();
    let mut table = w.table.clone();
    let mut versions = vec![0u64; ENTITIES];
    // Read prefix (batches written back when it was read) of each batch in flight.
    let mut prefixes = std::collections::VecDeque::new();
    let mut written = 0u64;
    let mut out = vec![0.0; MAX_ROWS * WIDTH];
    let mut collect = |p: &mut Pipeline<KgeDeviceStep>,
                       table: &mut Vec<f32>,
                       versions: &mut Vec<u64>,
                       prefixes: &mut std::collections::VecDeque<u64>| {
        let c = p.collect(&mut out).unwrap().expect("a batch in flight");
        for (i, &r) in w.rows[c.ts as usize].iter().enumerate() {
            let r = r as usize;
            table[r * WIDTH..(r + 1) * WIDTH].copy_from_slice(&out[i * WIDTH..(i + 1) * WIDTH]);
            versions[r] = c.ts + 1;
        }
        prefixes.pop_front();
    };
    for (k, rows) in w.rows.iter().enumerate() {
        if p.in_flight() == depth {
            collect(&mut p, &mut table, &mut versions, &mut prefixes);
            written += 1;
        }
        let values: Vec<f32> = rows
            .iter()
            .flat_map(|&r| table[r as usize * WIDTH..(r as usize + 1) * WIDTH].to_vec())
            .collect();
        let read: Vec<u64> = rows.iter().map(|&r| versions[r as usize]).collect();
        prefixes.push_back(written);
        // STE: the smallest read prefix among the batches in flight (this one included).
        let ste = *prefixes.iter().min().unwrap();
        assert_eq!(p.submit(rows, &read, &values, ste, &w.batches[k]).unwrap(), k as u64);
    }
    while p.in_flight() > 0 {
        collect(&mut p, &mut table, &mut versions, &mut prefixes);
    }
    let relations = p.step_ref().kernels.relations().unwrap();
    (table, relations)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn oac_pipeline_equals_the_sequential_run_and_async_does_not() {
    if !ordo_gpu::cuda_available() {
        eprintln!("skipped: no CUDA device");
        return;
    }
    let gpu = Gpu::open(0).unwrap();
    let w = work(5, 80);
    let (sync_table, sync_rel) = run(&gpu, &w, 1, false);
    for depth in [2, 4, 8] {
        let (t, r) = run(&gpu, &w, depth, true);
        assert_eq!(bits(&t), bits(&sync_table), "Oac depth {depth}: entity rows");
        assert_eq!(bits(&r), bits(&sync_rel), "Oac depth {depth}: relations");
    }
    let (t, _) = run(&gpu, &w, 4, false);
    assert_ne!(bits(&t), bits(&sync_table), "Async must lose updates on overlapping batches");
}
