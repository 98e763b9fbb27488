//! `Async`: fully asynchronous (Hogwild) dispatching — every step of a worker within the bound
//! `m` starts, and every finished step is accepted (paper 001's *Async* baseline).
//!
//! Staleness is unbounded; [`Dispatcher::finish_step_detailed`] reports each step's τ: the
//! accepted count when it finishes minus the accepted count it saw when it started (the latter
//! read just before its start index is taken, so the report is never below the true τ).
//!
//! ```
//! use ordo::dispatcher::{Async, Dispatcher};
//! let d = Async::new(2).unwrap();
//! let a = d.try_start_step(0).unwrap();
//! let b = d.try_start_step(1).unwrap();
//! assert!(d.finish_step(1, b));
//! assert_eq!(d.finish_step_detailed(0, a).tau, Some(1)); // b was applied after a started
//! ```

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

use super::workers::Workers;
use super::{Decision, DispatchError, Dispatcher, StepIndex, Telemetry, WorkerId};

/// Accept-all dispatcher (module docs).
pub struct Async {
    started: CachePadded<AtomicU64>,
    accepted: CachePadded<AtomicU64>,
    /// The worker bound m and the per-worker start words.
    workers: Workers,
}

impl Async {
    /// `m ≥ 1` workers, capacity `m`.
    pub fn new(m: usize) -> Result<Self, DispatchError> {
        Self::with_capacity(m, m)
    }

    /// `m` workers now, up to `capacity` later via [`Dispatcher::set_workers`].
    pub fn with_capacity(m: usize, capacity: usize) -> Result<Self, DispatchError> {
        let workers = Workers::new(m, capacity)?;
        Ok(Self {
            started: CachePadded::new(AtomicU64::new(0)),
            accepted: CachePadded::new(AtomicU64::new(0)),
            workers,
        })
    }

    /// The worker capacity.
    pub fn capacity(&self) -> usize {
        self.workers.capacity()
    }

    /// Accept `worker`'s step; also returns how many steps were accepted before it.
    pub(crate) fn accept(&self, worker: WorkerId) -> (Decision, u64) {
        let seen = self.workers.seen(worker);
        // Relaxed: a counter; its modification order is the acceptance order.
        let seq = self.accepted.fetch_add(1, Ordering::Relaxed);
        let tau = seen.map_or(0, |s| seq.saturating_sub(s));
        (Decision { accepted: true, tau: Some(tau), interval: None }, seq)
    }
}

impl Dispatcher for Async {
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex> {
        if !self.workers.admits(worker) {
            return None;
        }
        // Relaxed: a counter read for τ telemetry; an older value only raises the report.
        self.workers.record(worker, self.accepted.load(Ordering::Relaxed));
        // Relaxed: unique indices need only the RMW's atomicity.
        Some(self.started.fetch_add(1, Ordering::Relaxed))
    }

    fn finish_step(&self, worker: WorkerId, step: StepIndex) -> bool {
        self.finish_step_detailed(worker, step).accepted
    }

    fn finish_step_detailed(&self, worker: WorkerId, _step: StepIndex) -> Decision {
        self.accept(worker).0
    }

    fn workers(&self) -> usize {
        self.workers.get()
    }

    fn set_workers(&self, m: usize) -> Result<(), DispatchError> {
        self.workers.set(m)
    }

    fn telemetry(&self) -> Option<Telemetry> {
        Some(Telemetry {
            // Relaxed: statistics.
            started: self.started.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_everything_and_counts_staleness() {
        let d = Async::with_capacity(3, 3).unwrap();
        let s: Vec<_> = (0..3).map(|w| d.try_start_step(w).unwrap()).collect();
        assert_eq!(s, vec![0, 1, 2]);
        let taus: Vec<_> = (0..3).map(|w| d.finish_step_detailed(w, s[w]).tau).collect();
        assert_eq!(taus, vec![Some(0), Some(1), Some(2)]);
        assert_eq!(d.telemetry().unwrap(), Telemetry { started: 3, accepted: 3, rejected: 0 });
        assert_eq!(d.set_workers(4), Err(DispatchError::TooManyWorkers { m: 4, capacity: 3 }));
        d.set_workers(1).unwrap();
        assert_eq!(d.try_start_step(1), None);
        assert_eq!(Async::new(0).err(), Some(DispatchError::NoWorkers));
    }
}
