//! The session: the pipeline started once, fed batch by batch from any source with
//! back-pressure, drained epoch by epoch. [`Engine::run`](super::Engine::run) is one epoch of it.
//!
//! Queues are bounded (`input_depth` between the submitter and the readers and between the
//! readers and the device, `output_depth` between the device and the writers), so a blocked
//! [`Session::submit`] means the pipeline is full: it does device work on the caller's thread
//! until there is room. Batches are never collected; the caller's data loader is the only
//! batch buffer.
//!
//! **What the session keeps.** Its working state is bounded by the pipeline's depths (the
//! queues, the batches on the device, the MFT window, the validation cache up to the STE). The
//! one record that grows with the batches is what it hands back: a [`Stamp`] per stamped batch
//! (the computation order) and a [`Completion`] per written batch. Each is kept until the
//! caller takes it — [`Session::drain_order`] and [`Session::completions`] as the run goes, or
//! [`Session::finish`] at the end of an epoch, whose [`RunReport`] holds the stamps not drained
//! — so a session that is never finished (an online trainer) runs in flat memory as long as it
//! drains both; [`Session::retained`] counts what is kept.
//!
//! **Epochs.** One session stamps `ts = 0, 1, 2, …` across all its epochs (one MFT and one
//! outstanding set); [`Session::finish`] waits until every batch submitted since the last
//! `finish` is written, and reports that epoch with epoch-local stamps (its `ts_base` is the
//! store version of its first batch), exactly as a separate run would.

use super::context::RunCtx;
use super::device_queue::DeviceQueue;
use super::driver::{OsThreads, admit, block_on, read_batch, write_batch};
use super::error::Stage;
use super::reader::Staged;
use super::sequencer::{Sequencer, Stamped};
use super::stop::{POLL, StopState};
use super::{
    Batch, Completion, EngineError, Model, Observer, RunReport, StageError, StageHook, Stamp,
    StopCause, validate_batch,
};
use crate::mutation::{self, Mutant};
use crate::storage::RowStorage;
use crate::store::RowStore;
use crossbeam_channel::{Receiver, Select, Sender, TrySendError};
use std::time::Instant;

/// Why [`Session::try_submit`] did not take a batch.
#[derive(Debug)]
pub enum TrySubmitError<D, E = super::StepError> {
    /// The pipeline is full; here is the batch back (try again later).
    Full(Batch<D>),
    /// The batch was rejected, or the session stopped ([`EngineError::Halted`]).
    Failed(EngineError<E>),
}

/// The channels between the session (the device) and the reader and writer threads.
pub(crate) struct Lanes<D> {
    pub feed: Sender<(usize, Batch<D>)>,
    pub staged: Receiver<Staged<D>>,
    pub stamped: Sender<Stamped>,
    pub done: Receiver<Completion>,
}

/// A running pipeline; see [`Engine::session`](super::Engine::session).
///
/// The device stage (validation and the model step) runs on the thread that owns the session,
/// inside [`submit`](Session::submit), [`try_submit`](Session::try_submit),
/// [`completions`](Session::completions) and [`finish`](Session::finish); the readers and
/// writers run on their own threads. So the computation order advances only while the caller is
/// inside one of those calls.
///
/// A loader that must not block uses [`try_submit`](Session::try_submit) and takes the
/// per-batch [`completions`](Session::completions) as they come:
///
/// ```
/// use ordo::engine::{Batch, CpuDevice, Engine, EngineConfig, Mode, TrySubmitError};
/// use ordo::store::RowStore;
/// # use ordo::engine::{BatchRows, Model, StepError};
/// # struct Nudge;
/// # impl Model for Nudge {
/// #     type Data = f32;
/// #     type Error = StepError;
/// #     fn row_width(&self) -> usize { 1 }
/// #     fn step(&mut self, d: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
/// #         rows.values_mut().iter_mut().for_each(|v| *v = 0.5 * *v + d);
/// #         Ok(())
/// #     }
/// # }
/// let store = RowStore::zeros(16, 1);
/// let engine = Engine::new(EngineConfig::new(Mode::Oac).depths(1, 1))?;
/// let report = engine.session(&mut CpuDevice::new(), &mut Nudge, &store, |s| {
///     let mut written = Vec::new();
///     for id in 0..50u64 {
///         let mut batch = Batch { id, rows: vec![id % 16], data: 1.0 };
///         loop {
///             match s.try_submit(batch) {
///                 Ok(()) => break,
///                 Err(TrySubmitError::Full(back)) => batch = back, // the loader could do other work here
///                 Err(TrySubmitError::Failed(e)) => return Err(e),
///             }
///             written.extend(s.completions());
///         }
///     }
///     let report = s.finish()?;
///     assert!(written.iter().all(|c| c.written));
///     Ok(report)
/// })?;
/// assert_eq!(report.order.len(), 50);
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
pub struct Session<'a, M: Model, S: RowStorage + ?Sized = RowStore> {
    cx: &'a RunCtx<'a, S>,
    stop: &'a StopState<M::Error>,
    hook: Option<&'a StageHook>,
    observer: Option<&'a dyn Observer>,
    device: &'a mut dyn DeviceQueue<M>,
    model: &'a mut M,
    seq: Sequencer,
    /// `None` in `Sync` mode: every stage runs inline in `submit`.
    lanes: Option<Lanes<M::Data>>,
    /// The ts of this epoch's first batch.
    epoch_ts: u64,
    /// Batches submitted this epoch (the next one's position).
    submitted: usize,
    /// Batches of this epoch the device took (stamped, or failed).
    processed: usize,
    /// Completions of this epoch received.
    acknowledged: u64,
    completions: Vec<Completion>,
    epoch_start: Instant,
}

impl<'a, M: Model, S: RowStorage + ?Sized> Session<'a, M, S> {
    pub(crate) fn new(
        cx: &'a RunCtx<'a, S>,
        stop: &'a StopState<M::Error>,
        hook: Option<&'a StageHook>,
        observer: Option<&'a dyn Observer>,
        device: &'a mut dyn DeviceQueue<M>,
        model: &'a mut M,
        lanes: Option<Lanes<M::Data>>,
    ) -> Self {
        Session {
            cx,
            stop,
            hook,
            observer,
            device,
            model,
            seq: Sequencer::default(),
            lanes,
            epoch_ts: 0,
            submitted: 0,
            processed: 0,
            acknowledged: 0,
            completions: Vec::new(),
            epoch_start: Instant::now(),
        }
    }

    /// Feed one batch, blocking while the pipeline is full (doing device work meanwhile).
    ///
    /// A malformed batch is rejected ([`EngineError::InvalidBatch`]) and nothing changes; after
    /// a failure inside the pipeline every call returns [`EngineError::Halted`] and
    /// [`finish`](Session::finish) returns the failure.
    pub fn submit(&mut self, batch: Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        self.accept(&batch)?;
        self.submit_checked(batch)
    }

    /// [`submit`](Session::submit) a batch its caller has checked (`validate_batch` at this
    /// session's next position): the owned session checks on the caller's thread.
    pub(crate) fn submit_checked(
        &mut self,
        batch: Batch<M::Data>,
    ) -> Result<(), EngineError<M::Error>> {
        self.running()?;
        let position = self.submitted;
        if self.lanes.is_none() {
            self.submitted += 1;
            self.run_inline(position, batch);
            return self.running();
        }
        let mut item = (position, batch);
        loop {
            match self.lanes().feed.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    item = back;
                    self.device_step(true);
                    self.running()?;
                }
                Err(TrySendError::Disconnected(_)) => return Err(EngineError::Halted),
            }
        }
        self.submitted += 1;
        self.pump();
        self.running()
    }

    /// Feed one batch and run its stages (read, step, write) on this thread, after every batch
    /// submitted before it is stamped and written: a pipeline of depth one inside a threaded
    /// session, for the batches where the reader and writer threads would cost more than they
    /// overlap (every core busy with other work). In `Sync` mode it is [`submit`](Session::submit).
    ///
    /// **Inline batches keep every promise of the mode,** and one more: an inline batch is
    /// stamped after every batch submitted before it and before every batch submitted after it
    /// (the pipeline is empty when it is read, and it is written before this call returns), so
    /// a session that mixes `submit` and `submit_inline` records the same kind of order as one
    /// that only calls `submit`. Checked by `core/tests/prop_engine.rs`
    /// (`inline_batches_keep_the_replay_and_their_place`).
    ///
    /// ```
    /// use ordo::engine::{Batch, CpuDevice, Engine, EngineConfig, Mode};
    /// use ordo::store::RowStore;
    /// # use ordo::engine::{BatchRows, Model, StepError};
    /// # struct Nudge;
    /// # impl Model for Nudge {
    /// #     type Data = f32;
    /// #     type Error = StepError;
    /// #     fn row_width(&self) -> usize { 1 }
    /// #     fn step(&mut self, d: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
    /// #         rows.values_mut().iter_mut().for_each(|v| *v = 0.5 * *v + d);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let store = RowStore::zeros(8, 1);
    /// let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    /// let report = engine.session(&mut CpuDevice::new(), &mut Nudge, &store, |s| {
    ///     for i in 0..6u64 {
    ///         let batch = Batch { id: i, rows: vec![i % 3, 5], data: 0.5 };
    ///         // The odd batches run on this thread, the even ones through the pipeline.
    ///         if i % 2 == 1 { s.submit_inline(batch)? } else { s.submit(batch)? }
    ///     }
    ///     s.finish()
    /// })?;
    /// let ids: Vec<u64> = report.order.iter().map(|s| s.batch_id).collect();
    /// assert_eq!(ids, [0, 1, 2, 3, 4, 5]);
    /// # Ok::<(), ordo::engine::EngineError>(())
    /// ```
    pub fn submit_inline(&mut self, batch: Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        self.accept(&batch)?;
        self.submit_inline_checked(batch)
    }

    /// [`submit_inline`](Session::submit_inline) a batch its caller has checked, as
    /// [`submit_checked`](Session::submit_checked).
    pub(crate) fn submit_inline_checked(
        &mut self,
        batch: Batch<M::Data>,
    ) -> Result<(), EngineError<M::Error>> {
        self.running()?;
        if !mutation::active(Mutant::InlineWithoutDrain) {
            self.quiesce();
        }
        self.running()?;
        let position = self.submitted;
        self.submitted += 1;
        self.run_inline(position, batch);
        self.running()
    }

    /// Feed one batch if there is room now; otherwise hand it back
    /// ([`TrySubmitError::Full`]). Does the device work that is ready either way.
    pub fn try_submit(
        &mut self,
        batch: Batch<M::Data>,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        if let Err(e) = self.accept(&batch) {
            return Err(TrySubmitError::Failed(e));
        }
        if self.lanes.is_none() {
            return self.submit(batch).map_err(TrySubmitError::Failed);
        }
        self.pump();
        match self.lanes().feed.try_send((self.submitted, batch)) {
            Ok(()) => {
                self.submitted += 1;
                self.pump();
                Ok(())
            }
            Err(TrySendError::Full((_, batch))) => Err(TrySubmitError::Full(batch)),
            Err(TrySendError::Disconnected(_)) => Err(TrySubmitError::Failed(EngineError::Halted)),
        }
    }

    /// Feed every batch of `batches` in turn ([`submit`](Session::submit)), lazily: an
    /// iterator over a data loader is never collected.
    pub fn submit_all(
        &mut self,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<(), EngineError<M::Error>> {
        batches.into_iter().try_for_each(|b| self.submit(b))
    }

    /// The batches written since the last call, in the order the writers finished them (does
    /// the device work that is ready first). Completions not taken before
    /// [`finish`](Session::finish) are dropped; the report lists every batch.
    pub fn completions(&mut self) -> Vec<Completion> {
        self.pump();
        std::mem::take(&mut self.completions)
    }

    /// The model, as the device left it: between epochs (after [`finish`](Session::finish)) its
    /// dense parameters are those of every batch stamped so far. The device runs only inside
    /// this session's calls, so nothing changes it while the caller reads it.
    pub fn model(&self) -> &M {
        self.model
    }

    /// Batches submitted this epoch and not yet written.
    pub fn pending(&self) -> usize {
        self.submitted - self.acknowledged as usize
    }

    /// The computation order stamped since the last call (or the epoch's start), in stamp
    /// order (does the device work that is ready first). Stamps taken here are not in
    /// [`finish`](Session::finish)'s report, which holds only the rest of the epoch; the
    /// concatenation of every drain and the report is the epoch's order. A stamped batch is
    /// written (or named unwritten by the error that stops the session), so a trainer that
    /// saves these ids as it goes can replay its store at any point.
    pub fn drain_order(&mut self) -> impl Iterator<Item = Stamp> + '_ {
        self.pump();
        let base = self.epoch_ts;
        self.seq.order.drain(..).map(move |stamp| epoch_local(stamp, base))
    }

    /// Records the session keeps for the caller: stamps not yet drained
    /// ([`drain_order`](Session::drain_order)), completions not yet taken
    /// ([`completions`](Session::completions)), and batches on the device. The only part of
    /// the session that grows with the batches; it stays below the pipeline's depths plus what
    /// was stamped since the last drain.
    pub fn retained(&self) -> usize {
        self.seq.order.len() + self.completions.len() + self.seq.in_flight()
    }

    /// End the epoch: run every submitted batch through, wait until all are written, and
    /// report the epoch's computation order (the stamps not taken by
    /// [`drain_order`](Session::drain_order)). The threads keep running for the next epoch.
    ///
    /// On a failure the error says which batches were stamped and which of those are not fully
    /// written ([`EngineError::Stopped`]); the session is halted after it.
    pub fn finish(&mut self) -> Result<RunReport, EngineError<M::Error>> {
        self.settle(false)
    }

    /// Stop the session: it takes no more batches ([`EngineError::Halted`] from then on); the
    /// batches already stamped are written, those submitted and not yet stamped are not
    /// applied. Reports the stamped part of the epoch as [`finish`](Session::finish) does (the
    /// stamps not drained), or the failure that stopped the session earlier. A session that
    /// ends without `close` or `finish` (its closure returns) does the same and drops the report.
    pub fn close(&mut self) -> Result<RunReport, EngineError<M::Error>> {
        self.stop.close();
        self.settle(true)
    }

    /// Wait until every stamped batch of the epoch is written and report the epoch; `closing`:
    /// the stop flag was raised by [`close`](Session::close), not by a failure.
    fn settle(&mut self, closing: bool) -> Result<RunReport, EngineError<M::Error>> {
        // After `close` the stop is raised, so batches not yet on the device stay unapplied.
        self.quiesce();
        let stamped = self.seq.next_ts - self.epoch_ts;
        let elapsed = self.epoch_start.elapsed();
        let base = self.epoch_ts;
        let order: Vec<Stamp> =
            std::mem::take(&mut self.seq.order).into_iter().map(|s| epoch_local(s, base)).collect();
        if let Some((cause, unwritten)) = self.stop.take() {
            let unwritten: Vec<(u64, u64)> =
                unwritten.into_iter().map(|(ts, id)| (ts - base, id)).collect();
            let order = order.iter().map(|s| s.batch_id).collect();
            let prefix = self.cx.prefix(stamped, &unwritten);
            return Err(EngineError::Stopped { cause, stamped, order, unwritten, prefix });
        }
        if !closing {
            self.running()?;
        }
        let report = RunReport {
            mode: self.cx.mode,
            order,
            ts_base: self.cx.base + base,
            cache_peak: std::mem::take(&mut self.seq.cache_peak),
            rows_validated: std::mem::take(&mut self.seq.rows_validated),
            rows_replaced: std::mem::take(&mut self.seq.rows_replaced),
            elapsed,
        };
        self.epoch_ts = self.seq.next_ts;
        (self.submitted, self.processed, self.acknowledged) = (0, 0, 0);
        self.completions.clear();
        self.epoch_start = Instant::now();
        Ok(report)
    }

    /// Empty the pipeline: every submitted batch through the device (unless the session
    /// stopped), every stamped one collected and written. Afterwards no other thread touches the
    /// store or the sequencer until the next `submit`.
    fn quiesce(&mut self) {
        while self.lanes.is_some() && self.processed < self.submitted && !self.stop.is_stopped() {
            self.device_step(true);
        }
        self.drain_device();
        let stamped = self.seq.next_ts - self.epoch_ts;
        while self.lanes.is_some() && self.acknowledged < stamped {
            let Ok(done) = self.lanes().done.recv_timeout(POLL) else { continue };
            self.acknowledge(done);
        }
    }

    /// Block until `inbox` holds a message or the pipeline has work for this thread: a read
    /// batch for the device, or a written one to take. With nothing submitted and unwritten (or
    /// in `Sync` mode) only `inbox` wakes it. Receives nothing.
    pub(crate) fn wait_with<T>(&self, inbox: &Receiver<T>) {
        let mut select = Select::new();
        select.recv(inbox);
        if let Some(lanes) = self.lanes.as_ref().filter(|_| self.pending() > 0) {
            // Stopped, the device takes no batch, and the readers leave: their channel
            // disconnects, which would wake this at once, forever.
            if !self.stop.is_stopped() {
                select.recv(&lanes.staged);
            }
            select.recv(&lanes.done);
        }
        select.ready();
    }

    /// Stop the threads (the session's scope joins them); stamped batches are still written.
    pub(crate) fn shut_down(mut self) {
        self.stop.close();
        self.drain_device();
        self.lanes = None;
    }

    fn lanes(&self) -> &Lanes<M::Data> {
        self.lanes.as_ref().expect("threaded session")
    }

    fn running(&self) -> Result<(), EngineError<M::Error>> {
        if self.stop.is_stopped() { Err(EngineError::Halted) } else { Ok(()) }
    }

    /// Check a batch before it enters the pipeline.
    fn accept(&self, batch: &Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        self.running()?;
        validate_batch(self.submitted, batch, self.cx.store.rows())
    }

    /// Tell the observer of the batch just collected.
    fn observe_stamp(&self) {
        if let (Some(o), Some(stamp)) = (self.observer, self.seq.order.last()) {
            o.stamped(&epoch_local(*stamp, self.epoch_ts));
        }
    }

    fn acknowledge(&mut self, done: Completion) {
        self.acknowledged += 1;
        self.completions.push(done);
    }

    /// Do the device work that is ready now, and take the completions that arrived.
    fn pump(&mut self) {
        // `Sync` runs every stage inside `submit`: nothing is ever left to do here.
        if self.lanes.is_none() {
            return;
        }
        while self.device_step(false) {}
        while let Some(done) = self.lanes.as_ref().and_then(|l| l.done.try_recv().ok()) {
            self.acknowledge(done);
        }
    }

    /// Do one piece of device work: collect the oldest batch in flight if the device must
    /// before it takes another, else submit the next read batch (waiting up to `POLL` for one if
    /// `wait`), else collect if the readers have nothing ready. Returns whether it did any.
    fn device_step(&mut self, wait: bool) -> bool {
        if self.stop.is_stopped() {
            return false;
        }
        if self.seq.must_collect(self.cx, self.device.depth()) {
            self.collect_one();
            return true;
        }
        let lanes = self.lanes.as_ref().expect("threaded session");
        let job = match lanes.staged.try_recv() {
            Ok(job) => Some(job),
            Err(_) if self.seq.in_flight() > 0 => {
                self.collect_one();
                return true;
            }
            Err(_) if wait => lanes.staged.recv_timeout(POLL).ok(),
            Err(_) => None,
        };
        let Some(job) = job else { return false };
        if !block_on(admit(&self.seq, self.cx, self.stop, &OsThreads::default())) {
            return false;
        }
        self.processed += 1;
        let (cx, hook) = (self.cx, self.hook);
        match self.seq.submit(cx, &mut *self.device, &mut *self.model, job, hook, false) {
            Ok(()) if self.seq.must_collect(cx, self.device.depth()) => self.collect_one(),
            Ok(()) => {}
            Err(cause) => self.stop.fail(cause),
        }
        true
    }

    /// Collect the oldest batch in flight and hand it to the writers. Batches lost to a device
    /// failure are acknowledged as unwritten (no writer will see them).
    fn collect_one(&mut self) {
        let stamped = match self.seq.collect(self.cx, &mut *self.device, self.stop) {
            Ok((stamped, failed)) => {
                self.observe_stamp();
                // A failed cache insert: the batch is stamped, so it is written, then we stop.
                if let Some(cause) = failed {
                    self.stop.fail(cause);
                }
                stamped
            }
            Err(lost) => return self.acknowledge_lost(lost),
        };
        let id = stamped.id;
        if self.lanes().stamped.send(stamped).is_err() {
            // Writers leave only when the sender drops: unreachable short of a writer thread
            // dying.
            self.stop.fail(StopCause::StageFailed {
                stage: Stage::Device,
                batch_id: id,
                source: StageError::NoWriter,
            });
        }
    }

    /// Batches `(ts, id)` a device failure lost: no writer will see them, so they are
    /// acknowledged here as unwritten.
    fn acknowledge_lost(&mut self, lost: Vec<(u64, u64)>) {
        for (ts, batch_id) in lost {
            self.acknowledge(Completion { batch_id, version: self.cx.base + ts, written: false });
        }
    }

    /// Collect every batch still in flight, stop or not: stamped batches are written.
    fn drain_device(&mut self) {
        while self.lanes.is_some() && self.seq.in_flight() > 0 {
            self.collect_one();
        }
    }

    /// Read, step and write one batch on this thread, through the same stage code: every batch
    /// of `Sync`, and a [`submit_inline`](Session::submit_inline) batch once the pipeline is
    /// empty. Either way no other batch is anywhere in the pipeline, so the batch is stamped
    /// `alone` ([`Sequencer::submit`]).
    fn run_inline(&mut self, position: usize, batch: Batch<M::Data>) {
        let (cx, stop, hook) = (self.cx, self.stop, self.hook);
        let waiter = OsThreads::default();
        let staged = match block_on(read_batch(cx, position, batch, hook, stop, &waiter)) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(cause) => return stop.fail(cause),
        };
        self.processed += 1;
        if let Err(cause) =
            self.seq.submit(cx, &mut *self.device, &mut *self.model, staged, hook, true)
        {
            return stop.fail(cause);
        }
        let (stamped, failed) = match self.seq.collect(cx, &mut *self.device, stop) {
            Ok(s) => s,
            Err(lost) => return self.acknowledge_lost(lost),
        };
        self.observe_stamp();
        let (batch_id, version) = (stamped.id, cx.base + stamped.ts);
        let written = block_on(write_batch(cx, stamped, hook, stop, &waiter));
        if let Some(cause) = failed {
            stop.fail(cause);
        }
        let done = Completion { batch_id, version, written };
        if let Some(o) = self.observer {
            o.written(&done);
        }
        self.acknowledge(done);
    }
}

/// `stamp` with its stamps made local to the epoch whose first batch was stamped `base`. Every
/// batch of earlier epochs was finished before this epoch's first read, so its read prefix and
/// STE are at least `base`.
fn epoch_local(mut stamp: Stamp, base: u64) -> Stamp {
    stamp.ts -= base;
    stamp.read_prefix = stamp.read_prefix.saturating_sub(base);
    stamp.ste = stamp.ste.saturating_sub(base);
    stamp
}
