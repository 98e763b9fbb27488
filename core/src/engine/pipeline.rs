//! The threaded engine: parallel readers, the device on the caller's thread, parallel writers,
//! bounded queues, all inside one `thread::scope` so no thread outlives [`Engine::run`].

use super::context::{Progress, RunCtx, at};
use super::device::{Sequencer, Stamped, panic_message};
use super::reader::{ReadTask, Staged};
use super::writer::WriteTask;
use super::{
    Batch, CpuDevice, DeviceStage, EngineConfig, EngineError, HookPoint, Mode, Model, RunReport,
    StageHook, StopCause, prepare,
};
use crate::store::RowStore;
use crate::sync::{AtomicBool, Mutex, Ordering, thread};
use crossbeam_channel::{RecvTimeoutError, SendTimeoutError, bounded, unbounded};
use crossbeam_utils::Backoff;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// How long a blocked stage waits before it re-checks the stop flag: bounds shutdown latency.
const POLL: Duration = Duration::from_millis(2);

/// The OAC pipeline engine. Build once, [`run`](Engine::run) once per epoch.
#[derive(Debug, Clone)]
pub struct Engine {
    config: EngineConfig,
}

/// The first failure of a run, and the stamped batches whose writes did not all land.
#[derive(Default)]
struct StopState {
    stopped: AtomicBool,
    cause: Mutex<Option<StopCause>>,
    unwritten: Mutex<Vec<(u64, u64)>>,
}

impl StopState {
    fn fail(&self, cause: StopCause) {
        let mut c = self.cause.lock().unwrap_or_else(|e| e.into_inner());
        c.get_or_insert(cause);
        // Release: pairs with the Acquire in `is_stopped`; the cause is behind the mutex anyway.
        self.stopped.store(true, Ordering::Release);
    }

    fn unwritten(&self, ts: u64, id: u64) {
        self.unwritten.lock().unwrap_or_else(|e| e.into_inner()).push((ts, id));
    }

    fn is_stopped(&self) -> bool {
        // Acquire: a stage that sees the flag stops; nothing else is read through it.
        self.stopped.load(Ordering::Acquire)
    }
}

impl Engine {
    /// An engine with `config` (checked).
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(Engine { config })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Train `model` on `batches` against `store`, on the CPU device.
    ///
    /// Every batch is checked before anything runs (an error leaves the store untouched). On
    /// success the report holds the computation order; in `Oac`, `Sync` and `Bounded(1)` the
    /// store and `model.dense()` then equal [`replay`](super::replay) of that order.
    pub fn run<M: Model>(
        &self,
        model: &mut M,
        store: &RowStore,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<RunReport, EngineError> {
        self.run_with(&mut CpuDevice::new(), model, store, batches)
    }

    /// [`run`](Engine::run) with a caller-supplied device stage (e.g. a CUDA one).
    pub fn run_with<M: Model, S: DeviceStage<M>>(
        &self,
        device: &mut S,
        model: &mut M,
        store: &RowStore,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<RunReport, EngineError> {
        let batches = prepare(model, store, batches)?;
        let cx = RunCtx::new(store, self.config.mode, self.config.in_flight_slots())?;
        device.reset();
        let stop = StopState::default();
        let mut seq = Sequencer::default();
        let start = Instant::now();
        if self.config.mode == Mode::Sync {
            self.run_inline(&cx, device, model, batches, &mut seq, &stop);
        } else {
            self.run_threads(&cx, device, model, batches, &mut seq, &stop);
        }
        let elapsed = start.elapsed();
        device.reset();
        if let Some(cause) = stop.cause.into_inner().unwrap_or_else(|e| e.into_inner()) {
            let mut unwritten = stop.unwritten.into_inner().unwrap_or_else(|e| e.into_inner());
            unwritten.sort_unstable();
            let positions = seq.order.iter().map(|s| s.position).collect();
            return Err(EngineError::Stopped { cause, stamped: seq.next_ts, positions, unwritten });
        }
        Ok(RunReport {
            mode: self.config.mode,
            order: seq.order,
            ts_base: cx.base,
            cache_peak: seq.cache_peak,
            rows_validated: seq.rows_validated,
            rows_replaced: seq.rows_replaced,
            elapsed,
        })
    }

    /// `Sync`: one batch at a time on the caller's thread, through the same stage code.
    fn run_inline<M: Model, S: DeviceStage<M>>(
        &self,
        cx: &RunCtx<'_>,
        device: &mut S,
        model: &mut M,
        batches: Vec<Batch<M::Data>>,
        seq: &mut Sequencer,
        stop: &StopState,
    ) {
        let hook = self.config.hook.as_ref();
        for (position, batch) in batches.into_iter().enumerate() {
            let id = batch.id;
            let staged = match guarded("reader", id, || read_batch(cx, position, batch, hook, stop))
            {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(cause) => return stop.fail(cause),
            };
            let stamped = match seq.process(cx, device, model, staged, hook) {
                Ok(s) => s,
                Err(cause) => return stop.fail(cause),
            };
            if !write_batch(cx, stamped, hook, stop) {
                return;
            }
        }
    }

    fn run_threads<M: Model, S: DeviceStage<M>>(
        &self,
        cx: &RunCtx<'_>,
        device: &mut S,
        model: &mut M,
        batches: Vec<Batch<M::Data>>,
        seq: &mut Sequencer,
        stop: &StopState,
    ) {
        let hook = self.config.hook.as_ref();
        let (feed_tx, feed_rx) = unbounded();
        for item in batches.into_iter().enumerate() {
            feed_tx.send(item).expect("receiver alive");
        }
        drop(feed_tx);
        let (in_tx, in_rx) = bounded::<Staged<M::Data>>(self.config.input_depth);
        let (out_tx, out_rx) = bounded::<Stamped>(self.config.output_depth);
        thread::scope(|s| {
            for _ in 0..self.config.readers {
                let (feed_rx, in_tx) = (feed_rx.clone(), in_tx.clone());
                s.spawn(move || {
                    while !stop.is_stopped() {
                        let Ok((position, batch)) = feed_rx.try_recv() else { return };
                        let id = batch.id;
                        let staged = match guarded("reader", id, || {
                            read_batch(cx, position, batch, hook, stop)
                        }) {
                            Ok(Some(s)) => s,
                            Ok(None) => return,
                            Err(cause) => return stop.fail(cause),
                        };
                        let mut item = staged;
                        loop {
                            match in_tx.send_timeout(item, POLL) {
                                Ok(()) => break,
                                Err(SendTimeoutError::Timeout(back)) if !stop.is_stopped() => {
                                    item = back
                                }
                                Err(_) => return,
                            }
                        }
                    }
                });
            }
            drop(in_tx);
            for _ in 0..self.config.writers {
                let out_rx = out_rx.clone();
                // Writers drain every stamped batch, even after a stop, so each is written or
                // reported; they end when the device drops the sender.
                s.spawn(move || {
                    for stamped in out_rx.iter() {
                        write_batch(cx, stamped, hook, stop);
                    }
                });
            }
            drop(out_rx);
            // The device runs here, on the caller's thread: it owns `&mut model`.
            'device: loop {
                if stop.is_stopped() {
                    break;
                }
                let job = match in_rx.recv_timeout(POLL) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                let backoff = Backoff::new();
                while !seq.admits(cx) {
                    if stop.is_stopped() {
                        break 'device;
                    }
                    snooze(&backoff);
                }
                let id = job.id;
                let res =
                    catch_unwind(AssertUnwindSafe(|| seq.process(cx, device, model, job, hook)));
                match res {
                    Ok(Ok(stamped)) => {
                        if out_tx.send(stamped).is_err() {
                            // Every writer is gone (they only leave when the sender drops, so
                            // this is unreachable short of a writer thread dying).
                            stop.fail(StopCause::StageFailed {
                                stage: "device",
                                batch_id: id,
                                message: "no writer left".into(),
                            });
                            break;
                        }
                    }
                    Ok(Err(cause)) => {
                        stop.fail(cause);
                        break;
                    }
                    Err(p) => {
                        stop.fail(StopCause::StageFailed {
                            stage: "device",
                            batch_id: id,
                            message: panic_message(&*p),
                        });
                        break;
                    }
                }
            }
            // Readers blocked on a full queue see the disconnect; writers drain and end.
            drop(in_rx);
            drop(out_tx);
        });
    }
}

/// Read one batch to completion; `Ok(None)` if the run stopped while it waited for a slot.
fn read_batch<D>(
    cx: &RunCtx<'_>,
    position: usize,
    batch: Batch<D>,
    hook: Option<&StageHook>,
    stop: &StopState,
) -> Result<Option<Staged<D>>, StopCause> {
    at(hook, HookPoint::ReadStart, batch.id)?;
    let mut task = ReadTask::new(position, batch, cx.width);
    let backoff = Backoff::new();
    loop {
        match task.advance(cx, hook)? {
            Progress::Done => return Ok(Some(task.into_staged(cx.mode))),
            Progress::Progressed => backoff.reset(),
            Progress::Blocked if stop.is_stopped() => return Ok(None),
            Progress::Blocked => snooze(&backoff),
        }
    }
}

/// Write one stamped batch to completion; on failure record it as unwritten and stop the run.
/// Returns whether it was fully written.
fn write_batch(
    cx: &RunCtx<'_>,
    stamped: Stamped,
    hook: Option<&StageHook>,
    stop: &StopState,
) -> bool {
    let (ts, id) = (stamped.ts, stamped.id);
    let res = guarded("writer", id, || {
        at(hook, HookPoint::WriteStart, id)?;
        let mut task = WriteTask::new(stamped);
        while task.advance(cx, hook)? != Progress::Done {}
        Ok(())
    });
    match res {
        Ok(()) => true,
        Err(cause) => {
            stop.unwritten(ts, id);
            stop.fail(cause);
            false
        }
    }
}

/// Run `f`, turning a panic into a stage failure.
fn guarded<T>(
    stage: &'static str,
    batch_id: u64,
    f: impl FnOnce() -> Result<T, StopCause>,
) -> Result<T, StopCause> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(StopCause::StageFailed { stage, batch_id, message: panic_message(&*p) })
    })
}

/// Spin, then yield, then sleep briefly: a blocked stage must not starve the others on 2 cores.
fn snooze(backoff: &Backoff) {
    if backoff.is_completed() {
        std::thread::sleep(Duration::from_micros(50));
    } else {
        backoff.snooze();
    }
}
