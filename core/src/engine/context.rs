//! The shared state of one run: the store, the MFT, the outstanding set, and the ts base.

use super::row_buffers::RowBuffers;
use super::{EngineError, HookAction, HookPoint, Mode, StageHook, StopCause};
use crate::mft::Mft;
use crate::outstanding::Outstanding;
use crate::storage::RowStorage;
use crate::store::Version;
use std::sync::Arc;

/// What every stage of one run shares. Timestamps inside a run are run-local (`0, 1, 2, …`);
/// the store sees `base + ts`, so versions keep increasing across runs (epochs) on one store.
pub(crate) struct RunCtx<'s, S: RowStorage + ?Sized> {
    pub store: &'s S,
    pub mft: Mft,
    pub outstanding: Outstanding,
    pub mode: Mode,
    pub base: u64,
    pub width: usize,
    /// Batch row buffers, reused across the session's batches.
    pub buffers: Arc<RowBuffers>,
}

impl<'s, S: RowStorage + ?Sized> RunCtx<'s, S> {
    pub fn new(store: &'s S, mode: Mode, slots: Option<usize>) -> Result<Self, EngineError> {
        let base = store.next_version().map_err(EngineError::Storage)?;
        if base >= (1 << 62) {
            return Err(EngineError::TimestampsExhausted);
        }
        let slots = slots.unwrap_or(1);
        Ok(RunCtx {
            store,
            mft: Mft::new(slots),
            outstanding: Outstanding::new(slots),
            mode,
            base,
            width: store.width(),
            buffers: Arc::default(),
        })
    }

    /// The run-local ts of a version read from the store (`None`: from before this run).
    pub fn local(&self, v: Version) -> Option<u64> {
        v.ts().and_then(|t| t.checked_sub(self.base))
    }
}

/// Call the test hook, if any, at `point` of batch `id`.
pub(crate) fn at(hook: Option<&StageHook>, point: HookPoint, id: u64) -> Result<(), StopCause> {
    let Some(h) = hook else { return Ok(()) };
    match (h.0)(point, id) {
        HookAction::Continue => Ok(()),
        HookAction::Delay(d) => {
            std::thread::sleep(d);
            Ok(())
        }
        HookAction::Fail => Err(StopCause::Injected { point, batch_id: id }),
    }
}

/// What one action of a stage task did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// It did something; call again.
    Progressed,
    /// It could not act now (e.g. no free outstanding slot); nothing changed.
    Blocked,
    /// The task is complete.
    Done,
}
