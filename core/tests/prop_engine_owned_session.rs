//! An owned session fed by a caller that holds a lock its model step also takes, as a
//! language binding's caller holds the interpreter lock: for every pipeline shape of `oac`, the caller
//! can always read what the session holds for it (`retained`, `drain_order`) under that lock,
//! and every batch is stamped and written once.
//!
//! The property is freedom from one deadlock: the device thread must never hold the outbox
//! lock while it runs a step (see `publish` in `engine/owned_session.rs`). A deadlock shows as
//! a caller that stops making progress; the test fails then instead of hanging.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

use ordo::engine::{
    Batch, BatchRows, CpuDevice, Engine, EngineConfig, Mode, Model, StepError, TrySubmitError,
};
use ordo::row_store::RowStore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const ROWS: u64 = 16;
/// Batches per pipeline shape, at most: on an idle 2-core machine the deadlock, when the code
/// has it, comes within the first few thousand.
const BATCHES: u64 = 50_000;
/// Wall time per pipeline shape, at most, so the test stays short on a loaded machine (where a
/// caller that spins for the lock the step needs makes slow progress).
const BUDGET: Duration = Duration::from_secs(2);
/// A caller that offers nothing for this long is stuck: the same loop offers over 100,000
/// batches a second on an idle 2-core machine.
const STALLED: Duration = Duration::from_secs(20);

/// A binding's model: its step runs only while it holds the binding's global lock.
struct Locked {
    gil: Arc<Mutex<()>>,
}

impl Model for Locked {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        1
    }
    fn step(&mut self, x: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let _held = self.gil.lock().unwrap_or_else(PoisonError::into_inner);
        rows.values_mut().iter_mut().for_each(|v| *v += x);
        Ok(())
    }
}

/// Run one-row batches (row `id % ROWS`) through a session of `config` for `BATCHES` batches or
/// `BUDGET`, the caller reading the outbox under the global lock before each offer and letting
/// the lock go only to offer the batch. Returns the batches submitted, those the caller saw
/// stamped and the table, or `None` if the caller stopped making progress.
fn run(config: EngineConfig) -> Option<(u64, u64, Vec<f32>)> {
    let gil = Arc::new(Mutex::new(()));
    let store = Arc::new(RowStore::zeros(ROWS as usize, 1));
    let engine = Engine::new(config).unwrap();
    let mut session =
        engine.start(CpuDevice::new(), Locked { gil: gil.clone() }, store.clone()).unwrap();
    let offered = Arc::new(AtomicU64::new(0));
    let progress = offered.clone();
    let (done, finished) = std::sync::mpsc::channel();
    // Not joined: when the property fails this thread is stuck for good, and the test reports
    // the failure instead of waiting for it.
    std::thread::spawn(move || {
        let (mut stamped, mut submitted, started) = (0, 0, Instant::now());
        for id in (0..BATCHES).take_while(|_| started.elapsed() < BUDGET) {
            let mut batch = Batch { id, rows: vec![id % ROWS], data: 1.0 };
            loop {
                let held = gil.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = session.retained();
                stamped += session.drain_order().len() as u64;
                drop(held);
                // Relaxed: a progress count read by the watchdog only; nothing is published
                // through it.
                progress.fetch_add(1, Ordering::Relaxed);
                match session.try_submit(batch) {
                    Ok(()) => {
                        submitted += 1;
                        break;
                    }
                    Err(TrySubmitError::Full(back)) => batch = back,
                    Err(TrySubmitError::Failed(e)) => panic!("{e}"),
                }
            }
        }
        stamped += session.finish().unwrap().order.len() as u64;
        let _ = done.send((submitted, stamped));
    });
    let (mut seen, mut since) = (0, Instant::now());
    loop {
        match finished.recv_timeout(Duration::from_millis(100)) {
            Ok((submitted, stamped)) => return Some((submitted, stamped, store.snapshot())),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the caller panicked"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        // Relaxed: as above.
        let now = offered.load(Ordering::Relaxed);
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() > STALLED {
            return None;
        }
    }
}

#[test]
fn a_caller_holding_the_lock_its_step_takes_always_reads_the_outbox() {
    let shapes = [(Mode::Oac, 1, 1), (Mode::Oac, 2, 2), (Mode::Oac, 2, 4), (Mode::Oac, 1, 4)];
    for (mode, threads, depth) in shapes {
        let config = EngineConfig::new(mode).threads(threads, threads).depths(depth, depth);
        let Some((submitted, stamped, table)) = run(config) else {
            panic!(
                "{mode:?}, {threads} readers and writers, depth {depth}: the caller and the \
                 device thread deadlocked (no progress in {STALLED:?})"
            );
        };
        assert!(submitted > 0, "{mode:?}: nothing submitted");
        assert_eq!(stamped, submitted, "{mode:?}: every batch stamped once");
        let written = |r: u64| (submitted / ROWS + u64::from(r < submitted % ROWS)) as f32;
        assert!(
            table.iter().zip(0..).all(|(&v, r)| v == written(r)),
            "{mode:?}: every batch written once"
        );
    }
}

/// `submit_timeout` on a pipeline that stays full (every step waits for the lock the caller
/// holds) waits its timeout in the channel and hands the batch back; once the steps may run,
/// the same batch goes in and every batch is stamped and written once.
#[test]
fn submit_timeout_hands_the_batch_back_when_the_pipeline_stays_full() {
    let gil = Arc::new(Mutex::new(()));
    let store = Arc::new(RowStore::zeros(ROWS as usize, 1));
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(1, 1).depths(1, 1)).unwrap();
    let mut session =
        engine.start(CpuDevice::new(), Locked { gil: gil.clone() }, store.clone()).unwrap();
    let held = gil.lock().unwrap();
    let timeout = Duration::from_millis(20);
    let mut id = 0;
    let back = loop {
        let batch = Batch { id, rows: vec![id % ROWS], data: 1.0 };
        let asked = Instant::now();
        match session.submit_timeout(batch, timeout) {
            Ok(()) => id += 1,
            Err(TrySubmitError::Full(back)) => {
                assert!(asked.elapsed() >= timeout, "handed back after {:?}", asked.elapsed());
                break back;
            }
            Err(TrySubmitError::Failed(e)) => panic!("{e}"),
        }
        assert!(id < 100, "a pipeline of depth one took {id} batches while its step waits");
    };
    assert_eq!(back.id, id, "the batch offered comes back");
    drop(held);
    session.submit_timeout(back, Duration::from_secs(60)).unwrap();
    let order = session.finish().unwrap().batch_ids();
    assert_eq!(order, (0..=id).collect::<Vec<_>>());
    assert_eq!(store.snapshot().iter().sum::<f32>(), (id + 1) as f32);
}
