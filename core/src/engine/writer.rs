//! The writer stage: write every row of a stamped batch if it is newer than the store's copy,
//! then report the ts finished in the MFT, then leave the outstanding set.

use super::context::{Progress, RunCtx, at};
use super::device::Stamped;
use super::error::Stage;
use super::{AsyncWrite, HookPoint, Mode, StageError, StageHook, StopCause};
use crate::mutation::{self, Mutant};
use crate::storage::RowStorage;
use crate::storage::prefetch_ahead;

/// A writer working on one stamped batch, one action (write one row, finish, or deregister) per
/// [`advance`](WriteTask::advance).
pub(crate) struct WriteTask {
    stamped: Stamped,
    next_row: usize,
    finished: bool,
    scratch: Vec<f32>,
}

impl WriteTask {
    pub fn new(stamped: Stamped) -> Self {
        WriteTask { stamped, next_row: 0, finished: false, scratch: Vec::new() }
    }

    /// **Invariant (finish after visible):** `Mft::finish(ts)` is called only after every row
    /// write of `ts` has returned (each released by its row's TID word), so a batch that acquires
    /// a finished prefix `> ts` sees them; only then does the batch leave the outstanding set.
    pub fn advance<S: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, S>,
        hook: Option<&StageHook>,
    ) -> Result<Progress, StopCause> {
        let n = self.stamped.block.len();
        let timed = cx.mode.timestamped();
        let finish_first = mutation::active(Mutant::MftBeforeWritesVisible);
        if timed && !self.finished && (finish_first || self.next_row == n) {
            if !finish_first {
                at(hook, HookPoint::WriteFinish, self.stamped.id)?;
            }
            cx.mft.finish(self.stamped.ts).map_err(|e| self.fail(e.into()))?;
            self.finished = true;
            return Ok(Progress::Progressed);
        }
        if self.next_row < n {
            self.write_row(cx, self.next_row)?;
            self.next_row += 1;
            return Ok(Progress::Progressed);
        }
        if let Some(reg) = self.stamped.registration.take() {
            cx.outstanding.deregister(reg);
        }
        Ok(Progress::Done)
    }

    fn write_row<S: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, S>,
        i: usize,
    ) -> Result<(), StopCause> {
        let block = &self.stamped.block;
        prefetch_ahead(cx.store, block.ids(), i);
        let (id, row) = (block.ids()[i], block.row(i));
        let res = match cx.mode {
            Mode::Async(AsyncWrite::Overwrite) => cx.store.overwrite_unordered(id, row),
            Mode::Async(AsyncWrite::AddDelta) => {
                let orig = block.original_row(i).unwrap_or(row);
                self.scratch.clear();
                self.scratch.extend(row.iter().zip(orig).map(|(n, o)| n - o));
                cx.store.add_unordered(id, &self.scratch)
            }
            _ => cx.store.write_if_newer(id, cx.base + self.stamped.ts, row).map(|_| ()),
        };
        res.map_err(|e| self.fail(e.into()))
    }

    fn fail(&self, source: StageError) -> StopCause {
        StopCause::StageFailed { stage: Stage::Writer, batch_id: self.stamped.id, source }
    }
}
