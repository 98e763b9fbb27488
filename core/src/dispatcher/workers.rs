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

/// The bound `m` and one padded start word per worker (padding keeps workers from sharing a
/// cache line).
pub(crate) struct Workers {
    m: AtomicUsize,
    slots: Box<[CachePadded<AtomicU64>]>,
}

impl Workers {
    /// `m` workers now, room for `capacity` (at least `m`).
    pub(crate) fn new(m: usize, capacity: usize) -> Result<Self, DispatchError> {
        let capacity = capacity.max(1);
        let slots = (0..capacity).map(|_| CachePadded::new(AtomicU64::new(0))).collect();
        let w = Self { m: AtomicUsize::new(1), slots };
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
            s.store(value, Ordering::Relaxed);
        }
    }

    /// The value recorded by `worker`'s latest start.
    #[inline]
    pub(crate) fn seen(&self, worker: WorkerId) -> Option<u64> {
        // Relaxed: written and read back by the same worker (module docs).
        self.slots.get(worker).map(|s| s.load(Ordering::Relaxed))
    }
}
