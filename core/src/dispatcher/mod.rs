//! Dispatchers (Interval-Asynchrony, paper 001, §3): who may start an SGD step, and whose
//! finished gradient is applied.
//!
//! Workers follow the paper's Algorithm 1: `try_start_step` → copy the model → compute a
//! gradient → `finish_step` → apply the gradient only if it was accepted.

use thiserror::Error;

/// A step's start index: the value of the started-steps counter when the step began.
pub type StepIndex = u64;

/// A worker's id, `0..m`.
pub type WorkerId = usize;

/// A bad dispatcher argument. The dispatcher is unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DispatchError {
    /// The worker bound `m` must be at least 1.
    #[error("the number of workers m must be at least 1")]
    NoWorkers,
    /// The asynchrony interval `y` must be at least 1.
    #[error("the asynchrony interval y must be at least 1")]
    EmptyInterval,
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
}
