//! A small explicit-state model checker: breadth-first search over the reachable states of a
//! [`TransitionSystem`], with a hash table of visited states and no external solver.
//!
//! Breadth-first order makes the first violation found one at the smallest depth, so its trace
//! (replayed from the initial state through parent links) is a shortest counterexample.

use std::collections::{HashSet, VecDeque};
use std::fmt::{self, Debug, Display};
use std::hash::Hash;
use std::hash::{DefaultHasher, Hasher};
use std::time::{Duration, Instant};

use thiserror::Error;

/// A finite transition system: states, the actions enabled in each, their effect, and the
/// properties every reachable state (and every final state) must satisfy.
///
/// A property failure is a plain `String` that says what went wrong with the values involved.
pub trait TransitionSystem {
    /// A global state (protocol variables plus any ghost variables the properties need).
    type State: Clone + Eq + Hash;
    /// One atomic step of one actor.
    type Action: Clone + Debug;

    /// The initial state.
    fn initial(&self) -> Self::State;

    /// Push the actions enabled in `s` onto `out` (which arrives empty).
    fn actions(&self, s: &Self::State, out: &mut Vec<Self::Action>);

    /// The state after `a` in `s`. `Err` reports a safety property that fails *during* the step
    /// (for example a batch validating against an evicted cache entry it needed).
    fn apply(&self, s: &Self::State, a: &Self::Action) -> Result<Self::State, String>;

    /// A safety invariant checked in every reachable state.
    fn invariant(&self, s: &Self::State) -> Result<(), String>;

    /// The property of a final state (no action enabled): typically "everything finished, and
    /// the result equals the sequential one". A final state that is not done is a deadlock.
    fn final_check(&self, s: &Self::State) -> Result<(), String>;

    /// A readable line for action `a` taken in state `s`: which actor did what, with the values.
    fn describe(&self, s: &Self::State, a: &Self::Action) -> String;
}

/// How far a search may go before it gives up (it then reports [`CheckError::StateLimit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest number of distinct states to store.
    pub max_states: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_states: 50_000_000 }
    }
}

/// What one search explored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Distinct reachable states visited.
    pub states: usize,
    /// Transitions taken (edges, including those to already-visited states).
    pub transitions: usize,
    /// Final states (no action enabled) visited.
    pub final_states: usize,
    /// The largest BFS depth reached (length of the longest shortest path from the initial state).
    pub max_depth: usize,
    /// Wall time of the search.
    pub elapsed: Duration,
}

impl Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} states, {} transitions, {} final states, max depth {}, {:.2?}",
            self.states, self.transitions, self.final_states, self.max_depth, self.elapsed
        )
    }
}

/// A property violation with the shortest trace that reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample {
    /// One readable line per step, from the initial state.
    pub steps: Vec<String>,
    /// What property failed, with the values.
    pub violation: String,
}

impl Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "counterexample ({} steps):", self.steps.len())?;
        for (n, line) in self.steps.iter().enumerate() {
            writeln!(f, "  {:>3}. {line}", n + 1)?;
        }
        write!(f, "  violation: {}", self.violation)
    }
}

/// The result of a search that ran to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every reachable state satisfies the properties.
    Proved,
    /// A property fails; the trace is a shortest one (BFS).
    Violated(Counterexample),
}

/// A search that could not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CheckError {
    /// More than [`Limits::max_states`] distinct states: raise the limit or lower the bound.
    #[error("state limit of {0} states reached before the search finished")]
    StateLimit(usize),
}

/// One search's outcome and what it explored.
#[derive(Debug, Clone)]
pub struct Report {
    /// Proved, or the shortest counterexample.
    pub outcome: Outcome,
    /// States, transitions, depth and time.
    pub stats: Stats,
}

/// Breadth-first search of every state reachable in `sys`.
///
/// Stops at the first violation (which, being found in BFS order, is at the smallest depth).
///
/// # Example
/// ```
/// use ordo_verify::checker::{check, Limits, Outcome, TransitionSystem};
/// /// A counter that must never reach 3, incremented up to `top`.
/// struct Counter { top: u8 }
/// impl TransitionSystem for Counter {
///     type State = u8;
///     type Action = ();
///     fn initial(&self) -> u8 { 0 }
///     fn actions(&self, s: &u8, out: &mut Vec<()>) { if *s < self.top { out.push(()) } }
///     fn apply(&self, s: &u8, _: &()) -> Result<u8, String> { Ok(s + 1) }
///     fn invariant(&self, s: &u8) -> Result<(), String> {
///         if *s == 3 { Err("reached 3".into()) } else { Ok(()) }
///     }
///     fn final_check(&self, _: &u8) -> Result<(), String> { Ok(()) }
///     fn describe(&self, s: &u8, _: &()) -> String { format!("{s} -> {}", s + 1) }
/// }
/// let ok = check(&Counter { top: 2 }, Limits::default()).unwrap();
/// assert_eq!(ok.outcome, Outcome::Proved);
/// let bad = check(&Counter { top: 5 }, Limits::default()).unwrap();
/// let Outcome::Violated(cex) = bad.outcome else { panic!() };
/// assert_eq!(cex.steps.len(), 3);
/// ```
pub fn check<T: TransitionSystem>(sys: &T, limits: Limits) -> Result<Report, CheckError> {
    let start = Instant::now();
    // parents[id] = (parent id, action from parent); the initial state is id 0 with no parent.
    let mut parents: Vec<Option<(u32, T::Action)>> = Vec::new();
    let mut depth_of: Vec<u32> = Vec::new();
    let mut seen: HashSet<u128> = HashSet::new();
    let mut queue: VecDeque<(T::State, u32)> = VecDeque::new();
    let mut stats =
        Stats { states: 0, transitions: 0, final_states: 0, max_depth: 0, elapsed: Duration::ZERO };

    let init = sys.initial();
    let finish = |stats: &mut Stats, outcome: Outcome| {
        stats.elapsed = start.elapsed();
        Ok(Report { outcome, stats: *stats })
    };
    parents.push(None);
    depth_of.push(0);
    seen.insert(fingerprint(&init));
    stats.states = 1;
    if let Err(v) = sys.invariant(&init) {
        return finish(&mut stats, Outcome::Violated(trace(sys, &parents, 0, v)));
    }
    queue.push_back((init, 0));

    let mut enabled = Vec::new();
    while let Some((state, id)) = queue.pop_front() {
        enabled.clear();
        sys.actions(&state, &mut enabled);
        if enabled.is_empty() {
            stats.final_states += 1;
            if let Err(v) = sys.final_check(&state) {
                return finish(&mut stats, Outcome::Violated(trace(sys, &parents, id, v)));
            }
            continue;
        }
        let depth = depth_of[id as usize] + 1;
        for a in &enabled {
            stats.transitions += 1;
            let next = match sys.apply(&state, a) {
                Ok(next) => next,
                Err(v) => {
                    let mut cex = trace(sys, &parents, id, v);
                    cex.steps.push(sys.describe(&state, a));
                    return finish(&mut stats, Outcome::Violated(cex));
                }
            };
            if seen.len() >= limits.max_states {
                return Err(CheckError::StateLimit(limits.max_states));
            }
            if !seen.insert(fingerprint(&next)) {
                continue;
            }
            let nid = parents.len() as u32;
            parents.push(Some((id, a.clone())));
            depth_of.push(depth);
            stats.states += 1;
            stats.max_depth = stats.max_depth.max(depth as usize);
            if let Err(v) = sys.invariant(&next) {
                return finish(&mut stats, Outcome::Violated(trace(sys, &parents, nid, v)));
            }
            queue.push_back((next, nid));
        }
    }
    finish(&mut stats, Outcome::Proved)
}

/// A 128-bit fingerprint of a state (two independent SipHash-1-3 sums), stored in the visited
/// set instead of the state itself, as TLC and SPIN's hash compaction do: memory per state drops
/// to a few bytes, and a collision (which could hide a state) has probability about
/// `n² / 2¹²⁹` for `n` states — below 10⁻²⁴ for the bounds used here.
fn fingerprint<S: Hash>(s: &S) -> u128 {
    let mut a = DefaultHasher::new();
    let mut b = DefaultHasher::new();
    a.write_u8(0x5a);
    b.write_u8(0xa5);
    s.hash(&mut a);
    s.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// Rebuild the readable trace to state `id` by replaying its actions from the initial state.
fn trace<T: TransitionSystem>(
    sys: &T,
    parents: &[Option<(u32, T::Action)>],
    id: u32,
    violation: String,
) -> Counterexample {
    let mut actions = Vec::new();
    let mut cur = id;
    while let Some((parent, a)) = &parents[cur as usize] {
        actions.push(a.clone());
        cur = *parent;
    }
    actions.reverse();
    let mut state = sys.initial();
    let mut steps = Vec::with_capacity(actions.len());
    for a in &actions {
        steps.push(sys.describe(&state, a));
        // The path was explored once already, so every step on it applied without error.
        match sys.apply(&state, a) {
            Ok(next) => state = next,
            Err(e) => {
                steps.push(format!("(replay diverged: {e})"));
                break;
            }
        }
    }
    Counterexample { steps, violation }
}
