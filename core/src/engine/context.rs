//! The shared state of one run: the store, the MFT, the outstanding set, and the ts base.

use crate::engine::config::EngineConfig;
use crate::engine::error::{EngineError, StopCause};
use crate::engine::hook::{HookAction, HookPoint, StageHook};
use crate::engine::mode::Mode;
use crate::engine::row_buffers::RowBuffers;
use crate::mft::Mft;
use crate::outstanding::Outstanding;
use crate::row_store::Version;
use crate::storage::RowStorage;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// The smallest ts whose writes did not all land (`u64::MAX` while none); see
    /// [`WriteTask`](crate::engine::writer::WriteTask) for the hold-back it drives.
    unwritten_from: AtomicU64,
    /// Whether a roll-back failed or had no copies to write, so the store holds no prefix of
    /// the order.
    torn: AtomicBool,
    /// Positions of the current epoch the device has taken: the next one it will take
    /// (see [`Arrivals`](crate::engine::arrivals::Arrivals) for the order it keeps).
    taken: AtomicUsize,
    /// How far past `taken` a reader may start a batch ([`EngineConfig::read_ahead`]).
    read_ahead: usize,
}

impl<'s, S: RowStorage + ?Sized> RunCtx<'s, S> {
    /// The context of a run of `config` (its mode, slots and read-ahead) on `store`.
    pub fn new<E>(store: &'s S, config: &EngineConfig) -> Result<Self, EngineError<E>> {
        let (mode, slots) = (config.mode, config.in_flight_slots());
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
            unwritten_from: AtomicU64::new(u64::MAX),
            torn: AtomicBool::new(false),
            taken: AtomicUsize::new(0),
            read_ahead: config.read_ahead(),
        })
    }

    /// Whether a reader may start the batch at `position` of the current epoch: it is within
    /// the read-ahead of the device's next position, so the batch the device waits for always
    /// finds an outstanding slot (the liveness argument in
    /// [`Arrivals`](crate::engine::arrivals::Arrivals)).
    pub fn may_read(&self, position: usize) -> bool {
        // Relaxed: a bound on how far readers run ahead, no data is published through it; a
        // stale (smaller) value only makes a reader wait a little longer.
        position < self.taken.load(Ordering::Relaxed) + self.read_ahead
    }

    /// The device has taken `taken` positions of the current epoch (0: a new epoch starts).
    pub fn set_taken(&self, taken: usize) {
        // Relaxed: as in `may_read`; a new epoch's batches reach the readers through the feed
        // channel, which orders this store before their check.
        self.taken.store(taken, Ordering::Relaxed);
    }

    /// Batch `ts` will not be fully written: hold back every later batch's writes.
    pub fn hold_back(&self, ts: u64) {
        // AcqRel: a read-modify-write, so concurrent calls keep the smallest; the writers that
        // test it only need to see it eventually (they wait on the MFT, not on this).
        self.unwritten_from.fetch_min(ts, Ordering::AcqRel);
    }

    /// Whether a batch before `ts` will not be fully written (so `ts` must not write).
    pub fn held_back(&self, ts: u64) -> bool {
        // Acquire: pairs with the AcqRel in `hold_back`.
        self.unwritten_from.load(Ordering::Acquire) < ts
    }

    /// A roll-back write failed, or found landed rows it kept no copies of: the store holds
    /// no prefix of the order.
    pub fn tear(&self) {
        // Release: read after the writers are joined (or finished), which orders it anyway.
        self.torn.store(true, Ordering::Release);
    }

    /// How many batches of an epoch's order the store holds exactly (`Some(p)`: the store
    /// equals the replay of its first `p` batches), given the epoch's stamped count and its
    /// unwritten `(ts, id)` (epoch-local, sorted). `None` where the mode makes no such claim
    /// (`Async`, `Bounded(k > 1)`) or a roll-back failed. Call once the writers are done.
    pub fn prefix(&self, stamped: u64, unwritten: &[(u64, u64)]) -> Option<u64> {
        // Acquire: pairs with `tear`.
        let exact = matches!(self.mode, Mode::Oac | Mode::Sync | Mode::Bounded(1))
            && !self.torn.load(Ordering::Acquire);
        exact.then(|| unwritten.first().map_or(stamped, |&(ts, _)| ts))
    }

    /// The run-local ts of a version read from the store (`None`: from before this run).
    pub fn local(&self, v: Version) -> Option<u64> {
        v.ts().and_then(|t| t.checked_sub(self.base))
    }
}

/// Call the test hook, if any, at `point` of batch `id`.
pub(crate) fn at<E>(
    hook: Option<&StageHook>,
    point: HookPoint,
    id: u64,
) -> Result<(), StopCause<E>> {
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
    /// It gave up without acting (a writer held back after an earlier batch's failure).
    Abandoned,
    /// The task is complete.
    Done,
}
