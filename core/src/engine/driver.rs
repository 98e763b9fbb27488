//! The reader → device → writer driver, written once: how one batch is read, admitted to the
//! device, stamped, and written, whatever schedules the stages.
//!
//! The stage tasks ([`ReadTask`], [`Sequencer`], [`WriteTask`]) do one action per call and say
//! whether they acted or are blocked. The driver's stage functions ([`read_batch`], [`admit`],
//! [`write_batch`]) are `async`: after every action they await the [`Waiter`], and that await is
//! the only thing that differs between schedulers:
//!
//! - [`OsThreads`]: the threaded pipeline and session ([`crate::engine::Engine`]) on OS threads:
//!   after a blocked action spin, yield, then sleep briefly (a blocked stage must not starve the
//!   others on 2 cores); the futures never suspend and [`block_on`] runs them to the end;
//! - `ModelThreads` (under `--cfg ordo_loom` or `--cfg ordo_shuttle`): the checker's threads
//!   (`engine::model_harness`): a blocked action yields to the checker's scheduler, so it
//!   explores the wait instead of an unbounded spin; again run by [`block_on`];
//! - the deterministic simulation (`engine::simulation`, feature `testing`): every action
//!   suspends the stage's future, and the simulation polls the futures of all stages one action
//!   at a time, in the order a schedule picks.
//!
//! So one batch goes through the same code under every scheduler, hooks, panics and the stop
//! flag included; the schedulers own only the queues between the stages.

use crate::engine::context::{Progress, RunCtx, at};
use crate::engine::error::{Stage, StopCause, guarded};
use crate::engine::hook::{HookPoint, StageHook};
use crate::engine::model::Batch;
use crate::engine::reader::{ReadBatch, ReadTask};
use crate::engine::sequencer::{Sequencer, Stamped};
use crate::engine::stop::StopState;
use crate::engine::writer::WriteTask;
use crate::storage::RowStorage;
use crossbeam_utils::Backoff;
use std::future::{Future, ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What a stage does between two of its actions (how the stages are scheduled).
pub(crate) trait Waiter {
    /// The stage acted: the next wait starts afresh.
    fn progressed(&self) -> impl Future<Output = ()>;
    /// The stage could not act: wait a little before trying again.
    fn blocked(&self) -> impl Future<Output = ()>;
}

/// Stages on OS threads: after a blocked action spin, then yield, then sleep 50 µs; never
/// suspends.
#[derive(Default)]
pub(crate) struct OsThreads(Backoff);

impl Waiter for OsThreads {
    fn progressed(&self) -> impl Future<Output = ()> {
        self.0.reset();
        ready(())
    }
    fn blocked(&self) -> impl Future<Output = ()> {
        if self.0.is_completed() {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            self.0.snooze();
        }
        ready(())
    }
}

/// Stages on loom or shuttle threads: a blocked action yields to the checker's scheduler;
/// never suspends.
#[cfg(all(feature = "testing", any(ordo_loom, ordo_shuttle)))]
#[derive(Default)]
pub(crate) struct ModelThreads;

#[cfg(all(feature = "testing", any(ordo_loom, ordo_shuttle)))]
impl Waiter for ModelThreads {
    fn progressed(&self) -> impl Future<Output = ()> {
        ready(())
    }
    fn blocked(&self) -> impl Future<Output = ()> {
        crate::sync::thread::yield_now();
        ready(())
    }
}

/// Run a stage future on this thread to its end. With [`OsThreads`] or `ModelThreads` it
/// never suspends (their waits happen inside the await), so this is one poll.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Read one batch to completion; `Ok(None)` if the run stopped while it waited for a slot.
/// A panic in the reader is a [`StopCause::StageFailed`] of [`Stage::Reader`].
pub(crate) async fn read_batch<W: Waiter, D, S: RowStorage + ?Sized, E>(
    cx: &RunCtx<'_, S>,
    position: usize,
    batch: Batch<D>,
    hook: Option<&StageHook>,
    stop: &StopState<E>,
    waiter: &W,
) -> Result<Option<ReadBatch<D>>, StopCause<E>> {
    let id = batch.id;
    guarded(Stage::Reader, id, || at(hook, HookPoint::ReadStart, id))?;
    let mut task = ReadTask::new(position, batch, cx.width, &cx.buffers);
    loop {
        match guarded(Stage::Reader, id, || task.advance(cx, hook))? {
            Progress::Done => return Ok(Some(task.into_staged(cx.mode))),
            Progress::Progressed => waiter.progressed().await,
            Progress::Blocked | Progress::Abandoned if stop.is_stopped() => return Ok(None),
            Progress::Blocked | Progress::Abandoned => waiter.blocked().await,
        }
    }
}

/// Wait until the device may stamp its next batch (admission control: the next ts fits the MFT
/// window). `false` if the run stopped while waiting.
pub(crate) async fn admit<W: Waiter, S: RowStorage + ?Sized, E>(
    seq: &Sequencer,
    cx: &RunCtx<'_, S>,
    stop: &StopState<E>,
    waiter: &W,
) -> bool {
    while !seq.admits(cx) {
        if stop.is_stopped() {
            return false;
        }
        waiter.blocked().await;
    }
    true
}

/// Write one stamped batch to completion; on failure roll back its landed rows, record it as
/// unwritten and stop the run; held back after an earlier batch's failure, record it as
/// unwritten (see [`WriteTask`] for the prefix this keeps). Returns whether it was fully
/// written. (A writer blocks only while the batches before it write.)
pub(crate) async fn write_batch<W: Waiter, S: RowStorage + ?Sized, E>(
    cx: &RunCtx<'_, S>,
    stamped: Stamped,
    hook: Option<&StageHook>,
    stop: &StopState<E>,
    waiter: &W,
) -> bool {
    let (ts, id) = (stamped.ts, stamped.id);
    let mut task = WriteTask::new(stamped);
    let res = async {
        guarded(Stage::Writer, id, || at(hook, HookPoint::WriteStart, id))?;
        loop {
            match guarded(Stage::Writer, id, || task.advance(cx, hook))? {
                Progress::Done => return Ok(true),
                Progress::Abandoned => return Ok(false),
                Progress::Progressed => waiter.progressed().await,
                Progress::Blocked => waiter.blocked().await,
            }
        }
    }
    .await;
    if res.is_err() {
        task.roll_back(cx);
    }
    task.recycle(&cx.buffers);
    match res {
        Ok(true) => true,
        Ok(false) => {
            stop.unwritten(ts, id);
            false
        }
        Err(cause) => {
            stop.unwritten(ts, id);
            stop.fail(cause);
            // After the cause: a writer held back by it finds the cause already in.
            cx.hold_back(ts);
            false
        }
    }
}
