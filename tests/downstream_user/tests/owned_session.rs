//! A session the trainer owns across calls: held in the trainer's own struct, moved to another
//! thread once (it is `Send`), fed from an event loop that interleaves `try_submit` with other
//! work, and closed or dropped with every stamped batch written and every thread joined.

use ordo::engine::{
    Batch, BatchRows, Closed, CpuDevice, Engine, EngineConfig, Mode, Model, Observer, OwnedSession,
    Stamp, StepError, TrySubmitError, replay_ids,
};
use ordo::row_store::RowStore;
use std::sync::{Arc, Mutex};

const ROWS: u64 = 32;

/// The user's model: a leaky update with a dense bias, so the result depends on the order.
struct Leaky {
    bias: f32,
}

impl Model for Leaky {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        1
    }
    fn step(&mut self, x: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let b = self.bias;
        rows.values_mut().iter_mut().for_each(|v| *v = 0.8 * *v + x + b);
        self.bias += 0.01 * x;
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        vec![self.bias]
    }
}

fn batch(id: u64) -> Batch<f32> {
    let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 35;
    let (a, b) = (x % 3, 3 + (x >> 7) % (ROWS - 3));
    Batch { id, rows: vec![a, b], data: (x % 11) as f32 / 8.0 - 0.5 }
}

/// The trainer's event loop: it owns the session and, between offers of the next batch, does
/// its other work (here it counts the turns it had to wait and saves the order).
struct Trainer {
    session: OwnedSession<Leaky>,
    saved: Vec<u64>,
    waits: u64,
}

impl Trainer {
    /// One turn of the loop: offer `batch`; hand it back if the pipeline is full.
    fn turn(&mut self, batch: Batch<f32>) -> Option<Batch<f32>> {
        match self.session.try_submit(batch) {
            Ok(()) => None,
            Err(TrySubmitError::Full(back)) => {
                self.waits += 1;
                self.saved.extend(self.session.drain_order().iter().map(|s| s.batch_id));
                std::thread::yield_now();
                Some(back)
            }
            Err(TrySubmitError::Failed(e)) => panic!("{e}"),
        }
    }

    fn run(&mut self, ids: std::ops::Range<u64>) {
        let mut held = None;
        let mut ids = ids.map(batch);
        while let Some(b) = held.take().or_else(|| ids.next()) {
            held = self.turn(b);
        }
    }
}

fn replayed(initial: Vec<f32>, order: &[u64]) -> (Vec<f32>, Vec<f32>) {
    let (mut table, mut fresh) = (initial, Leaky { bias: 0.0 });
    replay_ids(&mut fresh, &mut table, order, |id| Some(batch(id))).unwrap();
    (table, fresh.dense())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn an_event_loop_owns_the_session_across_threads_and_matches_the_replay() {
    let store = Arc::new(RowStore::from_fn(ROWS as usize, 1, |r, _| r as f32 * 0.1));
    let initial = store.snapshot();
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2).depths(2, 2)).unwrap();
    let session = engine.start(CpuDevice::new(), Leaky { bias: 0.0 }, store.clone());
    let mut trainer = Trainer { session: session.unwrap(), saved: Vec::new(), waits: 0 };
    trainer.run(0..500);
    // The trainer moves to another thread with its session (the session is `Send`).
    let trainer = std::thread::spawn(move || {
        trainer.run(500..1_000);
        let report = trainer.session.finish().unwrap();
        trainer.saved.extend(report.batch_ids());
        trainer
    })
    .join()
    .unwrap();
    assert!(trainer.waits > 0, "1000 batches never filled a depth-2 pipeline");
    assert_eq!(trainer.saved.len(), 1_000);
    let (table, dense) = replayed(initial, &trainer.saved);
    assert_eq!(bits(&store.snapshot()), bits(&table), "the store is the replay of the order");
    let Closed { model, report } = trainer.session.close();
    assert!(report.unwrap().order.is_empty(), "nothing submitted after the finish");
    assert_eq!(bits(&model.dense()), bits(&dense), "the model came back with its parameters");
}

#[test]
fn closing_mid_epoch_writes_the_stamped_batches_and_reports_them() {
    let store = Arc::new(RowStore::from_fn(ROWS as usize, 1, |r, _| r as f32 * 0.1));
    let initial = store.snapshot();
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2)).unwrap();
    let mut session = engine.start(CpuDevice::new(), Leaky { bias: 0.0 }, store.clone()).unwrap();
    let mut order = Vec::new();
    for id in 0..300 {
        session.submit(batch(id)).unwrap();
        if id % 50 == 0 {
            order.extend(session.drain_order().iter().map(|s| s.batch_id));
        }
    }
    // No finish: close stops the pipeline; what was stamped is written and reported.
    let Closed { model, report } = session.close();
    order.extend(report.unwrap().batch_ids());
    assert!(!order.is_empty() && order.len() <= 300, "{} stamped", order.len());
    let (table, dense) = replayed(initial, &order);
    assert_eq!(
        bits(&store.snapshot()),
        bits(&table),
        "the store is the replay of the partial order"
    );
    assert_eq!(bits(&model.dense()), bits(&dense));
}

/// The user's record of the order, told by the engine as each batch is stamped.
#[derive(Default)]
struct Recorder(Mutex<Vec<u64>>);

impl Observer for Recorder {
    fn stamped(&self, stamp: &Stamp) {
        self.0.lock().unwrap().push(stamp.batch_id);
    }
}

#[test]
fn dropping_the_session_joins_it_with_the_stamped_batches_written() {
    let store = Arc::new(RowStore::from_fn(ROWS as usize, 1, |r, _| r as f32 * 0.1));
    let initial = store.snapshot();
    let recorder = Arc::new(Recorder::default());
    let config = EngineConfig::new(Mode::Oac).threads(2, 2).observe(recorder.clone());
    let engine = Engine::new(config).unwrap();
    let mut session = engine.start(CpuDevice::new(), Leaky { bias: 0.0 }, store.clone()).unwrap();
    session.submit_all((0..200).map(batch)).unwrap();
    assert_eq!(session.finish().unwrap().order.len(), 200);
    session.submit_all((200..260).map(batch)).unwrap();
    drop(session);
    // Every thread of the session is joined: nothing but this test holds the store now.
    let store = Arc::try_unwrap(store).expect("the dropped session released the store");
    // Every batch stamped before the drop is written: the store is the replay of all of them.
    let order = recorder.0.lock().unwrap().clone();
    assert!(order.len() >= 200, "{}", order.len());
    let (table, _) = replayed(initial, &order);
    assert_eq!(bits(&store.snapshot()), bits(&table));
}
