//! The workers of a dispatcher: the run-time bound `m` and per-worker start records (what a
//! worker saw when its step started, read back when the step finishes, to report its τ).
//!
//! `m` is advisory (paper 001 §3: it shapes parallelism, not safety), so it is read and written
//! Relaxed; workers see a new bound on their next start.
//!
//! Algorithm 1 gives each worker at most one step in flight, so slot `w` has a single writer
//! and a single reader — worker `w` itself — and needs no synchronization beyond program order
//! (a caller that moves a worker between threads already orders its start before its finish).

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

use super::{DispatchError, WorkerId};

/// One worker's start word and its count of rejected steps.
#[derive(Default)]
struct Slot {
    seen: AtomicU64,
    rejected: AtomicU64,
}

/// The bound `m` and one padded slot per worker (padding keeps workers from sharing a cache
/// line, so per-worker statistics cost no contention).
pub(crate) struct Workers {
    m: AtomicUsize,
    slots: Box<[CachePadded<Slot>]>,
    /// Rejections of finishes that named no valid worker.
    stray_rejected: AtomicU64,
}

impl Workers {
    /// `m` workers now, room for `capacity` (at least `m`).
    pub(crate) fn new(m: usize, capacity: usize) -> Result<Self, DispatchError> {
        let capacity = capacity.max(1);
        let slots = (0..capacity).map(|_| CachePadded::new(Slot::default())).collect();
        let w = Self { m: AtomicUsize::new(1), slots, stray_rejected: AtomicU64::new(0) };
        w.set(m)?;
        Ok(w)
    }

    /// May `worker` start a step under the current bound?
    #[inline]
    pub(crate) fn admits(&self, worker: WorkerId) -> bool {
        worker < self.get()
    }

    /// The current bound `m`.
    #[inline]
    pub(crate) fn get(&self) -> usize {
        // Relaxed: advisory bound (module docs).
        self.m.load(Ordering::Relaxed)
    }

    /// Change the bound: `1 ≤ m ≤ capacity`, else a typed error and no change.
    pub(crate) fn set(&self, m: usize) -> Result<(), DispatchError> {
        if m == 0 {
            return Err(DispatchError::NoWorkers);
        }
        if m > self.capacity() {
            return Err(DispatchError::TooManyWorkers { m, capacity: self.capacity() });
        }
        // Relaxed: advisory bound (module docs).
        self.m.store(m, Ordering::Relaxed);
        Ok(())
    }

    /// How many workers have a slot.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Record `value` for `worker`'s step that is starting (ignored for an out-of-range worker).
    #[inline]
    pub(crate) fn record(&self, worker: WorkerId, value: u64) {
        if let Some(s) = self.slots.get(worker) {
            // Relaxed: written and read back by the same worker (module docs).
            s.seen.store(value, Ordering::Relaxed);
        }
    }

    /// The value recorded by `worker`'s latest start.
    #[inline]
    pub(crate) fn seen(&self, worker: WorkerId) -> Option<u64> {
        // Relaxed: written and read back by the same worker (module docs).
        self.slots.get(worker).map(|s| s.seen.load(Ordering::Relaxed))
    }

    /// Count a rejected step of `worker`.
    #[inline]
    pub(crate) fn count_rejected(&self, worker: WorkerId) {
        let counter = self.slots.get(worker).map_or(&self.stray_rejected, |s| &s.rejected);
        // Relaxed: a statistic; an RMW (on the worker's own line) so misuse cannot lose counts.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Rejected steps over all workers (a statistic; exact once the workers are quiescent).
    pub(crate) fn rejected(&self) -> u64 {
        // Relaxed: statistics.
        let stray = self.stray_rejected.load(Ordering::Relaxed);
        stray + self.slots.iter().map(|s| s.rejected.load(Ordering::Relaxed)).sum::<u64>()
    }
}
