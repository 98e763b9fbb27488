//! A session the caller owns across calls ([`Engine::start`]): the pipeline of
//! [`Engine::session`] run on a device thread of its own, fed over a bounded channel.

use crate::engine::completion::Completion;
use crate::engine::device_queue::DeviceQueue;
use crate::engine::error::EngineError;
use crate::engine::model::{Batch, Model};
use crate::engine::pipeline::Engine;
use crate::engine::record::{RunReport, Stamp};
use crate::engine::session::{Session, TrySubmitError};
use crate::engine::validate_batch;
use crate::mutation::{self, Mutant};
use crate::storage::RowStorage;
use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TryRecvError, TrySendError, bounded};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the caller asks of the device thread.
enum Command<D, E> {
    /// Submit this batch (already checked).
    Submit(Batch<D>),
    /// Submit this batch (already checked) to run its stages on the device thread
    /// ([`Session::submit_inline`]).
    SubmitInline(Batch<D>),
    /// End the epoch and send its report.
    Finish(Sender<Result<RunReport, EngineError<E>>>),
}

impl<D, E> Command<D, E> {
    /// The command that submits `batch`, to run `inline` or through the pipeline.
    fn submit(batch: Batch<D>, inline: bool) -> Self {
        if inline { Command::SubmitInline(batch) } else { Command::Submit(batch) }
    }
}

/// Records the device thread has made and the caller has not taken yet.
#[derive(Default)]
struct Outbox {
    order: Vec<Stamp>,
    completions: Vec<Completion>,
}

/// What the caller's thread and the device thread share.
#[derive(Default)]
struct Shared {
    outbox: Mutex<Outbox>,
    /// The pipeline stopped on a failure: submits fail with [`EngineError::Halted`], and the
    /// next `finish` or `close` returns the failure.
    halted: AtomicBool,
}

impl Shared {
    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn halted(&self) -> bool {
        // Acquire: pairs with the Release in `halt`; nothing else is read through the flag.
        self.halted.load(Ordering::Acquire)
    }

    fn halt(&self) {
        // Release: as in `halted`.
        self.halted.store(true, Ordering::Release);
    }
}

/// What [`OwnedSession::close`] gives back: the model, as the device left it, and the stamped
/// part of the epoch that was running (or the failure that stopped the session).
#[derive(Debug)]
pub struct Closed<M: Model> {
    /// The model: its dense parameters are those of every batch stamped.
    pub model: M,
    /// The stamps of the open epoch not drained, as [`Session::close`] reports them.
    pub report: Result<RunReport, EngineError<M::Error>>,
}

/// A running pipeline the caller owns ([`Engine::start`]): `Send`, fed from any thread with
/// back-pressure, joined on [`close`](OwnedSession::close) or drop. The model step runs on the
/// session's own device thread.
///
/// **Why a device thread around the scoped session, rather than stages re-founded on `Arc`.**
/// The scoped [`Session`] borrows its store, model and device and runs the device stage on the
/// caller's thread, inside its calls: no `'static` bound, no extra hop, and the whole-epoch
/// calls and the trainers keep their speed. A caller that must hold a session between calls
/// (an event loop, a binding whose interpreter lock must be released while it waits) needs the
/// opposite: a value that owns everything, is `Send`, and advances without being called. The
/// device thread gives exactly that on top of the same code, so both ways run one pipeline and
/// one equivalence proof: the owned session is a thin client of the scoped one.
///
/// **Back-pressure.** [`OwnedSession::submit`] checks the batch on the caller's thread (a bad
/// batch is refused at once, typed) and blocks while the command channel (`input_depth` deep)
/// is full, which happens only while the pipeline behind it is full; the model step runs on the
/// device thread meanwhile. [`OwnedSession::try_submit`] hands the batch back instead.
///
/// **Order and drop.** The device thread moves each stamp and completion into an outbox as soon
/// as the scoped session makes it, so [`OwnedSession::drain_order`] and
/// [`OwnedSession::completions`] never wait for the device, and memory stays flat for a caller
/// that drains them. [`OwnedSession::close`] stops the pipeline, writes every stamped batch,
/// joins the threads and returns the model with the stamped part of the epoch (the stamps not
/// drained); dropping the session does the same and drops the report, so a caller that must
/// not lose the partial order either drains it as it goes or calls `close`.
///
/// An event loop that must not block interleaves [`try_submit`](OwnedSession::try_submit) with
/// its other work:
///
/// ```
/// use ordo::engine::{Batch, BatchRows, CpuDevice, Engine, EngineConfig, Mode, Model, StepError, TrySubmitError};
/// use ordo::row_store::RowStore;
/// use std::sync::Arc;
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
/// let store = Arc::new(RowStore::zeros(16, 1));
/// let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
/// let mut session = engine.start(CpuDevice::new(), Nudge, store.clone())?;
/// let mut batches = (0..100u64).map(|id| Batch { id, rows: vec![id % 16], data: 1.0 });
/// let (mut order, mut held) = (Vec::new(), None);
/// while let Some(batch) = held.take().or_else(|| batches.next()) {
///     match session.try_submit(batch) {
///         Ok(()) => {}
///         Err(TrySubmitError::Full(back)) => {
///             // The pipeline is full: do other work (here: save the order so far), then
///             // offer the batch again.
///             held = Some(back);
///             order.extend(session.drain_order().iter().map(|s| s.batch_id));
///             std::thread::yield_now();
///         }
///         Err(TrySubmitError::Failed(e)) => return Err(e),
///     }
/// }
/// let report = session.finish()?;
/// order.extend(report.batch_ids());
/// assert_eq!(order.len(), 100);
/// let closed = session.close();
/// assert!(closed.report?.order.is_empty(), "nothing was left open");
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
pub struct OwnedSession<M: Model> {
    commands: Option<Sender<Command<M::Data, M::Error>>>,
    shared: Arc<Shared>,
    device: Option<JoinHandle<Closed<M>>>,
    /// The store's rows, to check batches on the caller's thread.
    rows: usize,
    /// Batches accepted this epoch (the next one's position).
    submitted: usize,
}

impl Engine {
    /// Start a session the caller owns: the pipeline on a device thread that owns `device`,
    /// `model` and a share of `store`, fed through the returned [`OwnedSession`] from any
    /// thread. The counterpart of [`session`](Engine::session) for callers that
    /// cannot put their work inside one closure; the same pipeline and the same claim.
    ///
    /// Fails as [`session`](Engine::session) does before anything runs (the
    /// model's width is not the store's, the device's reset fails); no thread is left behind.
    pub fn start<M, S, Q>(
        &self,
        mut device: Q,
        mut model: M,
        store: Arc<S>,
    ) -> Result<OwnedSession<M>, EngineError<M::Error>>
    where
        M: Model + 'static,
        S: RowStorage + ?Sized + 'static,
        Q: DeviceQueue<M> + Send + 'static,
    {
        let engine = self.clone();
        let rows = store.rows();
        let (commands, inbox) = bounded::<Command<M::Data, M::Error>>(self.config().input_depth);
        let (ready_tx, ready) = bounded::<Result<(), EngineError<M::Error>>>(1);
        let shared = Arc::new(Shared::default());
        let outbox = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ordo-device".into())
            .spawn(move || {
                let report = engine.session(&mut device, &mut model, &*store, |s| {
                    let _ = ready_tx.send(Ok(()));
                    Ok(serve(s, &inbox, &outbox))
                });
                let report = match report {
                    Ok(report) => report,
                    Err(e) => {
                        // The session never started; `start` returns why.
                        let _ = ready_tx.send(Err(e));
                        Err(EngineError::Halted)
                    }
                };
                Closed { model, report }
            })
            .map_err(|_| EngineError::Config("the device thread could not be spawned"))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(OwnedSession {
                commands: Some(commands),
                shared,
                device: Some(thread),
                rows,
                submitted: 0,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                // The thread ended without a word: it panicked before the session started.
                let payload = thread.join().err();
                let payload =
                    payload.unwrap_or_else(|| Box::new("the device thread ended") as Box<_>);
                std::panic::resume_unwind(payload)
            }
        }
    }
}

/// The device thread: run the caller's commands on the scoped session until the caller hangs
/// up, doing the device work that is ready whenever no command comes; then close the session
/// and return its partial report.
fn serve<M: Model, S: RowStorage + ?Sized>(
    s: &mut Session<'_, M, S>,
    inbox: &Receiver<Command<M::Data, M::Error>>,
    shared: &Shared,
) -> Result<RunReport, EngineError<M::Error>> {
    loop {
        // Sleep until a command comes or the pipeline has work for this thread (the scoped
        // session advances only inside its calls): no timer wakes it.
        s.wait_with(inbox);
        let command = match inbox.try_recv() {
            Ok(c) => Some(c),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => break,
        };
        match command {
            // A batch was checked on the caller's thread (`OwnedSession::accept`), so it is not
            // checked again: it fails only once the pipeline stopped, and the next `finish`
            // says why.
            Some(Command::Submit(batch)) => {
                let _ = s.submit_checked(batch).inspect_err(|_| shared.halt());
            }
            Some(Command::SubmitInline(batch)) => {
                let submitted = if mutation::active(Mutant::OwnedInlinePipelined) {
                    s.submit_checked(batch)
                } else {
                    s.submit_inline_checked(batch)
                };
                let _ = submitted.inspect_err(|_| shared.halt());
            }
            Some(Command::Finish(reply)) => {
                let report = s.finish().map(|mut report| {
                    // The epoch's stamps the caller did not drain lead the report.
                    let mut outbox = shared.outbox();
                    outbox.completions.clear();
                    outbox.order.append(&mut report.order);
                    report.order = std::mem::take(&mut outbox.order);
                    report
                });
                if report.is_err() {
                    shared.halt();
                }
                let _ = reply.send(report);
                continue;
            }
            None => {}
        }
        publish(s, shared);
    }
    let report = s.close();
    publish(s, shared);
    report.map(|mut report| {
        let mut outbox = shared.outbox();
        outbox.order.append(&mut report.order);
        report.order = std::mem::take(&mut outbox.order);
        report
    })
}

/// Move what the scoped session has stamped and written into the caller's outbox.
///
/// **The outbox lock is never held across device work.** Taking the completions and the
/// stamps runs the device work that is ready, model steps included, so both are taken before
/// the lock. A step may wait for a lock of its caller's (a binding's interpreter lock, which
/// the caller holds while it reads the outbox with [`OwnedSession::retained`] or
/// [`OwnedSession::drain_order`]); a step run under the outbox lock would wait for the caller
/// while the caller waits for the outbox, forever.
///
/// **Nothing is left behind.** Both records are taken after one round of device work
/// (`Session::take_records`), so the session keeps none when the thread next sleeps in
/// [`Session::wait_with`], whose invariant this keeps (a completion left behind is one the
/// caller may wait for while nothing wakes this thread).
fn publish<M: Model, S: RowStorage + ?Sized>(s: &mut Session<'_, M, S>, shared: &Shared) {
    if mutation::active(Mutant::OutboxHeldAcrossStep) {
        let mut outbox = shared.outbox();
        let (stamped, done) = s.take_records();
        outbox.order.extend(stamped);
        outbox.completions.extend(done);
        return;
    }
    let (stamped, done) = s.take_records();
    let mut outbox = shared.outbox();
    outbox.order.extend(stamped);
    outbox.completions.extend(done);
}

impl<M: Model> OwnedSession<M> {
    /// Feed one batch, blocking while the pipeline is full (the device thread works
    /// meanwhile; the caller's thread only waits, so a binding may release its interpreter
    /// lock around this call).
    ///
    /// A malformed batch is rejected at once ([`EngineError::InvalidBatch`]) and nothing
    /// changes; after a failure inside the pipeline every call returns
    /// [`EngineError::Halted`] and [`finish`](OwnedSession::finish) returns the failure.
    pub fn submit(&mut self, batch: Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        waited(self.offer(batch, false, None))
    }

    /// [`submit`](OwnedSession::submit), waiting at most `timeout` for room; the batch comes
    /// back ([`TrySubmitError::Full`]) if there is none by then. A caller that must look up
    /// between waits (a binding checking for signals) sleeps in the channel instead of polling
    /// [`try_submit`](OwnedSession::try_submit).
    ///
    /// ```
    /// use ordo::engine::{Batch, CpuDevice, Engine, EngineConfig, Mode, TrySubmitError};
    /// use ordo::row_store::RowStore;
    /// use std::{sync::Arc, time::Duration};
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
    /// let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    /// let mut session = engine.start(CpuDevice::new(), Nudge, Arc::new(RowStore::zeros(8, 1)))?;
    /// for id in 0..20u64 {
    ///     let mut batch = Batch { id, rows: vec![id % 8], data: 1.0 };
    ///     loop {
    ///         match session.submit_timeout(batch, Duration::from_millis(50)) {
    ///             Ok(()) => break,
    ///             Err(TrySubmitError::Full(back)) => batch = back, // look up, then wait again
    ///             Err(TrySubmitError::Failed(e)) => return Err(e),
    ///         }
    ///     }
    /// }
    /// assert_eq!(session.finish()?.order.len(), 20);
    /// # Ok::<(), ordo::engine::EngineError>(())
    /// ```
    pub fn submit_timeout(
        &mut self,
        batch: Batch<M::Data>,
        timeout: Duration,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        self.offer(batch, false, Some(timeout))
    }

    /// [`submit_inline`](OwnedSession::submit_inline), waiting at most `timeout` for room, as
    /// [`submit_timeout`](OwnedSession::submit_timeout) does.
    pub fn submit_inline_timeout(
        &mut self,
        batch: Batch<M::Data>,
        timeout: Duration,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        self.offer(batch, true, Some(timeout))
    }

    /// Feed one batch whose stages (read, step, write) the device thread runs itself, once
    /// every batch submitted before it is stamped and written: [`Session::submit_inline`] on
    /// the device thread, with its promise (the batch is stamped after every batch submitted
    /// before it and before every batch submitted after it). Like
    /// [`submit`](OwnedSession::submit), it returns once the device thread has the batch,
    /// blocking while the command channel is full.
    ///
    /// ```
    /// use ordo::engine::{Batch, CpuDevice, Engine, EngineConfig, Mode};
    /// use ordo::row_store::RowStore;
    /// use std::sync::Arc;
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
    /// let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(3, 2))?;
    /// let mut session = engine.start(CpuDevice::new(), Nudge, Arc::new(RowStore::zeros(8, 1)))?;
    /// for i in 0..6u64 {
    ///     let batch = Batch { id: i, rows: vec![i % 3, 5], data: 0.5 };
    ///     // Every third batch runs on the device thread, the rest through the pipeline.
    ///     if i % 3 == 2 { session.submit_inline(batch)? } else { session.submit(batch)? }
    /// }
    /// let ids = session.finish()?.batch_ids();
    /// // Each inline batch splits the order: the batches before it, then it, then the rest.
    /// assert_eq!(ids[2], 2);
    /// assert_eq!(ids[5], 5);
    /// # Ok::<(), ordo::engine::EngineError>(())
    /// ```
    pub fn submit_inline(&mut self, batch: Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        waited(self.offer(batch, true, None))
    }

    /// Feed one batch if there is room now; otherwise hand it back
    /// ([`TrySubmitError::Full`]). Never blocks.
    pub fn try_submit(
        &mut self,
        batch: Batch<M::Data>,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        self.offer(batch, false, Some(Duration::ZERO))
    }

    /// [`submit_inline`](OwnedSession::submit_inline) if there is room now; otherwise hand
    /// the batch back ([`TrySubmitError::Full`]). Never blocks.
    pub fn try_submit_inline(
        &mut self,
        batch: Batch<M::Data>,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        self.offer(batch, true, Some(Duration::ZERO))
    }

    /// Check `batch` and send it to the device thread (to run `inline` or not), waiting for
    /// room in the channel up to `wait` (`None`: as long as it takes; zero: not at all).
    fn offer(
        &mut self,
        batch: Batch<M::Data>,
        inline: bool,
        wait: Option<Duration>,
    ) -> Result<(), TrySubmitError<M::Data, M::Error>> {
        if let Err(e) = self.accept(&batch) {
            return Err(TrySubmitError::Failed(e));
        }
        let Some(commands) = self.commands.as_ref() else {
            return Err(TrySubmitError::Failed(EngineError::Halted));
        };
        let command = Command::submit(batch, inline);
        let sent = match wait {
            None => commands.send(command).map_err(|e| SendTimeoutError::Disconnected(e.0)),
            Some(d) if d.is_zero() => commands.try_send(command).map_err(|e| match e {
                TrySendError::Full(c) => SendTimeoutError::Timeout(c),
                TrySendError::Disconnected(c) => SendTimeoutError::Disconnected(c),
            }),
            Some(d) => commands.send_timeout(command, d),
        };
        match sent {
            Ok(()) => {
                self.submitted += 1;
                Ok(())
            }
            Err(SendTimeoutError::Timeout(Command::Submit(b) | Command::SubmitInline(b))) => {
                Err(TrySubmitError::Full(b))
            }
            Err(_) => Err(TrySubmitError::Failed(EngineError::Halted)),
        }
    }

    /// Feed every batch of `batches` in turn ([`submit`](OwnedSession::submit)), lazily.
    pub fn submit_all(
        &mut self,
        batches: impl IntoIterator<Item = Batch<M::Data>>,
    ) -> Result<(), EngineError<M::Error>> {
        batches.into_iter().try_for_each(|b| self.submit(b))
    }

    /// The computation order stamped since the last call, in stamp order, as
    /// [`Session::drain_order`] hands it out (never waits for the device).
    pub fn drain_order(&mut self) -> Vec<Stamp> {
        std::mem::take(&mut self.shared.outbox().order)
    }

    /// The batches written since the last call, as [`Session::completions`] hands them out
    /// (never waits for the device).
    pub fn completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.shared.outbox().completions)
    }

    /// Stamps and completions waiting in the outbox for the caller (see
    /// [`Session::retained`]; the device thread's own records are bounded by the depths).
    pub fn retained(&self) -> usize {
        let outbox = self.shared.outbox();
        outbox.order.len() + outbox.completions.len()
    }

    /// End the epoch: wait until every batch submitted is written and report the epoch's
    /// order (the stamps not drained), as [`Session::finish`] does. The session goes on.
    pub fn finish(&mut self) -> Result<RunReport, EngineError<M::Error>> {
        let commands = self.commands.as_ref().ok_or(EngineError::Halted)?;
        let (reply, report) = bounded(1);
        commands.send(Command::Finish(reply)).map_err(|_| EngineError::Halted)?;
        self.submitted = 0;
        report.recv().map_err(|_| EngineError::Halted)?
    }

    /// Stop the session and join its threads: batches already stamped are written, those not
    /// yet stamped are not applied. Returns the model and the stamped part of the open epoch
    /// ([`Session::close`]). A panic of the device thread is resumed here.
    pub fn close(mut self) -> Closed<M> {
        match self.join() {
            Ok(closed) => closed,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }

    /// Check a batch before it is sent to the device thread.
    fn accept(&self, batch: &Batch<M::Data>) -> Result<(), EngineError<M::Error>> {
        if self.shared.halted() {
            return Err(EngineError::Halted);
        }
        validate_batch(self.submitted, batch, self.rows)
    }

    /// Hang up and wait for the device thread: it closes the scoped session (stamped batches
    /// are written, its reader and writer threads joined) and returns.
    fn join(&mut self) -> std::thread::Result<Closed<M>> {
        self.commands = None;
        self.device.take().expect("joined once").join()
    }
}

/// The result of an [`OwnedSession::offer`] that waits as long as it takes, which never hands
/// the batch back.
fn waited<D, E>(offered: Result<(), TrySubmitError<D, E>>) -> Result<(), EngineError<E>> {
    offered.map_err(|e| match e {
        TrySubmitError::Failed(e) => e,
        TrySubmitError::Full(_) => EngineError::Halted,
    })
}

/// Dropping the session closes it ([`OwnedSession::close`]) and drops the report: every
/// thread is joined before `drop` returns, and every stamped batch is written.
impl<M: Model> Drop for OwnedSession<M> {
    fn drop(&mut self) {
        if self.device.is_some() {
            // A panic of the device thread is not resumed while dropping (it could abort a
            // thread that is already unwinding); the threads are joined either way.
            let _ = self.join();
        }
    }
}

impl<M: Model> std::fmt::Debug for OwnedSession<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedSession")
            .field("submitted", &self.submitted)
            .field("halted", &self.shared.halted())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{
        Batch, BatchRows, CpuDevice, Engine, EngineConfig, Mode, Model, StepError,
    };
    use crate::row_store::RowStore;
    use crossbeam_channel::{RecvTimeoutError, bounded};
    use std::time::{Duration, Instant};

    struct Add;

    impl Model for Add {
        type Data = f32;
        type Error = StepError;
        fn row_width(&self) -> usize {
            1
        }
        fn step(&mut self, x: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
            rows.values_mut().iter_mut().for_each(|v| *v += x);
            Ok(())
        }
    }

    /// A completion the session acknowledged and nobody took yet (as the device work inside a
    /// second take of the owned session's round left one) is not slept on: `wait_with` returns
    /// at once, though nothing else will ever come (the owned session's caller waits for that
    /// very completion before it sends anything).
    #[test]
    fn wait_with_does_not_sleep_on_a_completion_not_taken() {
        let store = RowStore::zeros(4, 1);
        let engine = Engine::new(EngineConfig::new(Mode::Oac)).unwrap();
        let report = engine.session(&mut CpuDevice::new(), &mut Add, &store, |s| {
            s.submit(Batch { id: 0, rows: vec![1], data: 1.0 })?;
            let until = Instant::now() + Duration::from_secs(10);
            while s.pending() > 0 {
                assert!(Instant::now() < until, "the batch was never written");
                s.pump();
                std::thread::yield_now();
            }
            // A watchdog wakes the wait after a while if nothing else does.
            let (wake, inbox) = bounded::<()>(1);
            let (cancel, cancelled) = bounded::<()>(0);
            let watchdog = std::thread::spawn(move || {
                if cancelled.recv_timeout(Duration::from_secs(2)) == Err(RecvTimeoutError::Timeout)
                {
                    let _ = wake.send(());
                }
            });
            s.wait_with(&inbox);
            let woken_by_the_watchdog = inbox.try_recv().is_ok();
            drop(cancel);
            watchdog.join().unwrap();
            assert!(!woken_by_the_watchdog, "slept on a completion not taken");
            assert_eq!(s.completions().len(), 1);
            s.finish()
        });
        assert_eq!(report.unwrap().order.len(), 1);
    }
}
