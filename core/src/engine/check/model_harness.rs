//! The pipeline on a model checker's threads (built only under `--cfg ordo_loom` or
//! `--cfg ordo_shuttle`; the threads, mutexes and atomics are the checker's, chosen in
//! `crate::sync`): the real reader, device and writer tasks over the real primitives, driven by
//! the same [`driver`](crate::engine::driver) and [`Sequencer`] as the threaded engine, with mutex queues instead of
//! crossbeam channels (the checkers cannot see inside those) and no `thread::scope` (loom has
//! none). Used by `core/tests/loom_engine.rs` and `core/tests/shuttle_engine.rs`.

use crate::engine::arrivals::Arrivals;
use crate::engine::context::RunCtx;
use crate::engine::driver::{ModelThreads, admit, block_on, read_batch, write_batch};
use crate::engine::reader::ReadBatch;
use crate::engine::sequencer::{Sequencer, Stamped};
use crate::engine::stop::StopState;
use crate::engine::{Batch, CpuDevice, DeviceQueue, EngineConfig, Model, RunReport};
use crate::storage::RowStorage;
use crate::sync::{Arc, Condvar, Mutex, thread};
use std::collections::VecDeque;
use std::time::Duration;

/// A blocking queue (mutex + condvar): loom parks a waiting thread instead of exploring a spin.
struct Queue<T> {
    items: Mutex<(VecDeque<T>, bool)>,
    ready: Condvar,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue { items: Mutex::new((VecDeque::new(), false)), ready: Condvar::new() }
    }

    fn push(&self, item: T) {
        self.items.lock().expect("queue").0.push_back(item);
        self.ready.notify_all();
    }

    fn close(&self) {
        self.items.lock().expect("queue").1 = true;
        self.ready.notify_all();
    }

    /// The next item, if one is queued now.
    fn try_pop(&self) -> Option<T> {
        self.items.lock().expect("queue").0.pop_front()
    }

    /// The next item, or `None` once the queue is closed and empty.
    fn pop(&self) -> Option<T> {
        let mut g = self.items.lock().expect("queue");
        loop {
            if let Some(item) = g.0.pop_front() {
                return Some(item);
            }
            if g.1 {
                return None;
            }
            g = self.ready.wait(g).expect("queue");
        }
    }
}

/// Run `batches` through the pipeline: one reader thread per entry of `readers` (the input
/// positions it reads, in order; increasing, as the engine's FIFO feed hands them out),
/// `writers` writer threads, the device on the calling thread, taking the batches in
/// submission order through the engine's reorder buffer (`Arrivals`) and publishing its
/// read-ahead as the threaded device does. Panics on any stage error (a loom model treats that
/// as a failure).
pub fn run<M: Model, S: RowStorage + ?Sized>(
    config: &EngineConfig,
    model: M,
    store: &'static S,
    batches: Vec<Batch<M::Data>>,
    readers: &[Vec<usize>],
    writers: usize,
) -> (M, RunReport) {
    let device = CpuDevice::new();
    run_on(config, device, model, store, batches, readers, writers)
}

/// [`run`] on `device` (e.g. a `DeferredCpuDevice` holding batches in flight).
pub fn run_on<M: Model, S: RowStorage + ?Sized, Q: DeviceQueue<M>>(
    config: &EngineConfig,
    mut device: Q,
    mut model: M,
    store: &'static S,
    batches: Vec<Batch<M::Data>>,
    readers: &[Vec<usize>],
    writers: usize,
) -> (M, RunReport) {
    let cx = RunCtx::new::<M::Error>(store, config).expect("ctx");
    let cx = Arc::new(cx);
    let n = batches.len();
    let mut pending: Vec<Option<Batch<M::Data>>> = batches.into_iter().map(Some).collect();
    let input: Arc<Queue<ReadBatch<M::Data>>> = Arc::new(Queue::new());
    let output: Arc<Queue<Stamped>> = Arc::new(Queue::new());
    let stop = Arc::new(StopState::<M::Error>::default());
    let mut handles = Vec::new();
    for assigned in readers {
        let mine: Vec<_> =
            assigned.iter().map(|&p| (p, pending[p].take().expect("read once"))).collect();
        let (cx, input, stop) = (cx.clone(), input.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            for (p, batch) in mine {
                match block_on(read_batch(&cx, p, batch, None, &stop, &ModelThreads)) {
                    Ok(Some(staged)) => input.push(staged),
                    Ok(None) => return,
                    Err(cause) => panic!("reader: {cause}"),
                }
            }
        }));
    }
    for _ in 0..writers {
        let (cx, output, stop) = (cx.clone(), output.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            while let Some(stamped) = output.pop() {
                assert!(
                    block_on(write_batch(&cx, stamped, None, &stop, &ModelThreads)),
                    "writer failed"
                );
            }
        }));
    }
    let mut seq = Sequencer::default();
    device.reset().expect("device reset");
    let depth = device.depth();
    let collect_one = |seq: &mut Sequencer, device: &mut Q| {
        let (stamped, failed) = seq.collect(&cx, device, &stop).expect("device collect");
        assert!(failed.is_none(), "the CPU cache insert cannot fail");
        output.push(stamped);
    };
    let mut arrivals = Arrivals::default();
    for position in 0..n {
        // As the threaded device: take what the readers finished, and collect the batches on
        // the device while the turn's batch has not come (their slots may be the ones it needs).
        let job = loop {
            while let Some(job) = input.try_pop() {
                arrivals.arrive(job);
            }
            if let Some(job) = arrivals.take(position) {
                break job;
            }
            if seq.in_flight() > 0 {
                collect_one(&mut seq, &mut device);
            } else {
                arrivals.arrive(input.pop().expect("a reader pushes every batch"));
            }
        };
        cx.set_taken(position + 1);
        while seq.must_collect(&cx, depth) {
            collect_one(&mut seq, &mut device);
        }
        assert!(block_on(admit(&seq, &cx, &stop, &ModelThreads)), "stopped");
        seq.submit(&cx, &mut device, &mut model, job, None, false).expect("device");
    }
    while seq.in_flight() > 0 {
        collect_one(&mut seq, &mut device);
    }
    output.close();
    for h in handles {
        h.join().expect("stage thread");
    }
    if let Some((cause, _)) = stop.take() {
        panic!("pipeline stopped: {cause}");
    }
    let report = RunReport {
        mode: config.mode,
        order: seq.order,
        ts_base: cx.base,
        cache_peak: seq.cache_peak,
        rows_validated: seq.rows_validated,
        rows_replaced: seq.rows_replaced,
        elapsed: Duration::ZERO,
    };
    (model, report)
}
