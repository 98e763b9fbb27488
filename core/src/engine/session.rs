//! The session: the pipeline started once, fed batch by batch from any source with
//! back-pressure, drained epoch by epoch. [`Engine::run`](crate::engine::Engine::run) is one epoch of it.
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

use crate::engine::completion::Completion;
use crate::engine::error::EngineError;
use crate::engine::model::{Batch, Model, StepError};
use crate::engine::record::{RunReport, Stamp};
use crate::engine::stage_loops::{DeviceLoop, epoch_local};
use crate::engine::stop::POLL;
use crate::engine::validate_batch;
use crate::mutation::{self, Mutant};
use crate::row_store::RowStore;
use crate::storage::RowStorage;
use crossbeam_channel::{Receiver, Select, TrySendError};
use std::time::Instant;

/// Why [`Session::try_submit`] did not take a batch.
#[derive(Debug)]
pub enum TrySubmitError<D, E = StepError> {
    /// The pipeline is full; here is the batch back (try again later).
    Full(Batch<D>),
    /// The batch was rejected, or the session stopped ([`EngineError::Halted`]).
    Failed(EngineError<E>),
}

/// A running pipeline; see [`Engine::session`](crate::engine::Engine::session).
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
/// use ordo::row_store::RowStore;
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
    /// The device stage: the stage loop this session's calls run.
    dev: DeviceLoop<'a, M, S>,
    /// Batches submitted this epoch (the next one's position).
    submitted: usize,
    epoch_start: Instant,
}

impl<'a, M: Model, S: RowStorage + ?Sized> Session<'a, M, S> {
    /// A session over the device loop `dev` (with its lanes to the stage threads, if any).
    pub(crate) fn new(dev: DeviceLoop<'a, M, S>) -> Self {
        Session { dev, submitted: 0, epoch_start: Instant::now() }
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
        if self.dev.lanes.is_none() {
            self.submitted += 1;
            self.dev.run_inline(position, batch);
            return self.running();
        }
        let mut item = (position, batch);
        loop {
            match self.dev.lanes().feed.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    item = back;
                    self.dev.device_step(true);
                    self.running()?;
                }
                Err(TrySendError::Disconnected(_)) => return Err(EngineError::Halted),
            }
        }
        self.submitted += 1;
        self.dev.pump();
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
    /// use ordo::row_store::RowStore;
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
        self.dev.run_inline(position, batch);
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
        if self.dev.lanes.is_none() {
            return self.submit(batch).map_err(TrySubmitError::Failed);
        }
        self.dev.pump();
        match self.dev.lanes().feed.try_send((self.submitted, batch)) {
            Ok(()) => {
                self.submitted += 1;
                self.dev.pump();
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
        self.dev.pump();
        std::mem::take(&mut self.dev.completions)
    }

    /// The model, as the device left it: between epochs (after [`finish`](Session::finish)) its
    /// dense parameters are those of every batch stamped so far. The device runs only inside
    /// this session's calls, so nothing changes it while the caller reads it.
    pub fn model(&self) -> &M {
        self.dev.model
    }

    /// Batches submitted this epoch and not yet written.
    pub fn pending(&self) -> usize {
        self.submitted - self.dev.acknowledged as usize
    }

    /// The computation order stamped since the last call (or the epoch's start), in stamp
    /// order (does the device work that is ready first). Stamps taken here are not in
    /// [`finish`](Session::finish)'s report, which holds only the rest of the epoch; the
    /// concatenation of every drain and the report is the epoch's order. A stamped batch is
    /// written (or named unwritten by the error that stops the session), so a trainer that
    /// saves these ids as it goes can replay its store at any point.
    pub fn drain_order(&mut self) -> impl Iterator<Item = Stamp> + '_ {
        self.dev.pump();
        self.stamps_taken()
    }

    /// The stamps made since the last take, epoch-local, without doing device work first.
    fn stamps_taken(&mut self) -> impl Iterator<Item = Stamp> + '_ {
        let base = self.dev.epoch_ts;
        self.dev.seq.order.drain(..).map(move |stamp| epoch_local(stamp, base))
    }

    /// [`drain_order`](Session::drain_order) and [`completions`](Session::completions)
    /// together, after one round of the device work that is ready: no device work runs between
    /// the two takes, so the session keeps no record afterwards (what
    /// [`wait_with`](Session::wait_with) asks before it sleeps). Taking them one after the
    /// other, each after its own round, could leave behind a completion that the second round
    /// acknowledged.
    pub(crate) fn take_records(&mut self) -> (Vec<Stamp>, Vec<Completion>) {
        self.dev.pump();
        let stamps = self.stamps_taken().collect();
        (stamps, std::mem::take(&mut self.dev.completions))
    }

    /// Do the device work that is ready and acknowledge the completions that arrived, taking
    /// nothing (a test's way to make the session keep a record).
    #[cfg(test)]
    pub(crate) fn pump(&mut self) {
        self.dev.pump();
    }

    /// Whether the session keeps a stamp not drained or a completion not taken.
    fn keeps_records(&self) -> bool {
        !self.dev.seq.order.is_empty() || !self.dev.completions.is_empty()
    }

    /// Records the session keeps for the caller: stamps not yet drained
    /// ([`drain_order`](Session::drain_order)), completions not yet taken
    /// ([`completions`](Session::completions)), and batches on the device. The only part of
    /// the session that grows with the batches; it stays below the pipeline's depths plus what
    /// was stamped since the last drain.
    pub fn retained(&self) -> usize {
        self.dev.seq.order.len() + self.dev.completions.len() + self.dev.seq.in_flight()
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
        self.dev.stop.close();
        self.settle(true)
    }

    /// Wait until every stamped batch of the epoch is written and report the epoch; `closing`:
    /// the stop flag was raised by [`close`](Session::close), not by a failure.
    fn settle(&mut self, closing: bool) -> Result<RunReport, EngineError<M::Error>> {
        // After `close` the stop is raised, so batches not yet on the device stay unapplied.
        self.quiesce();
        let stamped = self.dev.seq.next_ts - self.dev.epoch_ts;
        let elapsed = self.epoch_start.elapsed();
        let base = self.dev.epoch_ts;
        let order: Vec<Stamp> = std::mem::take(&mut self.dev.seq.order)
            .into_iter()
            .map(|s| epoch_local(s, base))
            .collect();
        if let Some((cause, unwritten)) = self.dev.stop.take() {
            let unwritten: Vec<(u64, u64)> =
                unwritten.into_iter().map(|(ts, id)| (ts - base, id)).collect();
            let order = order.iter().map(|s| s.batch_id).collect();
            let prefix = self.dev.cx.prefix(stamped, &unwritten);
            return Err(EngineError::Stopped { cause, stamped, order, unwritten, prefix });
        }
        if !closing {
            self.running()?;
        }
        let report = RunReport {
            mode: self.dev.cx.mode,
            order,
            ts_base: self.dev.cx.base + base,
            cache_peak: std::mem::take(&mut self.dev.seq.cache_peak),
            rows_validated: std::mem::take(&mut self.dev.seq.rows_validated),
            rows_replaced: std::mem::take(&mut self.dev.seq.rows_replaced),
            elapsed,
        };
        self.dev.epoch_ts = self.dev.seq.next_ts;
        (self.submitted, self.dev.acknowledged) = (0, 0);
        self.dev.new_epoch();
        self.dev.completions.clear();
        self.epoch_start = Instant::now();
        Ok(report)
    }

    /// Empty the pipeline: every submitted batch through the device (unless the session
    /// stopped), every stamped one collected and written. Afterwards no other thread touches the
    /// store or the sequencer until the next `submit`.
    fn quiesce(&mut self) {
        while self.dev.lanes.is_some()
            && self.dev.processed < self.submitted
            && !self.dev.stop.is_stopped()
        {
            self.dev.device_step(true);
        }
        self.dev.drain_device();
        let stamped = self.dev.seq.next_ts - self.dev.epoch_ts;
        while self.dev.lanes.is_some() && self.dev.acknowledged < stamped {
            let Ok(done) = self.dev.lanes().done.recv_timeout(POLL) else { continue };
            self.dev.acknowledge(done);
        }
    }

    /// Block until `inbox` holds a message or the pipeline has work for this thread: a read
    /// batch for the device, or a written one to take. With nothing submitted and unwritten (or
    /// in `Sync` mode) only `inbox` wakes it. Receives nothing. Returns at once while the
    /// batch whose turn it is waits in the device's reorder buffer, or while the session keeps
    /// a record not taken.
    ///
    /// **The invariant: it never sleeps while the session keeps a record.** The owned
    /// session's device thread sleeps here, and its caller learns of a write only from the
    /// records that thread takes out of the session (`publish` in `engine/owned_session.rs`):
    /// a caller may wait for a completion and send nothing until it comes (the Python
    /// binding's `finish` does). With no record kept, every acknowledged completion is the
    /// caller's, so a completion it waits for is not acknowledged yet: `pending() > 0`, and
    /// its arrival on `done`, which is watched then, wakes this thread. A completion
    /// acknowledged and kept here leaves `pending()` at 0 with nothing left to wake it. The
    /// owned session once took its completions and its stamps each after a device round of its
    /// own, and the second round could acknowledge the last completion of an epoch: its caller
    /// then waited forever (`Session::take_records` now takes both after one round; this check
    /// keeps the invariant whatever takes the records).
    /// Checked by `wait_with_does_not_sleep_on_a_completion_not_taken`
    /// (`engine/owned_session.rs`) and `core/tests/prop_engine.rs`
    /// (`an_owned_session_fed_as_the_binding_feeds_it_publishes_every_completion`).
    pub(crate) fn wait_with<T>(&self, inbox: &Receiver<T>) {
        if self.keeps_records() {
            return;
        }
        if !self.dev.stop.is_stopped() && self.dev.turn_ready() {
            return;
        }
        let mut select = Select::new();
        select.recv(inbox);
        if let Some(lanes) = self.dev.lanes.as_ref().filter(|_| self.pending() > 0) {
            // Stopped, the device takes no batch, and the readers leave: their channel
            // disconnects, which would wake this at once, forever.
            if !self.dev.stop.is_stopped() {
                select.recv(&lanes.staged);
            }
            select.recv(&lanes.done);
        }
        select.ready();
    }

    /// Stop the threads (the session's scope joins them); stamped batches are still written.
    pub(crate) fn shut_down(mut self) {
        self.dev.stop.close();
        self.dev.drain_device();
        self.dev.lanes = None;
    }

    fn running(&self) -> Result<(), EngineError<M::Error>> {
        if self.dev.stop.is_stopped() { Err(EngineError::Halted) } else { Ok(()) }
    }

    /// Check a batch before it enters the pipeline.
    fn accept(&self, batch: &Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        self.running()?;
        validate_batch(self.submitted, batch, self.dev.cx.store.rows())
    }
}
