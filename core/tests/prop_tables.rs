//! Several tables under one engine ([`ordo::tables::Tables`]) keep the engine's claim: an oac
//! run over tables of different widths equals the sequential replay of its computation order,
//! bit for bit, table by table, and a narrower table's padding never reaches it.
//!
//! The step mixes every row of the batch with every other (a shared sum scaled into each row),
//! so the order of any two batches that share a row changes the result: an engine that kept a
//! stale row or applied two batches out of their stamps would differ from the replay.

use ordo::engine::{Batch, BatchRows, Engine, EngineConfig, Mode, Model, StepError, replay_into};
use ordo::row_store::RowStore;
use ordo::storage::RowStorage;
use ordo::tables::Tables;
use proptest::prelude::*;
use std::sync::Arc;

/// A step over [`Tables`]: reads each table's rows through [`Tables::split`], and also
/// scribbles on the padding columns (which must be dropped).
struct Mix(Arc<Tables>);

impl Model for Mix {
    type Data = f32;
    type Error = StepError;

    fn row_width(&self) -> usize {
        self.0.width()
    }

    fn step(&mut self, lr: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        // Padding: whatever the step leaves there must not reach a table.
        rows.values_mut().iter_mut().for_each(|v| *v += 1000.0);
        let mut split = self.0.split(rows).map_err(StepError::new)?;
        for t in &mut split {
            for i in 0..t.len() {
                t.row_mut(i).iter_mut().for_each(|v| *v -= 1000.0);
            }
        }
        let sum: f32 = split.iter().flat_map(|t| (0..t.len()).map(|i| t.row(i)[0])).sum();
        for t in &mut split {
            for i in 0..t.len() {
                let k = t.ids()[i] as f32;
                t.row_mut(i).iter_mut().enumerate().for_each(|(c, v)| {
                    *v = *v * 0.9 + lr * (sum - k) * (c as f32 + 1.0).recip();
                });
            }
        }
        Ok(())
    }
}

fn tables(shapes: &[(usize, usize)]) -> Arc<Tables> {
    let parts = shapes
        .iter()
        .enumerate()
        .map(|(k, &(rows, width))| {
            let store = RowStore::from_fn(rows, width, |r, c| (k * 100 + r * 10 + c) as f32 * 0.01);
            (format!("t{k}"), Arc::new(store) as Arc<dyn RowStorage>)
        })
        .collect();
    Arc::new(Tables::new(parts).unwrap())
}

/// Each table's `(rows, width)`.
type Shapes = Vec<(usize, usize)>;
/// Per batch, the row ids it names in each table.
type Picks = Vec<Vec<Vec<u64>>>;

/// Shapes of two or three tables, and batches naming a few distinct rows of some of them.
fn case() -> impl Strategy<Value = (Shapes, Picks)> {
    prop::collection::vec((1usize..12, 1usize..6), 2..4).prop_flat_map(|shapes| {
        let per_table: Vec<_> = shapes
            .iter()
            .map(|&(rows, _)| prop::collection::btree_set(0..rows as u64, 0..4))
            .collect();
        let batch = per_table.prop_map(|sets| {
            sets.into_iter().map(|s| s.into_iter().collect::<Vec<u64>>()).collect::<Vec<_>>()
        });
        (Just(shapes), prop::collection::vec(batch, 1..24))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn oac_over_tables_equals_the_replay_of_its_order((shapes, picks) in case()) {
        let run = tables(&shapes);
        let names: Vec<String> = run.names().to_vec();
        let batches: Vec<Batch<f32>> = picks
            .iter()
            .enumerate()
            .map(|(id, per)| {
                let parts: Vec<(&str, &[u64])> =
                    names.iter().zip(per).map(|(n, ids)| (n.as_str(), &ids[..])).collect();
                Batch { id: id as u64, rows: run.batch_ids(&parts).unwrap(), data: 0.01 }
            })
            .filter(|b| !b.rows.is_empty())
            .collect();
        let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2).depths(4, 4)).unwrap();
        let report = engine.run(&mut Mix(run.clone()), &*run, batches.clone()).unwrap();

        let twin = tables(&shapes);
        let order: Vec<u64> = report.order.iter().map(|s| s.batch_id).collect();
        replay_into(&mut Mix(twin.clone()), &*twin, &order, |id| batches.iter().find(|b| b.id == id))
            .unwrap();
        for k in 0..shapes.len() {
            let (a, b) = (run.table(k).snapshot().unwrap(), twin.table(k).snapshot().unwrap());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&a), bits(&b), "table {} differs from the replay", k);
            prop_assert!(a.iter().all(|v| v.abs() < 500.0), "padding reached table {}", k);
        }
    }
}
