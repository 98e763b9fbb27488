//! The protocol models (OAC, interval dispatcher) as [`TransitionSystem`]s, checked by
//! stateright: [`Protocol`] turns a transition system into a [`stateright::Model`], and [`check`]
//! runs stateright's breadth-first (shortest counterexample) or depth-first (with symmetry
//! reduction) search on it, on one or several threads.
//!
//! The model's one property, [`SAFE`], folds the transition system's three checks together: a
//! step that fails leads to a [`Node::Failed`] state (so the counterexample ends with the step
//! that failed), a reachable state must satisfy [`TransitionSystem::invariant`], and a final state
//! (no action enabled) must satisfy [`TransitionSystem::final_check`].

use std::fmt::{self, Debug, Display};
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use stateright::{Checker, CheckerBuilder, HasDiscoveries, Model, Path, Property};
use thiserror::Error;

/// A finite transition system: states, the actions enabled in each, their effect, and the
/// properties every reachable state (and every final state) must satisfy.
///
/// A property failure is a plain `String` that says what went wrong with the values involved.
pub trait TransitionSystem: Clone + Send + Sync + 'static {
    /// A global state (protocol variables plus any ghost variables the properties need).
    type State: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// One atomic step of one actor.
    type Action: Clone + Debug + PartialEq + Send + Sync + 'static;

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

    /// The representative of `s`'s class under the system's symmetries (for symmetry reduction);
    /// `s` itself when the system declares none. It must map states that behave alike (the same
    /// properties hold along every future, up to renaming) to one state.
    fn representative(s: &Self::State) -> Self::State {
        s.clone()
    }
}

/// The name of the one property [`Protocol`] checks.
pub const SAFE: &str = "safe: every step, every state and every final state is correct";

/// A state of [`Protocol`]: a state of the transition system, or the failure of a step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node<S> {
    /// A reachable state of the system.
    At(S),
    /// A step failed with this message; no action is enabled here.
    Failed(String),
}

/// A [`TransitionSystem`] as a stateright [`Model`] whose one property is [`SAFE`].
///
/// # Example
/// ```
/// use ordo_verify::model::{Protocol, SAFE};
/// use ordo_verify::suite::Bound;
/// use stateright::{Checker, Model};
/// let oac = Bound::CI.oac(Some(ordo::mutation::Mutant::EvictStePlusOne)).unwrap();
/// let checker = Protocol(oac).checker().spawn_bfs().join();
/// assert!(checker.discovery(SAFE).is_some());
/// ```
#[derive(Debug, Clone)]
pub struct Protocol<T>(pub T);

impl<T: TransitionSystem> Protocol<T> {
    /// Why node `n` violates [`SAFE`], if it does.
    pub fn violation(&self, n: &Node<T::State>) -> Option<String> {
        let s = match n {
            Node::Failed(why) => return Some(why.clone()),
            Node::At(s) => s,
        };
        if let Err(why) = self.0.invariant(s) {
            return Some(why);
        }
        let mut enabled = Vec::new();
        self.0.actions(s, &mut enabled);
        if enabled.is_empty() { self.0.final_check(s).err() } else { None }
    }
}

fn representative<T: TransitionSystem>(n: &Node<T::State>) -> Node<T::State> {
    match n {
        Node::At(s) => Node::At(T::representative(s)),
        failed => failed.clone(),
    }
}

impl<T: TransitionSystem> Model for Protocol<T> {
    type State = Node<T::State>;
    type Action = T::Action;

    fn init_states(&self) -> Vec<Self::State> {
        vec![Node::At(self.0.initial())]
    }

    fn actions(&self, n: &Self::State, actions: &mut Vec<Self::Action>) {
        if let Node::At(s) = n {
            self.0.actions(s, actions);
        }
    }

    fn next_state(&self, n: &Self::State, a: Self::Action) -> Option<Self::State> {
        let Node::At(s) = n else { return None };
        Some(match self.0.apply(s, &a) {
            Ok(next) => Node::At(next),
            Err(why) => Node::Failed(why),
        })
    }

    fn format_step(&self, n: &Self::State, a: Self::Action) -> Option<String> {
        let Node::At(s) = n else { return None };
        let next = self.next_state(n, a.clone())?;
        Some(format!("{}\n\n{next:#?}", self.0.describe(s, &a)))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(SAFE, |m: &Self, n| m.violation(n).is_none())]
    }
}

/// How stateright searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Search {
    /// Depth-first (with symmetry reduction, the only order stateright reduces) instead of
    /// breadth-first. Breadth-first on one thread finds a shortest counterexample.
    pub dfs: bool,
    /// Reduce by [`TransitionSystem::representative`] (depth-first only).
    pub symmetry: bool,
    /// Checker threads.
    pub threads: usize,
    /// The largest number of distinct states to visit before giving up.
    pub max_states: usize,
}

impl Default for Search {
    /// Breadth-first on one thread, no symmetry reduction, at most 50 M states: the shortest
    /// counterexample, and the state count of the whole reachable space.
    fn default() -> Self {
        Search { dfs: false, symmetry: false, threads: 1, max_states: 50_000_000 }
    }
}

/// What one search explored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Distinct states visited (stateright's unique state count; with symmetry reduction, the
    /// distinct representatives).
    pub states: usize,
    /// States generated, repeats included (the transitions taken, plus the initial state).
    pub generated: usize,
    /// The largest depth reached, in steps from the initial state (stateright counts the initial
    /// state as depth 1).
    pub max_depth: usize,
    /// Wall time of the search.
    pub elapsed: Duration,
}

impl Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} states ({} generated), max depth {}, {:.2?}",
            self.states, self.generated, self.max_depth, self.elapsed
        )
    }
}

/// A property violation with the trace that reaches it.
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
    /// A property fails; with [`Search::default`] the trace is a shortest one.
    Violated(Counterexample),
}

/// A search that could not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CheckError {
    /// More than [`Search::max_states`] distinct states: raise the limit or lower the bound.
    #[error("state limit of {0} states reached before the search finished")]
    StateLimit(usize),
}

/// One search's outcome and what it explored.
#[derive(Debug, Clone)]
pub struct Report {
    /// Proved, or a counterexample.
    pub outcome: Outcome,
    /// States, depth and time.
    pub stats: Stats,
}

/// Search every state reachable in `sys` with stateright, as `search` says; stop at the first
/// violation.
///
/// # Example
/// ```
/// use ordo_verify::model::{check, Outcome, Search, TransitionSystem};
/// /// A counter that must never reach 3, incremented up to `top`.
/// #[derive(Clone)]
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
/// let ok = check(&Counter { top: 2 }, Search::default()).unwrap();
/// assert_eq!(ok.outcome, Outcome::Proved);
/// assert_eq!(ok.stats.states, 3);
/// let bad = check(&Counter { top: 5 }, Search::default()).unwrap();
/// let Outcome::Violated(cex) = bad.outcome else { panic!() };
/// assert_eq!(cex.steps.len(), 3);
/// ```
pub fn check<T: TransitionSystem>(sys: &T, search: Search) -> Result<Report, CheckError> {
    let start = Instant::now();
    let model = Protocol(sys.clone());
    let mut builder: CheckerBuilder<Protocol<T>> = model.clone().checker().threads(search.threads);
    if let Some(limit) = NonZeroUsize::new(search.max_states) {
        builder = builder.target_state_count(limit.get());
    }
    if search.symmetry {
        builder = builder.symmetry_fn(representative::<T>);
    }
    let (discovery, stats) = if search.dfs {
        let c = builder.spawn_dfs().join();
        (c.discovery(SAFE), stats_of(&c, start))
    } else {
        let c = builder.spawn_bfs().join();
        (c.discovery(SAFE), stats_of(&c, start))
    };
    let outcome = match discovery {
        None if stats.states >= search.max_states => {
            return Err(CheckError::StateLimit(search.max_states));
        }
        None => Outcome::Proved,
        Some(path) => {
            let path = if search.dfs { path } else { shortest(&model, SAFE, path) };
            let violation = model.violation(path.last_state()).unwrap_or_default();
            let steps = path
                .into_vec()
                .into_iter()
                .filter_map(|(n, a)| match (n, a) {
                    (Node::At(s), Some(a)) => Some(sys.describe(&s, &a)),
                    _ => None,
                })
                .collect();
            Outcome::Violated(Counterexample { steps, violation })
        }
    };
    Ok(Report { outcome, stats })
}

/// The shortest path to a violation of `property` (an `always` property) in `model`, given one
/// such path found by breadth-first search.
///
/// stateright's breadth-first search checks properties a block of states at a time and lets a
/// later state of the block replace a property's discovery, so the path it reports can be
/// longer than the shortest one. This searches again, breadth-first on one thread, among the
/// states fewer steps away, until no shorter violation exists.
pub fn shortest<M>(
    model: &M,
    property: &'static str,
    mut path: Path<M::State, M::Action>,
) -> Path<M::State, M::Action>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Clone + PartialEq + Debug + Send + Sync + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    loop {
        let len = path.clone().into_actions().len();
        if len == 0 {
            return path;
        }
        // stateright's depth counts the initial state as 1 and skips states at the target
        // depth: `len + 1` checks the states up to `len − 1` steps away.
        let c = model
            .clone()
            .checker()
            .target_max_depth(len + 1)
            .finish_when(HasDiscoveries::AnyFailures)
            .spawn_bfs()
            .join();
        match c.discovery(property) {
            Some(shorter) if shorter.clone().into_actions().len() < len => path = shorter,
            _ => return path,
        }
    }
}

fn stats_of<M: Model>(c: &impl Checker<M>, start: Instant) -> Stats {
    Stats {
        states: c.unique_state_count(),
        generated: c.state_count(),
        max_depth: c.max_depth().saturating_sub(1),
        elapsed: start.elapsed(),
    }
}
