//! PASSM+'s phase gate: ASSM steps and PASSM steps are never in flight at the same time, so a
//! PASSM owner's lock-free write never meets an ASSM writer of its block.

use super::Method;
use crate::sync::{AtomicU64, Ordering, spin_wait};

const PASSM: u64 = 1 << 63;
/// Set while a step of the method not admitted waits: no new step of the admitted method enters.
const WAITING: u64 = 1 << 62;
const COUNT: u64 = WAITING - 1;

/// Admits steps of one [`Method`] at a time.
///
/// Invariant: one word holds the admitted method (bit 63 set = PASSM), whether a step of the
/// other method waits (bit 62), and the number of steps in flight; the method changes only when
/// that number is zero. A step of the other method sets the waiting bit and spins (giving up when
/// told to stop) until the steps in flight have left; while the bit is set no new step of the
/// admitted method enters, so a waiting step cannot be starved by workers that leave and
/// re-enter (it was: a PASSM step of the last PASSM epoch waited until the run stopped). The
/// flip clears the bit. PASSM+ switches a few times per run, so the wait is paid a few times per
/// run.
#[derive(Debug)]
pub struct PhaseGate {
    word: AtomicU64,
}

impl PhaseGate {
    /// A gate admitting `method`, with nothing in flight.
    pub fn new(method: Method) -> Self {
        Self { word: AtomicU64::new(if method == Method::Passm { PASSM } else { 0 }) }
    }

    /// Enter with a step of `method`; `false` (not entered) if `stop()` turned true first.
    pub fn enter(&self, method: Method, stop: impl Fn() -> bool) -> bool {
        let bit = if method == Method::Passm { PASSM } else { 0 };
        loop {
            // Acquire (load and CAS): entering after the last step of the other method left
            // orders this step's reads and writes after that step's writes.
            let cur = self.word.load(Ordering::Acquire);
            let next = if cur & PASSM == bit && cur & WAITING == 0 {
                cur + 1
            } else if cur & PASSM != bit && cur & COUNT == 0 {
                bit | 1
            } else if cur & PASSM != bit && cur & WAITING == 0 {
                cur | WAITING
            } else {
                if stop() {
                    return false;
                }
                spin_wait();
                continue;
            };
            if self.word.compare_exchange(cur, next, Ordering::Acquire, Ordering::Relaxed).is_ok()
                && next & WAITING == 0
            {
                return true;
            }
        }
    }

    /// Leave (after the step's write).
    pub fn leave(&self) {
        // Release: the step's writes happen before a step of the other method enters.
        self.word.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_other_method_waits_for_the_steps_in_flight() {
        let g = PhaseGate::new(Method::Assm);
        assert!(g.enter(Method::Assm, || false));
        assert!(!g.enter(Method::Passm, || true), "an ASSM step is in flight");
        g.leave();
        assert!(g.enter(Method::Passm, || true), "nothing in flight: the method flips");
        assert!(g.enter(Method::Passm, || true));
        g.leave();
        g.leave();
        assert!(g.enter(Method::Assm, || true));
    }

    #[test]
    fn a_waiting_step_of_the_other_method_bars_new_entries() {
        let g = PhaseGate::new(Method::Assm);
        assert!(g.enter(Method::Assm, || false));
        assert!(!g.enter(Method::Passm, || true), "an ASSM step is in flight");
        assert!(!g.enter(Method::Assm, || true), "a PASSM step waits: no new ASSM step enters");
        g.leave();
        assert!(g.enter(Method::Passm, || true), "nothing in flight: the method flips");
        assert!(g.enter(Method::Passm, || true), "the flip cleared the waiting bit");
    }
}
