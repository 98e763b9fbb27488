//! The interval dispatcher of Interval-Asynchrony (paper 001, §3, Algorithm 2) as a transition
//! system: `m` workers run Algorithm 1 (`TryStartStep` → compute → `FinishStep`) until `steps`
//! steps have started, one shared-memory access per atomic step.
//!
//! Two implementations:
//! - [`Variant::SingleWord`] (ordo's fix, `core/src/dispatcher/interval.rs`): `(I_first, I_done,
//!   y)` live in one word. `FinishStep` reads the word, rejects if `i < I_first` or `I_done ≥ y`,
//!   and CASes `I_done + 1` into the whole word (a failed CAS retries from the read). The step
//!   whose CAS makes `I_done = y` has *closed* the interval (everyone else is now rejected); alone,
//!   it then reads `s_started` and stores the next interval `(s_started, 0, UpdateInterval(y))`
//!   in one store. `I_first` strictly grows, so a word value never recurs: no ABA.
//! - [`Variant::Published`]: a literal transcription of Algorithm 2 — the CAS covers `I_done`
//!   only, and `y`, `I_first`, `I_done` are reset by separate stores after it. A step that read
//!   `I_done = old` in one interval can CAS it in the next after the count wraps back to `old`
//!   (ABA), and is accepted although it started before the interval began.
//!
//! Ghost state: the intervals begun so far (their `I_first` and `y`), and the number of accepted
//! steps. A step's *staleness* τ is the number of other steps accepted between its start
//! (`FAA(s_started)`) and its own acceptance. Properties, checked at each acceptance into
//! interval `e`: the step's start index is `≥ I_first(e)` (no accepted step crosses an interval
//! boundary); at most `y(e)` steps are accepted in interval `e`; τ ≤ `y(e) − 1` (one tighter
//! than the paper's τ ≤ y: only earlier steps of its own interval can be accepted in between).

use ordo::mutation::Mutant;
use thiserror::Error;

use crate::model::TransitionSystem;

/// Which dispatcher implementation the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// ordo's single-word CAS dispatcher.
    SingleWord,
    /// The published Algorithm 2, transcribed literally (ABA-prone).
    Published,
}

/// The interval-dispatcher mutants: those that change a step of this model.
pub const INTERVAL_MUTANTS: [Mutant; 2] =
    [Mutant::AcceptEarlierInterval, Mutant::PublishedAbaDispatcher];

/// A bad interval model configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IntervalConfigError {
    /// Workers in `1..=5`.
    #[error("the number of workers must be in 1..=5, got {0}")]
    Workers(usize),
    /// Steps in `1..=30`.
    #[error("the number of steps must be in 1..=30, got {0}")]
    Steps(usize),
    /// `y ≥ 1`.
    #[error("the asynchrony interval y must be in 1..=30, got {0}")]
    Interval(usize),
    /// The mutant does not belong to the dispatcher.
    #[error("mutant {0} is not an interval-dispatcher mutant")]
    NotIntervalMutant(&'static str),
}

/// The interval-dispatcher transition system.
#[derive(Debug, Clone)]
pub struct Interval {
    workers: usize,
    steps: u8,
    y0: u8,
    decay: bool,
    variant: Variant,
    mutant: Option<Mutant>,
}

/// Where a worker is in Algorithm 1 / 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Pc {
    /// Between steps: may call `TryStartStep`.
    Idle,
    /// Computed its gradient; about to start `FinishStep` (single word: read the word;
    /// published: line 16, read `I_first`).
    Finish,
    /// Published: line 21, `old ← I_done`.
    Second,
    /// Published: line 22, read `y`.
    Third,
    /// Published: line 22, read `I_first`.
    CheckFirst,
    /// Single word: CAS the word. Published: line 26, `CAS(I_done, old, old + 1)`.
    Cas,
    /// Published: line 27, read `y`, compare with `new`.
    CheckEnd,
    /// Published: line 28, `y ← UpdateInterval(y)`.
    SetY,
    /// The closer reads `s_started` (published: line 29).
    ReadStarted,
    /// Published: line 29, `I_first ← s`.
    SetFirst,
    /// Published: line 30, `I_done ← 0`. Single word: the closer stores the next interval.
    ResetDone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Worker {
    pc: Pc,
    /// The step's start index.
    i: u8,
    /// Ghost: accepted steps when this step started.
    acc_at_start: u8,
    /// Local copies: the word read (single word) or `old` / `new` (published in `done`).
    first: u8,
    done: u8,
    y: u8,
    /// `s_started` as read by the completing step.
    s: u8,
}

/// A global state of the dispatcher (plus ghost intervals).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntervalState {
    started: u8,
    first: u8,
    done: u8,
    y: u8,
    workers: Vec<Worker>,
    /// Ghost: total accepted steps.
    accepted: u8,
    /// Ghost: `(I_first, y, accepted so far)` of each interval begun, current last.
    intervals: Vec<(u8, u8, u8)>,
}

/// One atomic step of worker `w` (the step it takes depends on its program counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalAction(pub u8);

impl Interval {
    /// A model of `workers` threads running `steps` steps in total with initial interval `y0`
    /// (`decay`: `UpdateInterval(y) = max(y − 1, 1)`, else `y`).
    pub fn new(
        workers: usize,
        steps: usize,
        y0: usize,
        decay: bool,
        variant: Variant,
        mutant: Option<Mutant>,
    ) -> Result<Interval, IntervalConfigError> {
        if workers == 0 || workers > 5 {
            return Err(IntervalConfigError::Workers(workers));
        }
        if steps == 0 || steps > 30 {
            return Err(IntervalConfigError::Steps(steps));
        }
        if y0 == 0 || y0 > 30 {
            return Err(IntervalConfigError::Interval(y0));
        }
        if let Some(m) = mutant.filter(|m| !INTERVAL_MUTANTS.contains(m)) {
            return Err(IntervalConfigError::NotIntervalMutant(m.name()));
        }
        // The published-dispatcher mutant *is* the published variant.
        let variant = if mutant == Some(Mutant::PublishedAbaDispatcher) {
            Variant::Published
        } else {
            variant
        };
        Ok(Interval { workers, steps: steps as u8, y0: y0 as u8, decay, variant, mutant })
    }

    fn update(&self, y: u8) -> u8 {
        if self.decay { y.saturating_sub(1).max(1) } else { y }
    }

    fn skip_first_check(&self) -> bool {
        self.mutant == Some(Mutant::AcceptEarlierInterval)
    }

    /// Record worker `w`'s acceptance and check the properties of the interval it lands in.
    fn accept(s: &mut IntervalState, w: usize) -> Result<(), String> {
        let wk = s.workers[w];
        let e = s.intervals.len() - 1;
        let (first, y, count) = s.intervals[e];
        let tau = s.accepted - wk.acc_at_start;
        s.accepted += 1;
        s.intervals[e].2 = count + 1;
        if wk.i < first {
            return Err(format!(
                "step {} (worker {w}) is accepted in interval {e} which began at step {first}: it crosses an interval boundary",
                wk.i
            ));
        }
        if count + 1 > y {
            return Err(format!("interval {e} (y = {y}) accepts a {}th step", count + 1));
        }
        if tau >= y {
            return Err(format!(
                "step {} (worker {w}) is accepted with staleness τ = {tau} > y − 1 = {}",
                wk.i,
                y - 1
            ));
        }
        Ok(())
    }

    fn begin_interval(&self, s: &mut IntervalState) {
        s.intervals.push((s.first, s.y, 0));
    }
}

impl TransitionSystem for Interval {
    type State = IntervalState;
    type Action = IntervalAction;

    fn initial(&self) -> IntervalState {
        let w = Worker { pc: Pc::Idle, i: 0, acc_at_start: 0, first: 0, done: 0, y: 0, s: 0 };
        IntervalState {
            started: 0,
            first: 0,
            done: 0,
            y: self.y0,
            workers: vec![w; self.workers],
            accepted: 0,
            intervals: vec![(0, self.y0, 0)],
        }
    }

    fn actions(&self, s: &IntervalState, out: &mut Vec<IntervalAction>) {
        for (w, wk) in s.workers.iter().enumerate() {
            if wk.pc != Pc::Idle || s.started < self.steps {
                out.push(IntervalAction(w as u8));
            }
        }
    }

    fn apply(&self, s: &IntervalState, a: &IntervalAction) -> Result<IntervalState, String> {
        let mut n = s.clone();
        let w = a.0 as usize;
        let mut wk = n.workers[w];
        let reject = |wk: &mut Worker| wk.pc = Pc::Idle;
        match (self.variant, wk.pc) {
            (_, Pc::Idle) => {
                wk.i = n.started;
                n.started += 1;
                wk.acc_at_start = n.accepted;
                wk.pc = Pc::Finish;
            }
            (Variant::SingleWord, Pc::Finish) => {
                (wk.first, wk.done, wk.y) = (n.first, n.done, n.y);
                if (!self.skip_first_check() && wk.i < wk.first) || wk.done >= wk.y {
                    reject(&mut wk);
                } else {
                    wk.pc = Pc::Cas;
                }
            }
            (Variant::SingleWord, Pc::Cas) => {
                if (n.first, n.done, n.y) != (wk.first, wk.done, wk.y) {
                    wk.pc = Pc::Finish; // CAS failed: retry from the read
                } else {
                    n.done = wk.done + 1;
                    n.workers[w] = wk;
                    Self::accept(&mut n, w)?;
                    wk.pc = if n.done == n.y { Pc::ReadStarted } else { Pc::Idle };
                }
            }
            (Variant::SingleWord, Pc::ReadStarted) => {
                wk.s = n.started;
                wk.pc = Pc::ResetDone;
            }
            (Variant::SingleWord, Pc::ResetDone) => {
                (n.first, n.done, n.y) = (wk.s, 0, self.update(n.y));
                self.begin_interval(&mut n);
                wk.pc = Pc::Idle;
            }
            (Variant::Published, Pc::Finish) => {
                if wk.i < n.first && !self.skip_first_check() {
                    reject(&mut wk);
                } else {
                    wk.pc = Pc::Second;
                }
            }
            (Variant::Published, Pc::Second) => {
                wk.done = n.done;
                wk.pc = Pc::Third;
            }
            (Variant::Published, Pc::Third) => {
                if wk.done >= n.y {
                    reject(&mut wk);
                } else {
                    wk.pc = Pc::CheckFirst;
                }
            }
            (Variant::Published, Pc::CheckFirst) => {
                if wk.i < n.first && !self.skip_first_check() {
                    reject(&mut wk);
                } else {
                    wk.pc = Pc::Cas;
                }
            }
            (Variant::Published, Pc::Cas) => {
                if n.done != wk.done {
                    wk.pc = Pc::Second;
                } else {
                    n.done = wk.done + 1;
                    wk.done += 1;
                    n.workers[w] = wk;
                    Self::accept(&mut n, w)?;
                    wk.pc = Pc::CheckEnd;
                }
            }
            (Variant::Published, Pc::CheckEnd) => {
                wk.pc = if wk.done == n.y { Pc::SetY } else { Pc::Idle };
            }
            (Variant::Published, Pc::SetY) => {
                n.y = self.update(n.y);
                wk.pc = Pc::ReadStarted;
            }
            (Variant::Published, Pc::ReadStarted) => {
                wk.s = n.started;
                wk.pc = Pc::SetFirst;
            }
            (Variant::Published, Pc::SetFirst) => {
                n.first = wk.s;
                wk.pc = Pc::ResetDone;
            }
            (Variant::Published, Pc::ResetDone) => {
                n.done = 0;
                self.begin_interval(&mut n);
                wk.pc = Pc::Idle;
            }
            (Variant::SingleWord, pc) => unreachable!("single-word worker at {pc:?}"),
        }
        if wk.pc == Pc::Idle {
            // Forget the finished step's locals so that equal futures merge.
            wk = Worker { pc: Pc::Idle, i: 0, acc_at_start: 0, first: 0, done: 0, y: 0, s: 0 };
        }
        n.workers[w] = wk;
        Ok(n)
    }

    fn invariant(&self, _: &IntervalState) -> Result<(), String> {
        Ok(())
    }

    fn final_check(&self, s: &IntervalState) -> Result<(), String> {
        if s.started != self.steps || s.workers.iter().any(|w| w.pc != Pc::Idle) {
            return Err("deadlock: a worker is stuck".to_string());
        }
        Ok(())
    }

    /// The workers are interchangeable: no shared variable, ghost or property names a worker
    /// (an acceptance is checked against the worker's own start index and start count), so two
    /// states that differ by a permutation of the workers have the same futures up to renaming.
    /// The representative sorts them.
    fn representative(s: &IntervalState) -> IntervalState {
        let mut r = s.clone();
        r.workers.sort_unstable();
        r
    }

    fn describe(&self, s: &IntervalState, a: &IntervalAction) -> String {
        let w = a.0 as usize;
        let wk = s.workers[w];
        let after = self.apply(s, a).ok();
        let accepted = after.as_ref().is_some_and(|n| n.accepted > s.accepted);
        let next = after.as_ref().map(|n| n.workers[w]);
        let checks = matches!(wk.pc, Pc::Finish | Pc::Third | Pc::CheckFirst);
        let rejected = checks && next.is_some_and(|x| x.pc == Pc::Idle) && !accepted;
        let verdict = if accepted {
            format!(" → ACCEPTED (accepted total {})", s.accepted + 1)
        } else if rejected {
            " → rejected".to_string()
        } else {
            String::new()
        };
        let what = match (self.variant, wk.pc) {
            (_, Pc::Idle) => format!(
                "TryStartStep: FAA(s_started) = {} (accepted so far {})",
                s.started, s.accepted
            ),
            (Variant::SingleWord, Pc::Finish) => {
                format!(
                    "step {}: reads word (I_first {}, I_done {}, y {})",
                    wk.i, s.first, s.done, s.y
                )
            }
            (Variant::SingleWord, Pc::Cas) => format!(
                "step {}: CAS word (I_first {}, I_done {}, y {}) → {}",
                wk.i,
                wk.first,
                wk.done,
                wk.y,
                if (s.first, s.done, s.y) != (wk.first, wk.done, wk.y) {
                    "fails".to_string()
                } else {
                    format!("(I_first {}, I_done {}, y {})", wk.first, wk.done + 1, wk.y)
                }
            ),
            (Variant::SingleWord, Pc::ReadStarted) => {
                format!("step {}: closer reads s_started = {}", wk.i, s.started)
            }
            (Variant::SingleWord, Pc::ResetDone) => format!(
                "step {}: closer stores word (I_first {}, I_done 0, y {}) (new interval)",
                wk.i,
                wk.s,
                self.update(s.y)
            ),
            (Variant::Published, Pc::Finish) => {
                format!("step {}: line 16 reads I_first = {}", wk.i, s.first)
            }
            (Variant::Published, Pc::Second) => {
                format!("step {}: line 21 old ← I_done = {}", wk.i, s.done)
            }
            (Variant::Published, Pc::Third) => {
                format!("step {}: line 22 old {} ≥ y {}?", wk.i, wk.done, s.y)
            }
            (Variant::Published, Pc::CheckFirst) => {
                format!("step {}: line 22 i < I_first = {}?", wk.i, s.first)
            }
            (Variant::Published, Pc::Cas) => {
                format!(
                    "step {}: line 26 CAS(I_done {}, {} → {})",
                    wk.i,
                    s.done,
                    wk.done,
                    wk.done + 1
                )
            }
            (Variant::Published, Pc::CheckEnd) => {
                format!("step {}: line 27 new {} = y {}?", wk.i, wk.done, s.y)
            }
            (Variant::Published, Pc::SetY) => {
                format!("step {}: line 28 y ← {}", wk.i, self.update(s.y))
            }
            (Variant::Published, Pc::ReadStarted) => {
                format!("step {}: line 29 reads s_started = {}", wk.i, s.started)
            }
            (Variant::Published, Pc::SetFirst) => {
                format!("step {}: line 29 I_first ← {}", wk.i, wk.s)
            }
            (Variant::Published, Pc::ResetDone) => {
                format!("step {}: line 30 I_done ← 0 (new interval)", wk.i)
            }
            (Variant::SingleWord, pc) => format!("step {}: impossible pc {pc:?}", wk.i),
        };
        format!("worker {w}: {what}{verdict}")
    }
}
