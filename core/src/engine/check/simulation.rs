//! Deterministic simulation (FoundationDB style): the engine's own stage driver
//! (`engine::driver`, crate-private), scheduled one action at a time by an explicit schedule
//! instead of OS threads.
//!
//! Each reader and writer is the driver's future for its current batch (`read_batch`,
//! `write_batch`), with a `Waiter` that suspends it after every action; the device admits
//! with the driver's `admit` and stamps with its `stamp`. One action is: start a reader on
//! the next batch, advance a reader by one step (wait for the device's read-ahead, register,
//! or read one row, or hand the read batch to the input queue), run the device (move the read
//! batches into its reorder buffer, the engine's `Arrivals`, and stamp the batch whose turn it
//! is, in submission order), start a writer on the next stamped batch, or advance a writer by
//! one step (write one row, finish the ts, or deregister).
//! A schedule is a byte string: each byte picks one of the enabled actions; when it runs out,
//! the first enabled action runs until everything is written. The oracle is
//! [`replay`] of the recorded order. No stage may ever be stuck: if nothing can
//! act before every batch is written, the run fails with a deadlock. After every action the
//! MFT's promise is checked too ([`Simulation::check_invariants`]), and [`FuzzCase::check`]
//! also asks that the recorded order be the submission order.
//!
//! **What it cannot see.** Every action is atomic and sequentially consistent, so a weakened
//! atomic ordering (the read-ahead counter, the MFT, the outstanding set) is loom's to find
//! (`core/tests/loom_engine.rs`); it runs one epoch of one pipeline, so the session's epoch
//! reset of the positions, `submit_inline`, the owned session's device thread and the
//! crossbeam channels' blocking are the property tests' (`core/tests/prop_engine.rs`,
//! `prop_engine_owned_session.rs`, `session.rs`); and a reader that blocks forever (a storage
//! that never returns) is out of its scope, as it is of the engine's.

use crate::engine::arrivals::Arrivals;
use crate::engine::check::deferred_device::DeferredCpuDevice;
use crate::engine::context::RunCtx;
use crate::engine::device_queue::{DeviceQueue, start};
use crate::engine::driver::{Waiter, admit, read_batch, write_batch};
use crate::engine::reader::ReadBatch;
use crate::engine::sequencer::{Sequencer, Stamped};
use crate::engine::stop::StopState;
use crate::engine::{
    Batch, CpuDevice, EngineConfig, EngineError, Mode, Model, RunReport, StepError, StopCause,
    prepare, replay,
};
use crate::row_store::RowStore;
use crate::storage::RowStorage;
use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// One action of the simulated pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Reader `r` takes the next batch.
    StartRead(usize),
    /// Reader `r` does one step.
    Read(usize),
    /// The device moves the queued batches into its reorder buffer, then stamps the batch
    /// whose turn it is (submission order) and submits it, if it has arrived.
    Device,
    /// The device collects its oldest batch in flight and queues it for the writers.
    Collect,
    /// Writer `w` takes the next stamped batch.
    StartWrite(usize),
    /// Writer `w` does one step.
    Write(usize),
}

/// The simulation's [`Waiter`]: every action suspends the stage's future, so one poll is one
/// action; it notes whether that action was blocked (nothing changed).
#[derive(Default)]
struct Stepped {
    blocked: Cell<bool>,
}

impl Waiter for Stepped {
    fn progressed(&self) -> impl Future<Output = ()> {
        self.blocked.set(false);
        YieldOnce(false)
    }
    fn blocked(&self) -> impl Future<Output = ()> {
        self.blocked.set(true);
        YieldOnce(false)
    }
}

/// Pending on the first poll, ready on the second.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Poll `f` once (one action of its stage).
fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// What the stages share: the run's context, the stop state, and the waiter.
struct Shared<'s, S: RowStorage + ?Sized, E> {
    cx: RunCtx<'s, S>,
    stop: StopState<E>,
    waiter: Stepped,
}

/// A stage's driver future for one batch.
type StageFuture<'s, T> = Pin<Box<dyn Future<Output = T> + 's>>;

/// A reader: idle, reading a batch, or holding a read batch until the input queue has room.
enum Reader<'s, D, E> {
    Idle,
    Reading(StageFuture<'s, Result<Option<ReadBatch<D>>, StopCause<E>>>),
    Read(ReadBatch<D>),
}

/// The pipeline's stages and queues, advanced by [`step`](Simulation::step).
pub struct Simulation<'s, M: Model, S: RowStorage + ?Sized = RowStore> {
    shared: Rc<Shared<'s, S, M::Error>>,
    config: EngineConfig,
    model: M,
    device: Box<dyn DeviceQueue<M> + 's>,
    seq: Sequencer,
    feed: VecDeque<(usize, Batch<M::Data>)>,
    readers: Vec<Reader<'s, M::Data, M::Error>>,
    input: VecDeque<ReadBatch<M::Data>>,
    /// Read batches the device holds until their turn.
    arrivals: Arrivals<M::Data>,
    /// Positions the device has taken: the next one it takes.
    taken: usize,
    output: VecDeque<Stamped>,
    writers: Vec<Option<StageFuture<'s, bool>>>,
    /// Rows of each stamped batch, by ts (for the MFT invariant check).
    stamped_rows: Vec<Vec<u64>>,
    /// Every ts below this was checked visible when the finished prefix passed it.
    checked_prefix: u64,
}

impl<'s, M: Model, S: RowStorage + ?Sized> Simulation<'s, M, S> {
    /// A simulation of `config`'s pipeline (its thread counts, depths and mode; the hook is not
    /// used) training `model` on `batches` against `store`, on the CPU device.
    pub fn new(
        config: EngineConfig,
        model: M,
        store: &'s S,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<Self, EngineError<M::Error>> {
        Self::with_device(config, Box::new(CpuDevice::new()), model, store, batches)
    }

    /// [`new`](Simulation::new) on `device` (e.g. a [`DeferredCpuDevice`] with batches in
    /// flight).
    pub fn with_device(
        config: EngineConfig,
        mut device: Box<dyn DeviceQueue<M> + 's>,
        model: M,
        store: &'s S,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<Self, EngineError<M::Error>> {
        start(&mut *device)?;
        config.check()?;
        let batches = prepare(&model, store, batches)?;
        let cx = RunCtx::new(store, &config)?;
        let shared = Rc::new(Shared { cx, stop: StopState::default(), waiter: Stepped::default() });
        Ok(Simulation {
            shared,
            readers: (0..config.readers).map(|_| Reader::Idle).collect(),
            writers: (0..config.writers).map(|_| None).collect(),
            config,
            model,
            device,
            seq: Sequencer::default(),
            feed: batches.into_iter().enumerate().collect(),
            input: VecDeque::new(),
            arrivals: Arrivals::default(),
            taken: 0,
            output: VecDeque::new(),
            stamped_rows: Vec::new(),
            checked_prefix: 0,
        })
    }

    /// Whether every batch is written and every stage idle.
    pub fn is_done(&self) -> bool {
        self.feed.is_empty()
            && self.input.is_empty()
            && self.arrivals.is_empty()
            && self.seq.in_flight() == 0
            && self.output.is_empty()
            && self.readers.iter().all(|r| matches!(r, Reader::Idle))
            && self.writers.iter().all(Option::is_none)
    }

    /// The actions that may be able to act now (a chosen one may still find itself blocked).
    pub fn candidates(&self) -> Vec<Action> {
        let mut a = Vec::new();
        for (r, t) in self.readers.iter().enumerate() {
            match t {
                Reader::Idle if !self.feed.is_empty() => a.push(Action::StartRead(r)),
                Reader::Idle => {}
                _ => a.push(Action::Read(r)),
            }
        }
        let device_has_work = !self.input.is_empty() || self.arrivals.ready(self.taken);
        if device_has_work && !self.seq.must_collect(&self.shared.cx, self.device.depth()) {
            a.push(Action::Device);
        }
        if self.seq.in_flight() > 0 && self.output.len() < self.config.output_depth {
            a.push(Action::Collect);
        }
        for (w, t) in self.writers.iter().enumerate() {
            match t {
                None if !self.output.is_empty() => a.push(Action::StartWrite(w)),
                None => {}
                Some(_) => a.push(Action::Write(w)),
            }
        }
        a
    }

    /// The run's state after a stage failed with `cause`.
    fn stopped(&self, cause: StopCause<M::Error>) -> SimError<M::Error> {
        let unwritten = self.shared.stop.take().map(|(_, u)| u).unwrap_or_default();
        self.stopped_with(cause, unwritten)
    }

    /// The run's state after it stopped with `cause`, leaving batches `unwritten`.
    fn stopped_with(
        &self,
        cause: StopCause<M::Error>,
        unwritten: Vec<(u64, u64)>,
    ) -> SimError<M::Error> {
        SimError::Engine(EngineError::Stopped {
            cause,
            stamped: self.seq.next_ts,
            order: self.seq.order.iter().map(|s| s.batch_id).collect(),
            unwritten,
            // The simulation stops at the failure, with writes still in flight: no prefix.
            prefix: None,
        })
    }

    /// Do `action`. `Ok(false)` if it could not act (nothing changed).
    pub fn step(&mut self, action: Action) -> Result<bool, SimError<M::Error>> {
        let sh = Rc::clone(&self.shared);
        let acted = || !sh.waiter.blocked.get();
        match action {
            Action::StartRead(r) => {
                if !matches!(self.readers[r], Reader::Idle) {
                    return Ok(false);
                }
                let Some((pos, batch)) = self.feed.pop_front() else { return Ok(false) };
                let sh = Rc::clone(&sh);
                self.readers[r] = Reader::Reading(Box::pin(async move {
                    read_batch(&sh.cx, pos, batch, None, &sh.stop, &sh.waiter).await
                }));
                Ok(true)
            }
            Action::Read(r) => match &mut self.readers[r] {
                Reader::Idle => Ok(false),
                Reader::Reading(read) => match poll_once(read.as_mut()) {
                    Poll::Pending => Ok(acted()),
                    Poll::Ready(Ok(Some(staged))) => {
                        self.readers[r] = Reader::Read(staged);
                        Ok(true)
                    }
                    Poll::Ready(Ok(None)) => Err(self.failure("a reader saw a stop".into())),
                    Poll::Ready(Err(cause)) => Err(self.stopped(cause)),
                },
                Reader::Read(_) if self.input.len() >= self.config.input_depth => Ok(false),
                Reader::Read(_) => {
                    let Reader::Read(staged) =
                        std::mem::replace(&mut self.readers[r], Reader::Idle)
                    else {
                        unreachable!("matched above")
                    };
                    self.input.push_back(staged);
                    Ok(true)
                }
            },
            Action::Device => {
                if self.seq.must_collect(&sh.cx, self.device.depth()) {
                    return Ok(false);
                }
                let moved = !self.input.is_empty();
                for job in self.input.drain(..) {
                    self.arrivals.arrive(job);
                }
                if !self.arrivals.ready(self.taken) {
                    return Ok(moved);
                }
                match poll_once(pin!(admit(&self.seq, &sh.cx, &sh.stop, &sh.waiter))) {
                    Poll::Pending => return Ok(moved),
                    Poll::Ready(false) => return Err(self.failure("the device saw a stop".into())),
                    Poll::Ready(true) => {}
                }
                let job = self.arrivals.take(self.taken).expect("checked");
                self.taken += 1;
                sh.cx.set_taken(self.taken);
                let ids = job.ids.clone();
                self.seq
                    .submit(&sh.cx, &mut *self.device, &mut self.model, job, None, false)
                    .map_err(|c| self.stopped(c))?;
                self.stamped_rows.push(ids);
                Ok(true)
            }
            Action::Collect => {
                if self.seq.in_flight() == 0 || self.output.len() >= self.config.output_depth {
                    return Ok(false);
                }
                match self.seq.collect(&sh.cx, &mut *self.device, &sh.stop) {
                    Ok((_, Some(cause))) => Err(self.stopped(cause)),
                    Ok((stamped, None)) => {
                        self.output.push_back(stamped);
                        Ok(true)
                    }
                    Err(_) => {
                        let (cause, unwritten) = sh.stop.take().expect("a failed collect stops");
                        Err(self.stopped_with(cause, unwritten))
                    }
                }
            }
            Action::StartWrite(w) => {
                if self.writers[w].is_some() {
                    return Ok(false);
                }
                let Some(stamped) = self.output.pop_front() else { return Ok(false) };
                let sh = Rc::clone(&sh);
                self.writers[w] = Some(Box::pin(async move {
                    write_batch(&sh.cx, stamped, None, &sh.stop, &sh.waiter).await
                }));
                Ok(true)
            }
            Action::Write(w) => {
                let Some(write) = self.writers[w].as_mut() else { return Ok(false) };
                match poll_once(write.as_mut()) {
                    Poll::Pending => Ok(acted()),
                    Poll::Ready(true) => {
                        self.writers[w] = None;
                        Ok(true)
                    }
                    Poll::Ready(false) => {
                        self.writers[w] = None;
                        let (cause, unwritten) = sh.stop.take().expect("a failed write stops");
                        Err(self.stopped_with(cause, unwritten))
                    }
                }
            }
        }
    }

    /// Check the MFT's promise on the state reached: when the finished prefix passes `ts`, every
    /// row write of `ts` is visible in the store (the row's version is `ts` or newer).
    /// `Err` names the first violation.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        let cx = &self.shared.cx;
        if !cx.mode.timestamped() {
            return Ok(());
        }
        let prefix = cx.mft.prefix();
        while self.checked_prefix < prefix {
            let ts = self.checked_prefix;
            for &row in &self.stamped_rows[ts as usize] {
                let v = cx.store.version(row).map_err(|e| e.to_string())?;
                if cx.local(v).is_none_or(|seen| seen < ts) {
                    return Err(format!("MFT passed ts {ts} but row {row} holds {v:?}"));
                }
            }
            self.checked_prefix += 1;
        }
        Ok(())
    }

    fn failure(&self, message: String) -> SimError<M::Error> {
        SimError::Broken { message, stamped: self.seq.next_ts }
    }

    /// Run to completion: each byte of `schedule` picks an enabled action (`byte % count`; if
    /// it is blocked, the next one that can act); then the first that can act, until done.
    pub fn run(mut self, schedule: &[u8]) -> Result<(M, RunReport), SimError<M::Error>> {
        let mut bytes = schedule.iter();
        while !self.is_done() {
            let cands = self.candidates();
            let start = bytes.next().map_or(0, |b| usize::from(*b) % cands.len().max(1));
            let mut acted = false;
            for k in 0..cands.len() {
                if self.step(cands[(start + k) % cands.len()])? {
                    acted = true;
                    break;
                }
            }
            if let Err(why) = self.check_invariants() {
                return Err(self.failure(format!("invariant violated: {why}")));
            }
            if !acted {
                return Err(self.failure(format!("deadlock: no stage can act ({cands:?})")));
            }
        }
        let report = RunReport {
            mode: self.config.mode,
            order: std::mem::take(&mut self.seq.order),
            ts_base: self.shared.cx.base,
            cache_peak: self.seq.cache_peak,
            rows_validated: self.seq.rows_validated,
            rows_replaced: self.seq.rows_replaced,
            elapsed: Duration::ZERO,
        };
        Ok((self.model, report))
    }
}

/// Why a simulated run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError<E = StepError> {
    /// The engine refused the run or stopped it, as the threaded engine would.
    #[error(transparent)]
    Engine(#[from] EngineError<E>),
    /// The simulation itself found a fault: a deadlock (no stage can act before every batch is
    /// written), a broken invariant, or a stage that saw a stop no failure raised.
    #[error("the simulation broke after stamping {stamped} batches: {message}")]
    Broken {
        /// What it found.
        message: String,
        /// How many batches were stamped by then.
        stamped: u64,
    },
}

/// The outcome of comparing a run with the sequential replay of its recorded order.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Rows whose final bits differ from the replay's.
    pub rows_differing: Vec<u64>,
    /// Whether the dense parameters differ.
    pub dense_differs: bool,
}

impl Comparison {
    /// Bit-identical store and dense parameters.
    pub fn is_equal(&self) -> bool {
        self.rows_differing.is_empty() && !self.dense_differs
    }
}

/// Compare `store` and `dense` after a run with the replay of `report`'s order, from `initial`
/// (the store's snapshot before the run) and a fresh model `fresh`.
pub fn compare_with_replay<M: Model>(
    mut fresh: M,
    initial: &[f32],
    batches: &[Batch<M::Data>],
    report: &RunReport,
    store: &RowStore,
    dense: &[f32],
) -> Result<Comparison, EngineError<M::Error>> {
    let mut table = initial.to_vec();
    replay(&mut fresh, &mut table, batches, &report.positions())?;
    let got = store.snapshot();
    let w = store.width().max(1);
    let rows_differing = (0..store.rows())
        .filter(|&r| {
            got[r * w..(r + 1) * w]
                .iter()
                .zip(&table[r * w..(r + 1) * w])
                .any(|(a, b)| a.to_bits() != b.to_bits())
        })
        .map(|r| r as u64)
        .collect();
    let expected = fresh.dense();
    let dense_differs = dense.len() != expected.len()
        || dense.iter().zip(&expected).any(|(a, b)| a.to_bits() != b.to_bits());
    Ok(Comparison { rows_differing, dense_differs })
}

/// A fuzz case: a small pipeline, a batch set over a few rows, and a schedule.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
pub struct FuzzCase {
    mode: u8,
    rows: u8,
    width: u8,
    readers: u8,
    writers: u8,
    input_depth: u8,
    output_depth: u8,
    slots: u8,
    /// Each batch: a bit mask of the rows it touches, and its scalar.
    batches: Vec<(u8, i8)>,
    schedule: Vec<u8>,
}

impl FuzzCase {
    /// The engine configuration this case runs (`Oac`, `Sync` or `Bounded(1)`: the modes that
    /// promise equivalence).
    pub fn config(&self) -> EngineConfig {
        let mode = match self.mode % 4 {
            0 | 1 => Mode::Oac,
            2 => Mode::Sync,
            _ => Mode::Bounded(1),
        };
        let mut c = EngineConfig::new(mode)
            .threads(1 + usize::from(self.readers % 3), 1 + usize::from(self.writers % 3))
            .depths(1 + usize::from(self.input_depth % 3), 1 + usize::from(self.output_depth % 3));
        if !self.slots.is_multiple_of(4) {
            c.max_in_flight = Some(usize::from(self.slots % 8));
        }
        c
    }

    /// Batches the device holds in flight (1..=3): 1 runs the [`CpuDevice`] one batch at a
    /// time, more a [`DeferredCpuDevice`] (stepped ahead of the writers, as a GPU queue does).
    pub fn device_depth(&self) -> usize {
        1 + usize::from(self.mode / 4 % 3)
    }

    /// The device [`device_depth`](FuzzCase::device_depth) names.
    fn device<M: Model>(&self) -> Box<dyn DeviceQueue<M>> {
        match self.device_depth() {
            1 => Box::new(CpuDevice::new()),
            depth => Box::new(DeferredCpuDevice::new(depth)),
        }
    }

    /// Rows in the store (1..=6).
    pub fn rows(&self) -> usize {
        1 + usize::from(self.rows % 6)
    }

    /// The batches (at most 8). A mask that selects none of the store's rows selects row
    /// `mask % rows` instead: an empty batch is rejected before anything runs
    /// ([`BatchError::Empty`](crate::engine::BatchError::Empty)), so it would exercise no schedule.
    pub fn batches(&self) -> Vec<Batch<f32>> {
        let rows = self.rows();
        self.batches
            .iter()
            .take(8)
            .enumerate()
            .map(|(i, &(mask, data))| {
                let mut picked: Vec<u64> =
                    (0..rows as u64).filter(|r| mask & (1 << r) != 0).collect();
                if picked.is_empty() {
                    picked.push(u64::from(mask) % rows as u64);
                }
                Batch { id: i as u64, rows: picked, data: f32::from(data) / 8.0 }
            })
            .collect()
    }

    /// Run the case in the simulation and compare with the replay. `Err` describes a violation
    /// of the claim (or a deadlock).
    pub fn check(&self) -> Result<(), String> {
        let width = 1 + usize::from(self.width % 2);
        let rows = self.rows();
        let batches = self.batches();
        let store = RowStore::from_fn(rows, width, |r, c| (r * 3 + c) as f32 * 0.25);
        let initial = store.snapshot();
        let model = crate::engine::check::testing::MixModel::new(width);
        let device = self.device();
        let sim =
            Simulation::with_device(self.config(), device, model.clone(), &store, batches.clone())
                .map_err(|e| e.to_string())?;
        let (model_after, report) = sim.run(&self.schedule).map_err(|e| e.to_string())?;
        if report.order.len() != batches.len() {
            return Err(format!("{} of {} batches stamped", report.order.len(), batches.len()));
        }
        if !report.positions().into_iter().eq(0..batches.len()) {
            return Err(format!("not the submission order: {:?}", report.positions()));
        }
        let cmp =
            compare_with_replay(model, &initial, &batches, &report, &store, &model_after.dense())
                .map_err(|e| e.to_string())?;
        if cmp.is_equal() {
            Ok(())
        } else {
            Err(format!("{cmp:?} for order {:?}", report.batch_ids()))
        }
    }
}

/// The body of the `engine_schedule` fuzz target: decode `data` as a [`FuzzCase`] and check it.
/// Panics (with the case) when the claim is violated, so a unit test can replay a crash input.
pub fn fuzz_check(data: &[u8]) {
    let mut u = arbitrary::Unstructured::new(data);
    let Ok(case) = <FuzzCase as arbitrary::Arbitrary>::arbitrary(&mut u) else { return };
    if let Err(why) = case.check() {
        panic!("engine_schedule: {why}\ncase: {case:?}");
    }
}
