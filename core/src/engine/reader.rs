//! The reader stage: announce the batch in the outstanding set (MFT/STE), then read its rows and
//! their versions from the store.

use crate::engine::context::{Progress, RunCtx, at};
use crate::engine::error::{Stage, StopCause};
use crate::engine::hook::{HookPoint, StageHook};
use crate::engine::mode::{AsyncWrite, Mode};
use crate::engine::model::Batch;
use crate::engine::row_buffers::RowBuffers;
use crate::mutation::{self, Mutant};
use crate::outstanding::Registration;
use crate::storage::RowStorage;
use crate::storage::prefetch_ahead;

/// A batch that has been read: on its way to the device.
pub(crate) struct ReadBatch<D> {
    pub position: usize,
    pub id: u64,
    pub data: D,
    pub ids: Vec<u64>,
    pub values: Vec<f32>,
    /// Run-local ts of the version read, per row (`None`: from before the run).
    pub read: Vec<Option<u64>>,
    pub registration: Option<Registration>,
    pub read_prefix: u64,
    /// The values as read (`Async(AddDelta)` only).
    pub original: Option<Vec<f32>>,
}

/// A reader working on one batch, one action (register, or read one row) per [`advance`](ReadTask::advance).
pub(crate) struct ReadTask<D> {
    staged: ReadBatch<D>,
    next_row: usize,
    /// Whether the batch is within the device's read-ahead (it may register and read).
    started: bool,
}

impl<D> ReadTask<D> {
    /// A task reading `batch` into a buffer from `buffers` (its contents are overwritten row by
    /// row before the batch leaves the reader).
    pub fn new(position: usize, batch: Batch<D>, width: usize, buffers: &RowBuffers) -> Self {
        let n = batch.rows.len();
        ReadTask {
            staged: ReadBatch {
                position,
                id: batch.id,
                data: batch.data,
                ids: batch.rows,
                values: buffers.take(n * width),
                read: vec![None; n],
                registration: None,
                read_prefix: 0,
                original: None,
            },
            next_row: 0,
            started: false,
        }
    }

    fn registered_or_untimed<S: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, S>) -> bool {
        !cx.mode.timestamped() || self.staged.registration.is_some()
    }

    pub fn is_done<S: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, S>) -> bool {
        self.next_row == self.staged.ids.len() && self.registered_or_untimed(cx)
    }

    /// **Invariant (announce before read):** a timestamped batch reads no row before
    /// `Outstanding::register` returned, so every row it reads reflects every write with
    /// `ts < read_prefix` (see [`crate::outstanding::Outstanding`]); validation relies on it.
    pub fn advance<S: RowStorage + ?Sized, E>(
        &mut self,
        cx: &RunCtx<'_, S>,
        hook: Option<&StageHook>,
    ) -> Result<Progress, StopCause<E>> {
        if self.is_done(cx) {
            return Ok(Progress::Done);
        }
        if !self.started {
            // Start only within the device's read-ahead: the liveness of the device's
            // submission order (`engine/arrivals.rs`).
            if !cx.may_read(self.staged.position) {
                return Ok(Progress::Blocked);
            }
            self.started = true;
        }
        let n = self.staged.ids.len();
        let reads_first = mutation::active(Mutant::ReadBeforeAnnounce);
        if !self.registered_or_untimed(cx) && (!reads_first || self.next_row == n) {
            let Ok(reg) = cx.outstanding.register(&cx.mft) else {
                return Ok(Progress::Blocked);
            };
            self.staged.read_prefix = reg.prefix();
            self.staged.registration = Some(reg);
            at(hook, HookPoint::ReadRows, self.staged.id)?;
            return Ok(self.progress(cx));
        }
        let i = self.next_row;
        prefetch_ahead(cx.store, &self.staged.ids, i);
        let (id, w) = (self.staged.ids[i], cx.width);
        let out = &mut self.staged.values[i * w..(i + 1) * w];
        let fail = |e: crate::row_store::StoreError| StopCause::StageFailed {
            stage: Stage::Reader,
            batch_id: self.staged.id,
            source: e.into(),
        };
        if cx.mode.timestamped() {
            let v = cx.store.read(id, out).map_err(fail)?;
            self.staged.read[i] = cx.local(v);
        } else {
            cx.store.read_unordered(id, out).map_err(fail)?;
        }
        self.next_row += 1;
        Ok(self.progress(cx))
    }

    fn progress<S: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, S>) -> Progress {
        if self.is_done(cx) { Progress::Done } else { Progress::Progressed }
    }

    /// The read batch (call once [`advance`](ReadTask::advance) said `Done`).
    pub fn into_staged(mut self, mode: Mode) -> ReadBatch<D> {
        if mode == Mode::Async(AsyncWrite::AddDelta) {
            self.staged.original = Some(self.staged.values.clone());
        }
        self.staged
    }
}
