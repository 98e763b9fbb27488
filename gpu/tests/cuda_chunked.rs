//! The chunked step on the GPU ([`ChunkedKernels`]: `kge_chunked.cu` around cuBLAS) against
//! its host port ([`chunked_step`]), batch by batch through an epoch whose last batch is short
//! (fewer chunks than the step's fixed shape, so padded), for both models and losses, with L2.
//!
//! Within 1e-5 relative, not bit for bit: outside the products every kernel computes the host
//! port's f32 expressions in its order (no FMA contraction), but the three products run in
//! cuBLAS's summation order, not the port's serial one, and `expf`/`logf`/`log1pf` are CUDA's,
//! not Rust's. Bit for bit is checked where OAC needs it: the same batches from the same state
//! on the same GPU give the same bits. Needs a CUDA device and cuBLAS; `#[ignore]`d.

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo_gpu::kge::{
    ChunkLimits, ChunkedBatch, ChunkedIds, ChunkedKernels, KgeHyper, KgeLoss, KgeModel, KgeShape,
    chunked_step,
};
use ordo_gpu::workload::Rng;

const LIMITS: ChunkLimits =
    ChunkLimits { max_positives: 7, chunk: 3, negatives: 4, max_rows: 12, relations: 3 };

/// An epoch: two full batches (7 positives: chunks 3, 3, 1) and a short last one (4: 3, 1).
fn epoch(rng: &mut Rng) -> Vec<ChunkedBatch> {
    [7, 7, 4]
        .into_iter()
        .map(|positives| {
            let row = |rng: &mut Rng| rng.below(LIMITS.max_rows as u64) as u32;
            let positives: Vec<[u32; 3]> = (0..positives)
                .map(|_| [row(rng), rng.below(LIMITS.relations as u64) as u32, row(rng)])
                .collect();
            let chunks = positives.len().div_ceil(LIMITS.chunk);
            ChunkedBatch {
                rows: LIMITS.max_rows,
                positives,
                chunk: LIMITS.chunk,
                negatives: LIMITS.negatives,
                chunk_negatives: (0..chunks * 2 * LIMITS.negatives).map(|_| row(rng)).collect(),
            }
        })
        .collect()
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    let scale = want.iter().fold(1e-12f32, |m, x| m.max(x.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * scale, "{what}[{i}]: {g} vs {w}");
    }
}

/// One run of the epoch on the device from `(ent, rel)`: the rows, relations and losses after
/// each batch.
fn device_run(
    k: &mut ChunkedKernels,
    shape: &KgeShape,
    hyper: &KgeHyper,
    batches: &[ChunkedBatch],
    ent: &[f32],
) -> Vec<(Vec<f32>, Vec<f32>, f64)> {
    let s = k.stream().clone();
    let mut rows = s.clone_htod(ent).unwrap();
    batches
        .iter()
        .map(|b| {
            let ids = ChunkedIds::build(b, shape, &LIMITS).unwrap();
            k.step(&ids, &mut rows, hyper).unwrap();
            let values = s.clone_dtoh(&rows).unwrap();
            (values, k.relations().unwrap(), k.loss(&ids).unwrap())
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_device_step_equals_its_host_port_and_repeats_bit_for_bit() {
    let gpu = require_gpu::gpu();
    for model in [KgeModel::DistMult, KgeModel::ComplEx] {
        for loss in [KgeLoss::Softmax, KgeLoss::Logistic] {
            let case = format!("{model:?} {loss:?}");
            let shape = KgeShape { model, dim: 8, relations: LIMITS.relations };
            let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss };
            let mut rng = Rng::new(23);
            let batches = epoch(&mut rng);
            let ent = rng.params(LIMITS.max_rows, shape.dim);
            let rel = rng.params(shape.relations, shape.dim);
            let stream = gpu.new_stream().unwrap();
            let mut k = ChunkedKernels::new(&gpu, stream.clone(), shape, LIMITS, &rel).unwrap();
            let first = device_run(&mut k, &shape, &hyper, &batches, &ent);
            let (mut e, mut r) = (ent.clone(), rel.clone());
            for (i, (b, (de, dr, dl))) in batches.iter().zip(&first).enumerate() {
                let want = chunked_step(&shape, &hyper, b, &mut e, &mut r).unwrap();
                close(&format!("{case} batch {i} entity rows"), de, &e);
                close(&format!("{case} batch {i} relation rows"), dr, &r);
                assert!((dl - want).abs() <= 1e-5 * want.abs().max(1.0), "{case} {i}: loss");
                assert_ne!(de, &ent, "{case} {i}: the step changed the rows");
            }
            // The same batches from the same state, in fresh kernels: the same bits.
            let mut again = ChunkedKernels::new(&gpu, stream, shape, LIMITS, &rel).unwrap();
            let second = device_run(&mut again, &shape, &hyper, &batches, &ent);
            let bits = |v: &[(Vec<f32>, Vec<f32>, f64)]| {
                v.iter()
                    .map(|(e, r, l)| {
                        let b = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        (b(e), b(r), l.to_bits())
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&second), bits(&first), "{case}: a replay gives the same bits");
        }
    }
}

/// A step allocates nothing: over 50 batches the device's free memory does not move, and a
/// batch over the step's limits is refused before anything runs.
#[test]
#[ignore = "needs a CUDA device"]
fn steps_allocate_nothing_and_refuse_a_batch_over_the_limits() {
    let gpu = require_gpu::gpu();
    let shape = KgeShape { model: KgeModel::ComplEx, dim: 8, relations: LIMITS.relations };
    let hyper = KgeHyper::new(0.05);
    let mut rng = Rng::new(4);
    let batches = epoch(&mut rng);
    let rel = rng.params(shape.relations, shape.dim);
    let stream = gpu.new_stream().unwrap();
    let mut k = ChunkedKernels::new(&gpu, stream.clone(), shape, LIMITS, &rel).unwrap();
    let mut rows = stream.clone_htod(&rng.params(LIMITS.max_rows, shape.dim)).unwrap();
    let ids: Vec<ChunkedIds> =
        batches.iter().map(|b| ChunkedIds::build(b, &shape, &LIMITS).unwrap()).collect();
    k.step(&ids[0], &mut rows, &hyper).unwrap();
    stream.synchronize().unwrap();
    let (free, _) = cudarc::driver::result::mem_get_info().unwrap();
    for i in 0..50 {
        k.step(&ids[i % ids.len()], &mut rows, &hyper).unwrap();
    }
    stream.synchronize().unwrap();
    let (after, _) = cudarc::driver::result::mem_get_info().unwrap();
    assert_eq!(after, free, "device memory moved over 50 steps");
    let bigger = ChunkLimits { max_positives: 8, ..LIMITS };
    let big = ChunkedIds::build(&batches[0], &shape, &bigger).unwrap();
    assert!(k.step(&big, &mut rows, &hyper).is_err(), "ids packed for other limits");
}

/// The chunked step as the pipeline's device model ([`ChunkedDeviceModel`]) inside the engine:
/// Oac at several depths and read-aheads equals Sync bit for bit on the GPU (entity table and
/// relations), and Async does not.
#[test]
#[ignore = "needs a CUDA device"]
fn the_chunked_device_model_in_the_pipeline_oac_equals_sync() {
    use ordo::engine::simulation::Simulation;
    use ordo::engine::{AsyncWrite, Batch, EngineConfig, Mode};
    use ordo::row_store::RowStore;
    use ordo_gpu::cache::CacheConfig;
    use ordo_gpu::chunked_device::ChunkedDeviceModel;
    use ordo_gpu::pipeline::{Pipeline, PipelineConfig};
    use ordo_gpu::workload::random_chunked_batches;

    let gpu = require_gpu::gpu();
    let shape = KgeShape { model: KgeModel::ComplEx, dim: 8, relations: LIMITS.relations };
    let width = 2 * shape.dim;
    let entities = 40;
    let b = random_chunked_batches(&mut Rng::new(3), 60, entities, &shape, &LIMITS).unwrap();
    let mut rng = Rng::new(31);
    let (table, rel) = (rng.params(entities, shape.dim), rng.params(shape.relations, shape.dim));
    let run = |depth: usize, ahead: usize, mode: Mode| {
        let live = 2 * depth + ahead + 2;
        let cache = (mode == Mode::Oac)
            .then(|| CacheConfig::for_in_flight(live, LIMITS.max_rows, width).unwrap());
        let config =
            PipelineConfig { depth, max_rows: LIMITS.max_rows, width, cache, timing: false };
        let compute = gpu.new_stream().unwrap();
        let kernels = ChunkedKernels::new(&gpu, compute.clone(), shape, LIMITS, &rel).unwrap();
        let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss: KgeLoss::Softmax };
        let model = ChunkedDeviceModel { kernels, hyper };
        let mut p = Pipeline::new(&gpu, config, compute).unwrap();
        let store = RowStore::from_values(entities, width, &table).unwrap();
        let batches = b.iter().enumerate().map(|(i, (rows, ids))| Batch {
            id: i as u64,
            rows: rows.clone(),
            data: ids.clone(),
        });
        let engine = EngineConfig::new(mode).threads(1, 2).depths(ahead.max(1), depth);
        let sim =
            Simulation::with_device(engine, Box::new(&mut p), model, &store, batches).unwrap();
        let (model, report) = sim.run(&[0; 4096]).unwrap();
        assert_eq!(report.order.len(), b.len());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (bits(&store.snapshot()), bits(&model.kernels.relations().unwrap()))
    };
    let sync = run(1, 0, Mode::Sync);
    for (depth, ahead) in [(1, 3), (2, 0), (4, 4)] {
        assert_eq!(run(depth, ahead, Mode::Oac), sync, "Oac depth {depth} read-ahead {ahead}");
    }
    let asy = run(4, 4, Mode::Async(AsyncWrite::Overwrite));
    assert_ne!(asy.0, sync.0, "Async must lose updates on overlapping batches");
}
