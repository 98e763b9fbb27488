//! The writer stage: write every row of a stamped batch if it is newer than the store's copy,
//! then report the ts finished in the MFT, then leave the outstanding set.

use crate::engine::context::{Progress, RunCtx, at};
use crate::engine::error::{Stage, StageError, StopCause};
use crate::engine::hook::{HookPoint, StageHook};
use crate::engine::mode::{AsyncWrite, Mode};
use crate::engine::row_buffers::RowBuffers;
use crate::engine::sequencer::Stamped;
use crate::mutation::{self, Mutant};
use crate::storage::RowStorage;
use crate::storage::prefetch_ahead;

/// A writer working on one stamped batch, one action (write one row, finish, or deregister) per
/// [`advance`](WriteTask::advance).
///
/// **Invariant (prefix state after a failed write):** in a timestamped mode, the store holds
/// the writes of exactly the batches `ts < p` for some `p`, at every moment and so after any
/// failure, with `p` the number of batches the error's `prefix` names. Two rules keep it:
/// 1. *Hold-back:* a batch writes its first row only once every earlier batch has finished
///    (`Mft::prefix() ≥ ts`, finish after visible), and never once an earlier batch was given
///    up ([`RunCtx::held_back`]): it is then given up too, unwritten. So batches write one
///    after the other in ts order, and no batch after a failed one writes anything.
/// 2. *Roll-back:* before writing a row a batch copies the row's current values; if its write
///    task fails after some rows landed, it writes those copies back (at version `ts + 1`,
///    newer than its own writes; no later batch writes after it, by 1). By 1, when batch `f`
///    writes, the store holds exactly the batches `< f`, so the copies are their values.
///    *No copies* where nothing can fail once a row landed: a storage whose writes fail only
///    on bad arguments ([`RowStorage::write_fails_only_on_bad_arguments`]; the batch's rows
///    and width were checked before the run, and all its rows share one timestamp, so only
///    its first write can fail) and no fault-injection hook installed (a hook can fail the
///    batch after its rows). The copy was a third of a writer's time on the KGE step's
///    batches. If a batch fails with rows landed and no copies of them all the same, its
///    roll-back [`tears`](RunCtx::tear) the store instead.
///
/// Hence after a failure of `f` the store equals the replay of the order's first `f` batches;
/// if a roll-back write fails too, or a roll-back lacks copies, the error names no prefix
/// (`None`). Rows of different
/// batches are still written in parallel with the device and the readers; only writes of
/// consecutive batches no longer overlap each other. Killed as mutant
/// [`Mutant::WritesNotHeldBack`] by `core/tests/prop_write_prefix.rs`, rule 2's "only the
/// landed rows" as [`Mutant::RollBackUnsavedRows`] by its write failing midway, and its tear
/// without copies as [`Mutant::RollBackWithoutCopies`] by a storage that breaks its promise.
pub(crate) struct WriteTask {
    stamped: Stamped,
    next_row: usize,
    finished: bool,
    /// Whether the hold-back let this batch start writing.
    started: bool,
    /// Whether this batch copies each row before overwriting it (rule 2; decided at its start).
    copies: bool,
    scratch: Vec<f32>,
    /// The values the landed rows held before this batch wrote them (rule 2): row `i`'s at
    /// `i × width`, for the first `saved` rows. A buffer of the session's pool, taken at its
    /// full `rows × width` at the first write (not grown row by row: growing it copied and
    /// page-faulted megabytes per batch) and given back by [`recycle`](WriteTask::recycle).
    undo: Vec<f32>,
    saved: usize,
}

impl WriteTask {
    pub fn new(stamped: Stamped) -> Self {
        WriteTask {
            stamped,
            next_row: 0,
            finished: false,
            started: false,
            copies: true,
            scratch: Vec::new(),
            undo: Vec::new(),
            saved: 0,
        }
    }

    /// Give the undo buffer back to the session's pool (after the task ended, written or not).
    pub fn recycle(&mut self, buffers: &RowBuffers) {
        buffers.put(std::mem::take(&mut self.undo));
    }

    /// **Invariant (finish after visible):** `Mft::finish(ts)` is called only after every row
    /// write of `ts` has returned (each released by its row's TID word), so a batch that acquires
    /// a finished prefix `> ts` sees them; only then does the batch leave the outstanding set.
    pub fn advance<S: RowStorage + ?Sized, E>(
        &mut self,
        cx: &RunCtx<'_, S>,
        hook: Option<&StageHook>,
    ) -> Result<Progress, StopCause<E>> {
        let n = self.stamped.block.len();
        let timed = cx.mode.timestamped();
        if timed && !self.started && !mutation::active(Mutant::WritesNotHeldBack) {
            let ts = self.stamped.ts;
            if cx.held_back(ts) {
                return Ok(Progress::Abandoned);
            }
            if cx.mft.prefix() < ts {
                return Ok(Progress::Blocked);
            }
        }
        if !self.started {
            self.started = true;
            self.copies = hook.is_some() || !cx.store.write_fails_only_on_bad_arguments();
        }
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

    /// After a failure of this task: write back the values its landed rows held before
    /// (rule 2 of the invariant); a failed roll-back [`tears`](RunCtx::tear) the store.
    pub fn roll_back<S: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, S>) {
        if !cx.mode.timestamped() {
            return;
        }
        // Rows `< next_row` landed; a batch without copies (rule 2) has none to restore them.
        if self.next_row > self.saved && !mutation::active(Mutant::RollBackWithoutCopies) {
            cx.tear();
            return;
        }
        if self.saved == 0 {
            return;
        }
        let block = &self.stamped.block;
        let version = cx.base + self.stamped.ts + 1;
        let saved = if mutation::active(Mutant::RollBackUnsavedRows) {
            &self.undo[..]
        } else {
            &self.undo[..self.saved * cx.width]
        };
        for (i, old) in saved.chunks(cx.width.max(1)).enumerate() {
            if cx.store.write_if_newer(block.ids()[i], version, old).is_err() {
                cx.tear();
            }
        }
    }

    fn write_row<S: RowStorage + ?Sized, E>(
        &mut self,
        cx: &RunCtx<'_, S>,
        i: usize,
    ) -> Result<(), StopCause<E>> {
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
            _ if !self.copies => {
                cx.store.write_if_newer(id, cx.base + self.stamped.ts, row).map(|_| ())
            }
            _ => {
                if self.undo.is_empty() {
                    self.undo = cx.buffers.take(block.len() * cx.width);
                }
                let at = self.saved * cx.width;
                cx.store.read(id, &mut self.undo[at..at + cx.width]).and_then(|_| {
                    self.saved += 1;
                    cx.store.write_if_newer(id, cx.base + self.stamped.ts, row).map(|_| ())
                })
            }
        };
        res.map_err(|e| self.fail(e.into()))
    }

    fn fail<E>(&self, source: StageError) -> StopCause<E> {
        StopCause::StageFailed { stage: Stage::Writer, batch_id: self.stamped.id, source }
    }
}
