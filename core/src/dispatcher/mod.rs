//! Dispatchers (Interval-Asynchrony, paper 001, §3): who may start an SGD step, and whose
//! finished gradient is applied.
//!
//! Workers follow the paper's Algorithm 1: `try_start_step` → copy the model → compute a
//! gradient → `finish_step` → apply the gradient only if it was accepted.
//!
//! | dispatcher | accepts | file |
//! |---|---|---|
//! | [`IntervalDispatcher`] | steps that began inside the current interval, `y` per interval | `interval.rs` |
//! | [`Async`] | every step (Hogwild) | `asynchronous.rs` |
//! | [`Sequential`] | one step at a time | `sequential.rs` |
//! | [`ElAsync`] | every step; the worker bound `m` is window-probed | `elasync.rs` |
//!
//! **Staleness τ** (paper 001, §1: θ_{i+1} ← θ_i − η∇L(θ_{i−τ_i})): counting one model version
//! per accepted step, the τ of an accepted step is the number of steps accepted after it
//! started and before it was accepted. [`Dispatcher::finish_step_detailed`] reports it.

mod asynchronous;
mod elasync;
mod interval;
mod policy;
mod sequential;
mod window_probe;
mod workers;

pub use asynchronous::Async;
pub use elasync::ElAsync;
pub use interval::{IntervalDispatcher, IntervalState, MAX_START_INDEX, MAX_Y};
pub use policy::{ClosedInterval, Decay, Fixed, Probe, UpdateInterval};
pub use sequential::Sequential;
pub use window_probe::{ProbeConfig, WindowProbe};

use thiserror::Error;

/// A step's start index: the value of the started-steps counter when the step began.
pub type StepIndex = u64;

/// A worker's id, `0..m`.
pub type WorkerId = usize;

/// A bad dispatcher argument. The dispatcher is unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The worker bound `m` must be at least 1.
    #[error("the number of workers m must be at least 1")]
    NoWorkers,
    /// The asynchrony interval `y` must be at least 1.
    #[error("the asynchrony interval y must be at least 1")]
    EmptyInterval,
    /// The worker bound exceeds the number of per-worker slots the dispatcher was built with.
    #[error("m = {m} workers exceeds this dispatcher's capacity of {capacity}")]
    TooManyWorkers {
        /// The requested bound.
        m: usize,
        /// The dispatcher's fixed capacity.
        capacity: usize,
    },
    /// `y` does not fit the interval dispatcher's packed state word.
    #[error("the asynchrony interval y = {y} exceeds the maximum {max}")]
    IntervalTooLarge {
        /// The requested interval size.
        y: u64,
        /// The largest supported interval size ([`MAX_Y`]).
        max: u64,
    },
    /// A bad `y` policy or window-probing configuration (e.g. a zero phase length).
    #[error("bad dispatcher policy: {0}")]
    BadPolicy(&'static str),
}

/// Where an accepted step was counted by an interval dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalInfo {
    /// The interval's identity: the start index `I_first` that opened it. Strictly increasing
    /// from one interval to the next.
    pub first: StepIndex,
    /// The interval's size `y`, fixed when it opened.
    pub y: u32,
    /// This step's position among the interval's accepted steps, `1..=y`.
    pub order: u32,
}

/// The outcome of [`Dispatcher::finish_step_detailed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Apply the gradient (`true`) or discard it.
    pub accepted: bool,
    /// The staleness τ of an accepted step (module docs), or an upper bound on it where the
    /// dispatcher says so; `None` if rejected or the dispatcher does not track it.
    pub tau: Option<u64>,
    /// For an interval dispatcher, the interval that counted the accepted step.
    pub interval: Option<IntervalInfo>,
}

impl Decision {
    /// A rejection.
    pub const REJECTED: Decision = Decision { accepted: false, tau: None, interval: None };
}

/// Counters of a dispatcher since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Telemetry {
    /// Steps started (start indices handed out).
    pub started: u64,
    /// Steps accepted.
    pub accepted: u64,
    /// Steps rejected.
    pub rejected: u64,
}

/// The Dispatcher interface of Interval-Asynchrony (paper 001, §3).
pub trait Dispatcher: Send + Sync {
    /// May `worker` begin a step now? `Some(i)` gives the step's start index; `None` means not
    /// now (e.g. `worker ≥ m`, or a synchronous dispatcher waiting for a barrier).
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex>;

    /// The step started as `step` by `worker` has computed its gradient: `true` means apply it,
    /// `false` means discard it.
    fn finish_step(&self, worker: WorkerId, step: StepIndex) -> bool;

    /// The current worker bound `m` (workers `0..m` may start steps).
    fn workers(&self) -> usize;

    /// Change the worker bound at run time.
    fn set_workers(&self, m: usize) -> Result<(), DispatchError>;

    /// [`finish_step`](Dispatcher::finish_step) with the step's staleness and interval.
    ///
    /// The default knows neither (`tau: None`, `interval: None`). A worker must call either
    /// this or `finish_step` for a step, not both.
    fn finish_step_detailed(&self, worker: WorkerId, step: StepIndex) -> Decision {
        Decision { accepted: self.finish_step(worker, step), tau: None, interval: None }
    }

    /// Started/accepted/rejected counts, if the dispatcher keeps them (default: `None`).
    fn telemetry(&self) -> Option<Telemetry> {
        None
    }
}
