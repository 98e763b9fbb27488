//! The reader → device → writer driver, written once: how one batch is read, admitted to the
//! device, and written, whatever schedules the stages.
//!
//! The stage tasks ([`ReadTask`], [`Sequencer`], [`WriteTask`]) do one action per call and say
//! when they are blocked; this module drives them to completion. The only thing that differs
//! between schedulers is what a blocked stage does while it waits, the [`Waiter`]:
//!
//! - [`OsThreads`]: the threaded pipeline and session ([`super::Engine`]) on OS threads: spin,
//!   yield, then sleep briefly (a blocked stage must not starve the others on 2 cores);
//! - [`ModelThreads`] (under `--cfg ordo_loom` or `--cfg ordo_shuttle`): the checker's threads
//!   ([`super::model_harness`]): yield to the checker's scheduler, so it explores the wait
//!   instead of an unbounded spin.
//!
//! The deterministic simulation ([`super::simulation`], feature `testing`) is itself the
//! scheduler: it steps the same tasks one action at a time in an order a schedule picks, so a
//! blocked action there is simply not taken.

use super::context::{Progress, RunCtx, at};
use super::device::{Sequencer, Stamped, panic_message};
use super::error::Stage;
use super::pipeline::StopState;
use super::reader::{ReadTask, Staged};
use super::writer::WriteTask;
use super::{Batch, HookPoint, StageError, StageHook, StopCause};
use crate::storage::RowStorage;
use crossbeam_utils::Backoff;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// What a stage does while it cannot act (how the stages are scheduled).
pub(crate) trait Waiter: Default {
    /// The stage acted: the next wait starts afresh.
    fn progressed(&self);
    /// The stage could not act: wait a little before trying again.
    fn blocked(&self);
}

/// Stages on OS threads: spin, then yield, then sleep 50 µs.
#[derive(Default)]
pub(crate) struct OsThreads(Backoff);

impl Waiter for OsThreads {
    fn progressed(&self) {
        self.0.reset();
    }
    fn blocked(&self) {
        if self.0.is_completed() {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            self.0.snooze();
        }
    }
}

/// Stages on loom or shuttle threads: yield to the checker's scheduler.
#[cfg(any(ordo_loom, ordo_shuttle))]
#[derive(Default)]
pub(crate) struct ModelThreads;

#[cfg(any(ordo_loom, ordo_shuttle))]
impl Waiter for ModelThreads {
    fn progressed(&self) {}
    fn blocked(&self) {
        crate::sync::thread::yield_now();
    }
}

/// Read one batch to completion; `Ok(None)` if the run stopped while it waited for a slot.
pub(crate) fn read_batch<W: Waiter, D, S: RowStorage + ?Sized>(
    cx: &RunCtx<'_, S>,
    position: usize,
    batch: Batch<D>,
    hook: Option<&StageHook>,
    stop: &StopState,
) -> Result<Option<Staged<D>>, StopCause> {
    at(hook, HookPoint::ReadStart, batch.id)?;
    let mut task = ReadTask::new(position, batch, cx.width);
    let waiter = W::default();
    loop {
        match task.advance(cx, hook)? {
            Progress::Done => return Ok(Some(task.into_staged(cx.mode))),
            Progress::Progressed => waiter.progressed(),
            Progress::Blocked if stop.is_stopped() => return Ok(None),
            Progress::Blocked => waiter.blocked(),
        }
    }
}

/// Wait until the device may stamp its next batch (admission control: the next ts fits the MFT
/// window). `false` if the run stopped while waiting.
pub(crate) fn admit<W: Waiter, S: RowStorage + ?Sized>(
    seq: &Sequencer,
    cx: &RunCtx<'_, S>,
    stop: &StopState,
) -> bool {
    let waiter = W::default();
    while !seq.admits(cx) {
        if stop.is_stopped() {
            return false;
        }
        waiter.blocked();
    }
    true
}

/// Write one stamped batch to completion; on failure record it as unwritten and stop the run.
/// Returns whether it was fully written. (A writer never blocks.)
pub(crate) fn write_batch<S: RowStorage + ?Sized>(
    cx: &RunCtx<'_, S>,
    stamped: Stamped,
    hook: Option<&StageHook>,
    stop: &StopState,
) -> bool {
    let (ts, id) = (stamped.ts, stamped.id);
    let res = guarded(Stage::Writer, id, || {
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
pub(crate) fn guarded<T>(
    stage: Stage,
    batch_id: u64,
    f: impl FnOnce() -> Result<T, StopCause>,
) -> Result<T, StopCause> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(StopCause::StageFailed {
            stage,
            batch_id,
            source: StageError::Panicked(panic_message(&*p)),
        })
    })
}
