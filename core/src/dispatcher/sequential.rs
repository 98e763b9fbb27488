//! `Sequential`: one step at a time — a step starts only when none is in flight, and is always
//! accepted (τ = 0): plain sequential SGD behind the Dispatcher interface.
//!
//! One word holds the state: bit 63 set = a step is in flight and the low bits are its index;
//! clear = idle and the low bits are the next index. Starting and finishing are single CASes.
//!
//! ```
//! use ordo::dispatcher::{Dispatcher, Sequential};
//! let d = Sequential::new(2).unwrap();
//! let a = d.try_start_step(0).unwrap();
//! assert_eq!(d.try_start_step(1), None); // a is in flight
//! assert!(d.finish_step(0, a));
//! assert_eq!(d.try_start_step(1), Some(1));
//! ```

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

use super::{Decision, DispatchError, Dispatcher, StepIndex, Telemetry, WorkerId};

const BUSY: u64 = 1 << 63;

/// One-at-a-time dispatcher (module docs).
pub struct Sequential {
    word: AtomicU64,
    rejected: AtomicU64,
    workers: AtomicUsize,
}

impl Sequential {
    /// Workers `0..m` may take turns; `m ≥ 1`.
    pub fn new(m: usize) -> Result<Self, DispatchError> {
        if m == 0 {
            return Err(DispatchError::NoWorkers);
        }
        Ok(Self {
            word: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            workers: AtomicUsize::new(m),
        })
    }
}

impl Dispatcher for Sequential {
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex> {
        // Relaxed: advisory bound.
        if worker >= self.workers.load(Ordering::Relaxed) {
            return None;
        }
        // Acquire (load and CAS): the previous step's finish released its gradient's
        // application to the model before marking the dispatcher idle; this step's model copy
        // must see it.
        let cur = self.word.load(Ordering::Acquire);
        if cur & BUSY != 0 {
            return None;
        }
        self.word
            .compare_exchange(cur, cur | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| cur)
    }

    fn finish_step(&self, worker: WorkerId, step: StepIndex) -> bool {
        self.finish_step_detailed(worker, step).accepted
    }

    fn finish_step_detailed(&self, _worker: WorkerId, step: StepIndex) -> Decision {
        if step >= BUSY {
            return Decision::REJECTED;
        }
        // Release: see try_start_step. The step is accepted now and applied by the caller before
        // its next start; a caller that applies after finishing must order that itself.
        match self.word.compare_exchange(
            step | BUSY,
            step + 1,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => Decision { accepted: true, tau: Some(0), interval: None },
            Err(_) => {
                // Relaxed: a statistic. Not the step in flight.
                self.rejected.fetch_add(1, Ordering::Relaxed);
                Decision::REJECTED
            }
        }
    }

    fn workers(&self) -> usize {
        // Relaxed: advisory bound.
        self.workers.load(Ordering::Relaxed)
    }

    fn set_workers(&self, m: usize) -> Result<(), DispatchError> {
        if m == 0 {
            return Err(DispatchError::NoWorkers);
        }
        // Relaxed: advisory bound.
        self.workers.store(m, Ordering::Relaxed);
        Ok(())
    }

    fn telemetry(&self) -> Option<Telemetry> {
        // Relaxed: statistics.
        let w = self.word.load(Ordering::Relaxed);
        let idx = w & !BUSY;
        Some(Telemetry {
            started: idx + u64::from(w & BUSY != 0),
            accepted: idx,
            rejected: self.rejected.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_step_in_flight_finishes() {
        let d = Sequential::new(1).unwrap();
        assert!(!d.finish_step(0, 0), "nothing in flight");
        let a = d.try_start_step(0).unwrap();
        assert!(!d.finish_step(0, a + 1));
        assert!(d.finish_step(0, a));
        assert!(!d.finish_step(0, a), "finished twice");
        assert_eq!(d.telemetry().unwrap(), Telemetry { started: 1, accepted: 1, rejected: 3 });
        assert_eq!(d.set_workers(0), Err(DispatchError::NoWorkers));
        assert_eq!(d.try_start_step(1), None);
    }
}
