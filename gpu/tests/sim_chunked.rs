//! The chunked KGE step inside the pipeline's orchestration, without a GPU: its host port
//! ([`chunked_step_ids`], the spec of the device step) as the model of the pipeline's host twin
//! ([`SimQueue`]), driven by the engine in the deterministic simulation with readers first (the
//! stalest schedule). Oac at every depth 1–8 equals Sync bit for bit (entity table and
//! relations), with one host wait per batch; Async does not. The batches are packed ids
//! ([`ChunkedIds`], the device model's data) of varying size in one fixed layout, short ones
//! included.

#![cfg(not(ordo_loom))]

use ordo::engine::simulation::Simulation;
use ordo::engine::{AsyncWrite, Batch, BatchRows, EngineConfig, Mode, Model, StepError};
use ordo::row_store::RowStore;
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::kge::{
    ChunkLimits, ChunkedIds, KgeHyper, KgeLoss, KgeModel, KgeShape, chunked_step_ids,
};
use ordo_gpu::queue::{QueueCounts, SimQueue};
use ordo_gpu::workload::{Rng, random_chunked_batches};

const ENTITIES: usize = 40;
const SHAPE: KgeShape = KgeShape { model: KgeModel::ComplEx, dim: 4, relations: 3 };
const WIDTH: usize = 2 * SHAPE.dim;
const LIMITS: ChunkLimits =
    ChunkLimits { max_positives: 5, chunk: 2, negatives: 2, max_rows: 12, relations: 3 };
const BATCHES: usize = 60;

/// The host port as the pipeline's model; the relations are its dense state.
struct Port {
    relations: Vec<f32>,
    hyper: KgeHyper,
}

impl Model for Port {
    type Data = ChunkedIds;
    type Error = StepError;
    fn row_width(&self) -> usize {
        WIDTH
    }
    fn step(&mut self, ids: &ChunkedIds, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        chunked_step_ids(&SHAPE, &self.hyper, ids, rows.values_mut(), &mut self.relations)
            .map_err(StepError::new)?;
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        self.relations.clone()
    }
}

fn batches(seed: u64) -> Vec<(Vec<u64>, ChunkedIds)> {
    random_chunked_batches(&mut Rng::new(seed), BATCHES, ENTITIES, &SHAPE, &LIMITS).unwrap()
}

/// Every batch through a [`SimQueue`] of `depth` slots in `mode`, `ahead` batches read ahead,
/// readers first; the table, the relations' bits and the queue's counts.
fn run(
    b: &[(Vec<u64>, ChunkedIds)],
    depth: usize,
    ahead: usize,
    mode: Mode,
) -> (Vec<u32>, Vec<u32>, QueueCounts, u64) {
    let live = 2 * depth + ahead + 2;
    let cache = (mode == Mode::Oac)
        .then(|| CacheConfig::for_in_flight(live, LIMITS.max_rows, WIDTH).unwrap());
    let mut q = SimQueue::new(depth, LIMITS.max_rows, WIDTH, cache).unwrap();
    let mut rng = Rng::new(99);
    let store = RowStore::from_values(ENTITIES, WIDTH, &rng.params(ENTITIES, SHAPE.dim)).unwrap();
    let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss: KgeLoss::Softmax };
    let model = Port { relations: rng.params(SHAPE.relations, SHAPE.dim), hyper };
    let batches = b.iter().enumerate().map(|(i, (rows, ids))| Batch {
        id: i as u64,
        rows: rows.clone(),
        data: ids.clone(),
    });
    // One reader: the computation order is the order of the batches, as in Sync.
    let config = EngineConfig::new(mode).threads(1, 2).depths(ahead.max(1), depth);
    let sim = Simulation::with_device(config, Box::new(&mut q), model, &store, batches).unwrap();
    let schedule: Vec<u8> =
        (0..3000).map(|i| if i % 7 == 0 { (i % 251) as u8 } else { 0 }).collect();
    let (model, report) = sim.run(&schedule).unwrap();
    assert_eq!(report.order.len(), BATCHES);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (bits(&store.snapshot()), bits(&model.relations), q.counts(), report.rows_replaced)
}

#[test]
fn the_chunked_step_in_the_pipeline_twin_oac_equals_sync_at_every_depth() {
    for seed in [1, 2] {
        let b = batches(seed);
        let (table, rel, _, _) = run(&b, 1, 0, Mode::Sync);
        for depth in 1..=8 {
            let ahead = [3, 0, 2, 4, 1][depth % 5];
            let (t, r, counts, replaced) = run(&b, depth, ahead, Mode::Oac);
            let case = format!("seed {seed} depth {depth} read-ahead {ahead}");
            assert_eq!(t, table, "{case}: entity rows");
            assert_eq!(r, rel, "{case}: relations");
            let n = BATCHES as u64;
            assert_eq!(counts, QueueCounts { batches: n, waits: n }, "{case}: one wait a batch");
            assert!(depth + ahead < 3 || replaced > 0, "{case}: validation replaced no row");
        }
        let (t, _, _, _) = run(&b, 4, 4, Mode::Async(AsyncWrite::Overwrite));
        assert_ne!(t, table, "Async must lose updates on overlapping batches (seed {seed})");
    }
}
