//! An endless stream: the trainer takes the computation order as it is stamped, never ends an
//! epoch, and the session keeps only what its depths need; the store still equals, bit for
//! bit, the replay of the order it streamed out.

use ordo::engine::{
    Batch, BatchRows, CpuDevice, Engine, EngineConfig, EngineError, Mode, Model, StepError,
    replay_ids,
};
use ordo::row_store::RowStore;

const ROWS: u64 = 64;

/// The user's model: a leaky update with a dense bias, so the result depends on the order.
struct Leaky {
    bias: f32,
}

impl Model for Leaky {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        2
    }
    fn step(&mut self, x: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let b = self.bias;
        rows.values_mut().iter_mut().for_each(|v| *v = 0.9 * *v + x + b);
        self.bias += 0.001 * x;
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        vec![self.bias]
    }
}

/// The user's loader: batch `id`, rebuilt from its id alone (hot rows 0..4 overlap often).
fn batch(id: u64) -> Batch<f32> {
    let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    let mut rows = vec![x % 4, 4 + x % (ROWS - 4), 4 + (x >> 12) % (ROWS - 4)];
    rows.sort_unstable();
    rows.dedup();
    Batch { id, rows, data: (x % 13) as f32 / 16.0 - 0.3 }
}

/// Stream `n` batches through a session that is never finished, draining the order and the
/// completions every `every` submits. Returns the streamed order (ids) and the most records
/// the session kept at any drain.
fn stream(store: &RowStore, model: &mut Leaky, n: u64, every: u64) -> (Vec<u64>, usize) {
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2).depths(4, 4)).unwrap();
    let (mut order, mut peak) = (Vec::new(), 0);
    engine
        .session(&mut CpuDevice::new(), model, store, |s| {
            for id in 0..n {
                s.submit(batch(id))?;
                if id % every == every - 1 {
                    peak = peak.max(s.retained());
                    order.extend(s.drain_order().map(|stamp| stamp.batch_id));
                    let _ = s.completions();
                }
            }
            // The stream ends here: the last stretch comes with the epoch's report.
            order.extend(s.finish()?.batch_ids());
            Ok::<_, EngineError>(())
        })
        .unwrap();
    (order, peak)
}

#[test]
fn retained_records_do_not_grow_with_the_number_of_batches() {
    let every = 64;
    let (short, long) = (1_000, 100_000);
    let (short_order, peak_short) =
        stream(&RowStore::zeros(ROWS as usize, 2), &mut Leaky { bias: 0.0 }, short, every);
    let (long_order, peak_long) =
        stream(&RowStore::zeros(ROWS as usize, 2), &mut Leaky { bias: 0.0 }, long, every);
    // Between two drains the session holds a stamp and a completion per batch of the stretch,
    // plus what fits in the pipeline (two queues of 4, two readers, one batch on the device, a
    // queue of 4 to the writers): never more, however long the stream.
    let bound = 2 * (every as usize + 16);
    assert!(peak_short > 0 && peak_short <= bound, "1k: {peak_short} > {bound}");
    assert!(peak_long <= bound, "100k batches kept {peak_long} records (> {bound}): it grows");
    assert_eq!(short_order.len() as u64, short);
    assert_eq!(long_order.len() as u64, long);
}

#[test]
fn the_streamed_order_replays_to_the_same_store_bit_for_bit() {
    let init = |r: usize, c: usize| (r * 2 + c) as f32 * 0.01;
    let store = RowStore::from_fn(ROWS as usize, 2, init);
    let initial = store.snapshot();
    let mut model = Leaky { bias: 0.0 };
    let (order, _) = stream(&store, &mut model, 5_000, 37);
    assert_eq!(order.len(), 5_000);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..5_000).collect::<Vec<_>>(), "each batch streamed out once");
    let (mut table, mut fresh) = (initial, Leaky { bias: 0.0 });
    replay_ids(&mut fresh, &mut table, &order, |id| Some(batch(id))).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&store.snapshot()), bits(&table));
    assert_eq!(bits(&model.dense()), bits(&fresh.dense()));
}
