//! The CAS interval dispatcher of Interval-Asynchrony (paper 001, Algorithm 2), with the
//! published algorithm's races closed.
//!
//! # What the published pseudocode gets wrong, and what this file does instead
//! Algorithm 2 keeps `I_first`, `I_done` and `y` in separate variables and CASes only
//! `I_done`. A step that read `I_done = old` (and checked `i ≥ I_first`) in interval k can be
//! preempted, and its CAS succeeds in interval k+1 once `I_done` has been reset and counted back
//! to `old` (ABA): a step that began before interval k+1 opened is accepted in it, and its
//! staleness exceeds `y`. `y` and `I_first` are also written after the CAS, in steps of their
//! own, so a finisher can see the new `I_done = 0` with the old `I_first`.
//! `core/tests/fixtures/published_algorithm2.rs` keeps the literal transcription, and
//! `core/tests/loom_dispatcher.rs` shows loom finding the violation.
//!
//! Here the interval's identity `I_first`, its accepted count `I_done` and its size `y` live in
//! **one** `AtomicU64`, so the CAS that accepts a step checks all three and changes them
//! together. `I_first` strictly increases from one interval to the next (every closed interval
//! accepted at least one step with index ≥ its `I_first`, so the started counter has passed it),
//! so a word value never recurs and ABA is impossible.
//!
//! # Bit layout of the state word
//! ```text
//!  63                         26 25          13 12           0
//! +-----------------------------+--------------+--------------+
//! |  I_first (38 bits)          | I_done (13)  |   y (13)     |
//! +-----------------------------+--------------+--------------+
//! ```
//! Limits: `1 ≤ y ≤ MAX_Y = 8191` (a larger `y` is a [`DispatchError::IntervalTooLarge`] at
//! construction; a policy's larger value saturates to `MAX_Y`); start indices `0..=MAX_START_INDEX`
//! (`2^38 − 2`, about 2.7·10¹¹ steps). After that many starts the dispatcher is *exhausted*:
//! `try_start_step` returns `None` forever (saturation, never wrap-around), and an interval
//! opened past it gets `I_first = 2^38 − 1`, which no handed-out index reaches.
//!
//! # Closing and opening an interval (two phases, one writer)
//! The step whose CAS makes `I_done = y` has *closed* the interval: the word is now full, and every
//! other finisher sees `I_done ≥ y` and is rejected (as in the paper, where `I_done = y` until
//! line 30). Alone, the closer then adds `y` to the closed-steps total, reads `I_first' =
//! s_started` with a read-modify-write (the latest value in its modification order: a plain load
//! could return a stale, smaller index and admit steps that began before the close), asks the
//! [`UpdateInterval`] policy for `y'`, and stores `(I_first', 0, y')`. Policy calls are therefore
//! serialized, once per interval, in interval order.
//!
//! # Invariant (checked by `core/tests/loom_dispatcher.rs` and `prop_dispatcher.rs`)
//! Let a step *start* at the fetch-and-add that gives its index, and be *accepted* at the CAS
//! that counts it. Then every accepted step
//! 1. started after the interval that accepted it opened — its index `i ≥ I_first`, and
//!    `I_first` was read from `s_started` after every step of earlier intervals was accepted — so
//!    no step is accepted across an interval boundary; and
//! 2. is one of at most `y` steps accepted by its interval, `y` fixed when the interval opened.
//!
//! Hence its staleness τ — the number of steps accepted after it started and before it was
//! accepted (paper 001 §1: θ_{i+1} ← θ_i − η∇L(θ_{i−τ_i}), one model version per accepted step)
//! — counts only earlier steps of its own interval: **τ ≤ order − 1 ≤ y − 1**, one tighter than
//! the paper's stated τ ≤ y. A policy changes `y` only for intervals not yet open, so it cannot
//! break the bound. (τ counts *accepted* steps. Under Hogwild a gradient is applied after its
//! acceptance, so the model a worker copies can lag the accepted count; staleness in applied
//! model versions is the SGD runtime's to measure. The loom test's ghost count, which sees the
//! closing step only once it has opened the next interval, checks the paper's τ ≤ y.)
//!
//! Contract (Algorithm 1): a worker passes to `finish_step` the index its own latest
//! `try_start_step` returned. An index never handed out is not detected.
//!
//! # Reported τ
//! `try_start_step` records the state word it sees (just before taking its index) in the worker's
//! slot; `finish_step_detailed` reports τ = the number of steps its interval accepted after that
//! word — exact in a single-threaded run, and otherwise never below the true τ nor above
//! `order − 1`. It assumes Algorithm 1's contract: a worker finishes the step it started last.
//! A worker whose start was not recorded (e.g. another dispatcher's index) still gets a correct
//! decision; only its τ is then the bound `order − 1`.
//!
//! # Example
//! ```
//! use ordo::dispatcher::{Dispatcher, Fixed, IntervalDispatcher};
//! let d = IntervalDispatcher::new(2, 1, Fixed).unwrap(); // m = 2 workers, y = 1
//! let a = d.try_start_step(0).unwrap();
//! let b = d.try_start_step(1).unwrap();
//! assert!(d.finish_step(1, b)); // closes the interval; the next one opens at index 2
//! assert!(!d.finish_step(0, a)); // a began before that interval: rejected
//! ```

use crossbeam_utils::CachePadded;

use crate::mutation::{self, Mutant};
use crate::sync::{AtomicU64, Ordering, spin_wait};

use super::policy::{ClosedInterval, UpdateInterval};
use super::workers::Workers;
use super::{Decision, DispatchError, Dispatcher, IntervalInfo, StepIndex, Telemetry, WorkerId};

const FIELD_BITS: u32 = 13;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;
const DONE_SHIFT: u32 = FIELD_BITS;
const FIRST_SHIFT: u32 = 2 * FIELD_BITS;
/// `I_first` of an interval opened after the start indices ran out: above every handed-out index.
const EXHAUSTED: u64 = (1 << (64 - FIRST_SHIFT)) - 1;

/// The largest interval size `y` the packed state word holds.
pub const MAX_Y: u32 = FIELD_MASK as u32;

/// The largest start index handed out; later starts are refused (module docs, "Limits").
pub const MAX_START_INDEX: StepIndex = EXHAUSTED - 1;

/// One unpacked state word: the current interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalState {
    /// `I_first`: the start index at which the interval opened (its identity).
    pub first: StepIndex,
    /// `I_done`: steps accepted in the interval so far (`= y` while it is being closed).
    pub done: u32,
    /// `y`: the interval's size.
    pub y: u32,
}

impl IntervalState {
    fn pack(self) -> u64 {
        debug_assert!(self.first <= EXHAUSTED && self.done <= MAX_Y && self.y <= MAX_Y);
        (self.first << FIRST_SHIFT) | (u64::from(self.done) << DONE_SHIFT) | u64::from(self.y)
    }

    fn unpack(word: u64) -> Self {
        IntervalState {
            first: word >> FIRST_SHIFT,
            done: ((word >> DONE_SHIFT) & FIELD_MASK) as u32,
            y: (word & FIELD_MASK) as u32,
        }
    }

    /// The interval has accepted its `y` steps (closed, the next one not yet open).
    pub fn is_full(self) -> bool {
        self.done >= self.y
    }
}

/// The CAS interval dispatcher (module docs: layout, invariant, τ).
pub struct IntervalDispatcher<P: UpdateInterval> {
    /// The packed `(I_first, I_done, y)` word.
    state: CachePadded<AtomicU64>,
    /// `s_started`: start indices handed out (may run past `MAX_START_INDEX` when exhausted).
    started: CachePadded<AtomicU64>,
    /// Σ y over closed intervals. Written only by a closer while the word is full.
    closed_accepted: CachePadded<AtomicU64>,
    /// The worker bound m and the per-worker start words.
    workers: Workers,
    policy: P,
}

impl<P: UpdateInterval> IntervalDispatcher<P> {
    /// `m` workers (also the capacity), first interval of size `y0`, `policy` for later ones.
    pub fn new(m: usize, y0: u32, policy: P) -> Result<Self, DispatchError> {
        Self::with_capacity(m, m, y0, policy)
    }

    /// Like [`new`](Self::new), with room for up to `capacity` workers for
    /// [`set_workers`](Dispatcher::set_workers).
    pub fn with_capacity(
        m: usize,
        capacity: usize,
        y0: u32,
        policy: P,
    ) -> Result<Self, DispatchError> {
        if y0 == 0 {
            return Err(DispatchError::EmptyInterval);
        }
        if y0 > MAX_Y {
            return Err(DispatchError::IntervalTooLarge { y: y0.into(), max: MAX_Y.into() });
        }
        let workers = Workers::new(m, capacity)?;
        let first = IntervalState { first: 0, done: 0, y: y0 };
        Ok(Self {
            state: CachePadded::new(AtomicU64::new(first.pack())),
            started: CachePadded::new(AtomicU64::new(0)),
            closed_accepted: CachePadded::new(AtomicU64::new(0)),
            workers,
            policy,
        })
    }

    /// The `y` policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The current interval (a snapshot).
    pub fn current(&self) -> IntervalState {
        // Acquire: pairs with the opener's Release store, like a finisher's load.
        IntervalState::unpack(self.state.load(Ordering::Acquire))
    }

    /// Steps accepted so far: Σ y of closed intervals + `I_done` of the open one.
    ///
    /// Exact snapshot; waits out an interval that is being opened (a few instructions of the
    /// closer's).
    pub fn accepted(&self) -> u64 {
        loop {
            // Acquire (both word loads): sees at least the closed total published with the word.
            let w1 = self.state.load(Ordering::Acquire);
            let s = IntervalState::unpack(w1);
            if !s.is_full() {
                // Acquire: pairs with the closer's Release store of the total, so if this reads a
                // total written after `w1`, the re-read below sees the word that replaced `w1`.
                let base = self.closed_accepted.load(Ordering::Acquire);
                if self.state.load(Ordering::Acquire) == w1 {
                    return base + u64::from(s.done);
                }
            }
            spin_wait();
        }
    }

    /// Mutant `published-aba-dispatcher`: FinishStep of the published Algorithm 2 (lines 16–34,
    /// `core/tests/fixtures/published_algorithm2.rs`) on this dispatcher's state. Each of the
    /// paper's separate variables `I_first`, `I_done`, `y` is one field of the word, and each
    /// access to it is its own atomic operation on the word that reads or changes that field
    /// alone, so the interleavings are those of the published algorithm: its CAS compares
    /// `I_done` only (ABA across intervals), and lines 28–30 reset `y`, `I_first` and `I_done` in
    /// three separate steps.
    fn published_algorithm2_finish(&self, worker: WorkerId, step: StepIndex) -> Decision {
        // SeqCst everywhere, as in the fixture: the paper gives no orderings.
        let field = |f: fn(IntervalState) -> u64| {
            f(IntervalState::unpack(self.state.load(Ordering::SeqCst)))
        };
        let set = |f: &dyn Fn(&mut IntervalState)| {
            let _ = self.state.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                let mut s = IntervalState::unpack(w);
                f(&mut s);
                Some(s.pack())
            });
        };
        let reject = || {
            self.workers.count_rejected(worker);
            Decision::REJECTED
        };
        if step < field(|s| s.first) {
            return reject(); // 17–18
        }
        let (new, first, y) = loop {
            let old = field(|s| s.done.into()); // 21
            let (y, first) = (field(|s| s.y.into()), field(|s| s.first));
            if old >= y || step < first {
                return reject(); // 22–23
            }
            // 26: CAS(I_done, old, old + 1): succeeds whenever I_done = old, whatever the others.
            let cas = self.state.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                let s = IntervalState::unpack(w);
                (u64::from(s.done) == old).then(|| IntervalState { done: s.done + 1, ..s }.pack())
            });
            if cas.is_ok() {
                break (old + 1, first, y);
            }
            spin_wait();
        };
        if new == field(|s| s.y.into()) {
            // 27–30, one step each.
            let total = self.closed_accepted.load(Ordering::SeqCst) + new;
            self.closed_accepted.store(total, Ordering::SeqCst);
            let next_first = self.started.load(Ordering::SeqCst).min(EXHAUSTED);
            let closed = ClosedInterval { first, y: y as u32, accepted_total: total, next_first };
            let next_y = self.policy.next_y(&closed).clamp(1, MAX_Y);
            set(&|s| s.y = next_y); // 28
            set(&|s| s.first = next_first); // 29
            set(&|s| s.done = 0); // 30
        }
        // τ reported as the correct path does (the mutant changes the algorithm, not reporting).
        let before = new as u32 - 1;
        let tau = match self.workers.seen(worker).map(IntervalState::unpack) {
            Some(w) if w.first == first => before.saturating_sub(w.done),
            _ => before,
        };
        Decision {
            accepted: true,
            tau: Some(tau.into()),
            interval: Some(IntervalInfo { first, y: y as u32, order: new as u32 }),
        }
    }

    /// The closer's second phase (module docs): the word is full and only this thread writes it.
    fn open_next(&self, closed: IntervalState) {
        // Relaxed load: the previous closer's store is ordered before our full-CAS (its Release
        // word store heads the release sequence our AcqRel CAS acquired).
        let total = self.closed_accepted.load(Ordering::Relaxed) + u64::from(closed.y);
        // Release: `accepted()` pairs with it (see there); the word store below publishes it to
        // finishers.
        self.closed_accepted.store(total, Ordering::Release);
        // RMW, not a load: the latest start index in modification order, so every step with
        // index ≥ I_first' took it after this close (a stale load would admit earlier steps).
        // AcqRel: orders it after our full-CAS.
        let next_first = self.started.fetch_add(0, Ordering::AcqRel).min(EXHAUSTED);
        let y = self
            .policy
            .next_y(&ClosedInterval {
                first: closed.first,
                y: closed.y,
                accepted_total: total,
                next_first,
            })
            .clamp(1, MAX_Y);
        let open = IntervalState { first: next_first, done: 0, y };
        // Release: publishes the closed total and the policy's state to the next interval's
        // finishers and to its closer (whose CAS acquires through the release sequence).
        self.state.store(open.pack(), Ordering::Release);
    }
}

impl<P: UpdateInterval> Dispatcher for IntervalDispatcher<P> {
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex> {
        if !self.workers.admits(worker) {
            return None;
        }
        // Relaxed: only used for the reported τ, which a stale (older) word can only raise.
        let seen = self.state.load(Ordering::Relaxed);
        self.workers.record(worker, seen);
        // Relaxed: only this index's place in s_started's modification order matters; the
        // closer's RMW splits starts by that order. Last atomic operation of the start, so
        // the start takes effect exactly here.
        let i = self.started.fetch_add(1, Ordering::Relaxed);
        (i <= MAX_START_INDEX).then_some(i)
    }

    fn finish_step(&self, worker: WorkerId, step: StepIndex) -> bool {
        self.finish_step_detailed(worker, step).accepted
    }

    fn finish_step_detailed(&self, worker: WorkerId, step: StepIndex) -> Decision {
        if mutation::active(Mutant::PublishedAbaDispatcher) {
            return self.published_algorithm2_finish(worker, step);
        }
        let seen = self.workers.seen(worker).map(IntervalState::unpack);
        // Acquire: pairs with the opener's Release store (closed total, policy state).
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let s = IntervalState::unpack(cur);
            let began_earlier = if mutation::active(Mutant::AcceptEarlierInterval) {
                false // the bug: a step from an earlier interval counts in this one
            } else {
                step < s.first
            };
            if s.is_full() || began_earlier {
                self.workers.count_rejected(worker);
                return Decision::REJECTED;
            }
            let next = IntervalState { done: s.done + 1, ..s };
            // AcqRel on success: acquires the opener's writes, and releases ours so a later
            // closer sees them; Acquire on failure, for the same reason as the load above.
            match self.state.compare_exchange_weak(
                cur,
                next.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if next.is_full() {
                        self.open_next(next);
                    }
                    let before = next.done - 1; // steps of this interval accepted before us
                    let tau = match seen {
                        Some(w) if w.first == s.first => before.saturating_sub(w.done),
                        _ => before,
                    };
                    return Decision {
                        accepted: true,
                        tau: Some(tau.into()),
                        interval: Some(IntervalInfo { first: s.first, y: s.y, order: next.done }),
                    };
                }
                Err(actual) => {
                    cur = actual;
                    spin_wait();
                }
            }
        }
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
            started: self.started.load(Ordering::Relaxed).min(MAX_START_INDEX + 1),
            accepted: self.accepted(),
            rejected: self.workers.rejected(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::{Decay, Fixed};

    #[test]
    fn pack_round_trips_at_the_limits() {
        for s in [
            IntervalState { first: 0, done: 0, y: 1 },
            IntervalState { first: EXHAUSTED, done: MAX_Y, y: MAX_Y },
            IntervalState { first: 12345, done: 7, y: 9 },
        ] {
            assert_eq!(IntervalState::unpack(s.pack()), s);
        }
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        assert_eq!(IntervalDispatcher::new(0, 1, Fixed).err(), Some(DispatchError::NoWorkers));
        assert_eq!(IntervalDispatcher::new(1, 0, Fixed).err(), Some(DispatchError::EmptyInterval));
        assert!(matches!(
            IntervalDispatcher::new(1, MAX_Y + 1, Fixed).err(),
            Some(DispatchError::IntervalTooLarge { .. })
        ));
        let d = IntervalDispatcher::with_capacity(1, 4, 3, Fixed).unwrap();
        assert_eq!(d.set_workers(0), Err(DispatchError::NoWorkers));
        assert_eq!(d.set_workers(5), Err(DispatchError::TooManyWorkers { m: 5, capacity: 4 }));
        assert_eq!(d.workers(), 1);
        assert_eq!(d.set_workers(4), Ok(()));
        assert_eq!(d.workers(), 4);
    }

    #[test]
    fn worker_bound_is_enforced_and_adjustable() {
        let d = IntervalDispatcher::with_capacity(1, 2, 4, Fixed).unwrap();
        assert_eq!(d.try_start_step(1), None);
        d.set_workers(2).unwrap();
        assert_eq!(d.try_start_step(1), Some(0));
    }

    #[test]
    fn an_interval_accepts_y_steps_then_rejects_those_that_began_before_the_next() {
        let d = IntervalDispatcher::new(4, 2, Fixed).unwrap();
        let s: Vec<_> = (0..4).map(|w| d.try_start_step(w).unwrap()).collect();
        let d0 = d.finish_step_detailed(0, s[0]);
        assert_eq!((d0.accepted, d0.tau), (true, Some(0)));
        let d1 = d.finish_step_detailed(1, s[1]);
        assert_eq!((d1.accepted, d1.tau), (true, Some(1)));
        assert_eq!(d1.interval, Some(IntervalInfo { first: 0, y: 2, order: 2 }));
        assert!(!d.finish_step(2, s[2]));
        assert_eq!(d.current(), IntervalState { first: 4, done: 0, y: 2 });
        let n = d.try_start_step(3).unwrap();
        let dn = d.finish_step_detailed(3, n);
        assert_eq!(dn.interval, Some(IntervalInfo { first: 4, y: 2, order: 1 }));
        assert_eq!(dn.tau, Some(0));
        let t = d.telemetry().unwrap();
        assert_eq!((t.started, t.accepted, t.rejected), (5, 3, 1));
    }

    #[test]
    fn start_indices_saturate_instead_of_wrapping() {
        let d = IntervalDispatcher::new(1, 1, Fixed).unwrap();
        d.started.store(MAX_START_INDEX, Ordering::Relaxed);
        let last = d.try_start_step(0).unwrap();
        assert_eq!(last, MAX_START_INDEX);
        assert_eq!(d.try_start_step(0), None, "exhausted");
        assert!(d.finish_step(0, last));
        assert_eq!(d.current().first, EXHAUSTED, "no handed-out index reaches the next interval");
        assert_eq!(d.telemetry().unwrap().started, MAX_START_INDEX + 1);
    }

    #[test]
    fn policies_can_be_boxed() {
        let p: Box<dyn UpdateInterval> = Box::new(Decay::new(1).unwrap());
        let d = IntervalDispatcher::new(1, 2, p).unwrap();
        for _ in 0..2 {
            let i = d.try_start_step(0).unwrap();
            assert!(d.finish_step(0, i));
        }
        assert_eq!(d.current().y, 1);
    }

    #[test]
    fn decay_shrinks_y_at_interval_boundaries_only() {
        let d = IntervalDispatcher::new(1, 3, Decay::new(2).unwrap()).unwrap();
        let mut ys = Vec::new();
        for _ in 0..8 {
            let i = d.try_start_step(0).unwrap();
            ys.push(d.finish_step_detailed(0, i).interval.unwrap().y);
        }
        // 3 accepted → total 3 crosses one multiple of 2 → y 2; then 2 more → 1; floor 1.
        assert_eq!(ys, vec![3, 3, 3, 2, 2, 1, 1, 1]);
    }
}
