//! The three stage loops of a threaded session, and the lanes between them: the reader loop
//! and the writer loop (each on threads of their own, [`spawn_stages`]) and the device loop
//! ([`DeviceLoop`], on the session's thread, inside its calls).
//!
//! One batch's path, in order: [`Session::submit`](crate::engine::Session::submit) sends it on
//! [`Lanes::feed`]; a reader thread reads it ([`read_batch`]) and sends it on
//! [`Lanes::staged`]; the device loop holds it in its [`Arrivals`] until every batch submitted
//! before it was taken (submission order), then admits, stamps and steps it ([`Sequencer::submit`]),
//! collects it ([`Sequencer::collect`]) and sends it on [`Lanes::stamped`]; a writer thread
//! writes it back ([`write_batch`]) and reports it on [`Lanes::done`], which the device loop
//! takes as a [`Completion`].

use crate::engine::arrivals::Arrivals;
use crate::engine::completion::Completion;
use crate::engine::config::EngineConfig;
use crate::engine::context::RunCtx;
use crate::engine::device_queue::DeviceQueue;
use crate::engine::driver::{OsThreads, admit, block_on, read_batch, write_batch};
use crate::engine::error::{Stage, StageError, StopCause};
use crate::engine::hook::StageHook;
use crate::engine::model::{Batch, Model};
use crate::engine::observer::Observer;
use crate::engine::reader::ReadBatch;
use crate::engine::record::Stamp;
use crate::engine::sequencer::{Sequencer, Stamped};
use crate::engine::stop::{POLL, StopState};
use crate::storage::RowStorage;
use crate::sync::host::thread;
use crossbeam_channel::{Receiver, SendTimeoutError, Sender, bounded, unbounded};

/// The channels between the device loop and the reader and writer threads.
pub(crate) struct Lanes<D> {
    /// Submitted batches with their positions, to the readers.
    pub feed: Sender<(usize, Batch<D>)>,
    /// Read batches, from the readers to the device loop.
    pub staged: Receiver<ReadBatch<D>>,
    /// Stamped, stepped batches, from the device loop to the writers.
    pub stamped: Sender<Stamped>,
    /// Written batches, from the writers to the device loop.
    pub done: Receiver<Completion>,
}

/// Start the reader and writer threads of a session; the device runs on the session's thread.
/// The threads are named (`ordo-reader`, `ordo-writer`), so a profiler or `top -H` tells the
/// stages apart; a thread the system refuses panics, as `Scope::spawn` does.
pub(crate) fn spawn_stages<'scope, 'env, D: Send + 'env, S: RowStorage + ?Sized, E: Send + 'env>(
    scope: &'scope thread::Scope<'scope, 'env>,
    config: &'env EngineConfig,
    cx: &'env RunCtx<'env, S>,
    stop: &'env StopState<E>,
) -> Lanes<D> {
    let hook = config.hook.as_ref();
    let observer = config.observer.as_ref().map(|o| &*o.0);
    let (feed_tx, feed_rx) = bounded::<(usize, Batch<D>)>(config.input_depth);
    let (in_tx, in_rx) = bounded::<ReadBatch<D>>(config.input_depth);
    let (out_tx, out_rx) = bounded::<Stamped>(config.output_depth);
    let (done_tx, done_rx) = unbounded::<Completion>();
    for _ in 0..config.readers {
        let (feed_rx, in_tx) = (feed_rx.clone(), in_tx.clone());
        let reader = thread::Builder::new().name("ordo-reader".into());
        let reader =
            reader.spawn_scoped(scope, move || reader_loop(cx, &feed_rx, &in_tx, hook, stop));
        reader.expect("failed to spawn a reader thread");
    }
    for _ in 0..config.writers {
        let (out_rx, done_tx) = (out_rx.clone(), done_tx.clone());
        let writer = thread::Builder::new().name("ordo-writer".into());
        let writer = writer
            .spawn_scoped(scope, move || writer_loop(cx, &out_rx, &done_tx, hook, observer, stop));
        writer.expect("failed to spawn a writer thread");
    }
    Lanes { feed: feed_tx, staged: in_rx, stamped: out_tx, done: done_rx }
}

/// The reader loop: read each submitted batch ([`read_batch`]) and hand it to the device loop.
/// It waits for the next submitted batch, and ends when the session closes (the feed
/// disconnects) or stops.
fn reader_loop<D, S: RowStorage + ?Sized, E>(
    cx: &RunCtx<'_, S>,
    feed: &Receiver<(usize, Batch<D>)>,
    staged: &Sender<ReadBatch<D>>,
    hook: Option<&StageHook>,
    stop: &StopState<E>,
) {
    while let Ok((position, batch)) = feed.recv() {
        if stop.is_stopped() {
            return;
        }
        let waiter = OsThreads::default();
        let mut item = match block_on(read_batch(cx, position, batch, hook, stop, &waiter)) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(cause) => return stop.fail(cause),
        };
        loop {
            match staged.send_timeout(item, POLL) {
                Ok(()) => break,
                Err(SendTimeoutError::Timeout(back)) if !stop.is_stopped() => item = back,
                Err(_) => return,
            }
        }
    }
}

/// The writer loop: write back each stamped batch ([`write_batch`]) and report it. Writers
/// drain every stamped batch, even after a stop, so each is written or reported unwritten;
/// they end when the device loop drops the sender.
fn writer_loop<S: RowStorage + ?Sized, E>(
    cx: &RunCtx<'_, S>,
    stamped: &Receiver<Stamped>,
    done: &Sender<Completion>,
    hook: Option<&StageHook>,
    observer: Option<&dyn Observer>,
    stop: &StopState<E>,
) {
    for batch in stamped.iter() {
        let (batch_id, version) = (batch.id, cx.base + batch.ts);
        let written = block_on(write_batch(cx, batch, hook, stop, &OsThreads::default()));
        let completion = Completion { batch_id, version, written };
        if let Some(o) = observer {
            o.written(&completion);
        }
        // The session may be gone (closing): nobody waits for the completion then.
        let _ = done.send(completion);
    }
}

/// The device loop's state: what the session's thread needs to take read batches, stamp and
/// step them in order, and hand them to the writers (the [`Session`](crate::engine::Session)
/// adds the epoch's submissions and its public calls).
pub(crate) struct DeviceLoop<'a, M: Model, S: RowStorage + ?Sized> {
    pub cx: &'a RunCtx<'a, S>,
    pub stop: &'a StopState<M::Error>,
    pub hook: Option<&'a StageHook>,
    pub observer: Option<&'a dyn Observer>,
    pub device: &'a mut dyn DeviceQueue<M>,
    pub model: &'a mut M,
    pub seq: Sequencer,
    /// `None` in `Sync` mode: every stage runs inline in `submit`.
    pub lanes: Option<Lanes<M::Data>>,
    /// Read batches that came before their turn.
    pub arrivals: Arrivals<M::Data>,
    /// The ts of this epoch's first batch.
    pub epoch_ts: u64,
    /// Batches of this epoch the device took (stamped, or failed).
    pub processed: usize,
    /// Completions of this epoch received.
    pub acknowledged: u64,
    pub completions: Vec<Completion>,
}

impl<'a, M: Model, S: RowStorage + ?Sized> DeviceLoop<'a, M, S> {
    pub(crate) fn new(
        cx: &'a RunCtx<'a, S>,
        stop: &'a StopState<M::Error>,
        hook: Option<&'a StageHook>,
        observer: Option<&'a dyn Observer>,
        device: &'a mut dyn DeviceQueue<M>,
        model: &'a mut M,
        lanes: Option<Lanes<M::Data>>,
    ) -> Self {
        DeviceLoop {
            cx,
            stop,
            hook,
            observer,
            device,
            model,
            seq: Sequencer::default(),
            lanes,
            arrivals: Arrivals::default(),
            epoch_ts: 0,
            processed: 0,
            acknowledged: 0,
            completions: Vec::new(),
        }
    }

    pub(crate) fn lanes(&self) -> &Lanes<M::Data> {
        self.lanes.as_ref().expect("threaded session")
    }

    /// Tell the observer of the batch just collected.
    pub(crate) fn observe_stamp(&self) {
        if let (Some(o), Some(stamp)) = (self.observer, self.seq.order.last()) {
            o.stamped(&epoch_local(*stamp, self.epoch_ts));
        }
    }

    pub(crate) fn acknowledge(&mut self, done: Completion) {
        self.acknowledged += 1;
        self.completions.push(done);
    }

    /// Do the device work that is ready now, and take the completions that arrived.
    pub(crate) fn pump(&mut self) {
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
    /// before it takes another, else take the batch whose turn it is (position
    /// [`processed`](Self::processed), from the [`Arrivals`] after moving every read batch there;
    /// waiting up to `POLL` for the readers if `wait`), else collect if its turn has not come.
    /// Returns whether it did any.
    pub(crate) fn device_step(&mut self, wait: bool) -> bool {
        if self.stop.is_stopped() {
            return false;
        }
        if self.seq.must_collect(self.cx, self.device.depth()) {
            self.collect_one();
            return true;
        }
        let lanes = self.lanes.as_ref().expect("threaded session");
        for job in lanes.staged.try_iter() {
            self.arrivals.arrive(job);
        }
        let job = match self.arrivals.take(self.processed) {
            Some(job) => job,
            None if self.seq.in_flight() > 0 => {
                self.collect_one();
                return true;
            }
            None if wait => {
                let Ok(job) = lanes.staged.recv_timeout(POLL) else { return false };
                self.arrivals.arrive(job);
                match self.arrivals.take(self.processed) {
                    Some(job) => job,
                    None => return true,
                }
            }
            None => return false,
        };
        if !block_on(admit(&self.seq, self.cx, self.stop, &OsThreads::default())) {
            return false;
        }
        self.took_one();
        let (cx, hook) = (self.cx, self.hook);
        match self.seq.submit(cx, &mut *self.device, &mut *self.model, job, hook, false) {
            Ok(()) if self.seq.must_collect(cx, self.device.depth()) => self.collect_one(),
            Ok(()) => {}
            Err(cause) => self.stop.fail(cause),
        }
        true
    }

    /// Whether the batch whose turn it is has arrived (the device can take it now).
    pub(crate) fn turn_ready(&self) -> bool {
        self.arrivals.ready(self.processed)
    }

    /// The device took the batch at position `processed`: count it, and let the readers run
    /// one further ahead.
    fn took_one(&mut self) {
        self.processed += 1;
        self.cx.set_taken(self.processed);
    }

    /// A new epoch: its positions start at 0. Every batch of the last one was taken, so none
    /// waits for its turn.
    pub(crate) fn new_epoch(&mut self) {
        debug_assert!(self.arrivals.is_empty(), "a batch of the last epoch was never taken");
        self.processed = 0;
        self.cx.set_taken(0);
    }

    /// Collect the oldest batch in flight and hand it to the writers. Batches lost to a device
    /// failure are acknowledged as unwritten (no writer will see them).
    pub(crate) fn collect_one(&mut self) {
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
    pub(crate) fn acknowledge_lost(&mut self, lost: Vec<(u64, u64)>) {
        for (ts, batch_id) in lost {
            self.acknowledge(Completion { batch_id, version: self.cx.base + ts, written: false });
        }
    }

    /// Collect every batch still in flight, stop or not: stamped batches are written.
    pub(crate) fn drain_device(&mut self) {
        while self.lanes.is_some() && self.seq.in_flight() > 0 {
            self.collect_one();
        }
    }

    /// Read, step and write one batch on this thread, through the same stage code: every batch
    /// of `Sync`, and a [`submit_inline`](Session::submit_inline) batch once the pipeline is
    /// empty. Either way no other batch is anywhere in the pipeline, so the batch is stamped
    /// `alone` ([`Sequencer::submit`]).
    pub(crate) fn run_inline(&mut self, position: usize, batch: Batch<M::Data>) {
        let (cx, stop, hook) = (self.cx, self.stop, self.hook);
        // The session empties the pipeline before an inline batch, so every earlier position
        // was taken: anything else would leave the device waiting for a position that never
        // comes, so the run stops and says so.
        if position != self.processed {
            let source = StageError::OutOfTurn { position, next: self.processed };
            return stop.fail(StopCause::StageFailed {
                stage: Stage::Device,
                batch_id: batch.id,
                source,
            });
        }
        let waiter = OsThreads::default();
        let staged = match block_on(read_batch(cx, position, batch, hook, stop, &waiter)) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(cause) => return stop.fail(cause),
        };
        self.took_one();
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
pub(crate) fn epoch_local(mut stamp: Stamp, base: u64) -> Stamp {
    stamp.ts -= base;
    stamp.read_prefix = stamp.read_prefix.saturating_sub(base);
    stamp.ste = stamp.ste.saturating_sub(base);
    stamp
}
