//! loom: the whole OAC pipeline (2 readers, the device, 2 writers = loom's 5 threads) on 3
//! batches over 2 rows, under every interleaving within the preemption bound: the store and
//! the dense parameters equal the sequential replay of the recorded computation order.
#![cfg(loom)]

use ordo::engine::testing::MixModel;
use ordo::engine::{Batch, EngineConfig, Mode, Model, loom_harness, replay};
use ordo::store::RowStore;

fn batches() -> Vec<Batch<f32>> {
    vec![
        Batch { id: 0, rows: vec![0, 1], data: 1.0 },
        Batch { id: 1, rows: vec![1], data: 2.0 },
        Batch { id: 2, rows: vec![0], data: 3.0 },
    ]
}

fn check(mode: Mode) {
    loom::model(move || {
        let store: &'static RowStore =
            Box::leak(Box::new(RowStore::from_fn(2, 1, |r, _| r as f32 + 0.5)));
        let initial = store.snapshot();
        let mut config = EngineConfig::new(mode);
        config.max_in_flight = Some(3);
        let (model, report) = loom_harness::run(
            &config,
            MixModel::new(1),
            store,
            batches(),
            &[vec![0, 2], vec![1]],
            2,
        );
        let mut table = initial;
        let mut fresh = MixModel::new(1);
        replay(&mut fresh, &mut table, &batches(), &report.positions()).unwrap();
        assert_eq!(store.snapshot(), table, "order {:?}", report.batch_ids());
        assert_eq!(model.dense(), fresh.dense());
    });
}

#[test]
fn oac_pipeline_equals_the_replay_under_all_interleavings() {
    check(Mode::Oac);
}
