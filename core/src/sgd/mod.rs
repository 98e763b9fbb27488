//! The shared-memory SGD runtime of Interval-Asynchrony (paper 001, Algorithm 1).
//!
//! `threads` workers loop: ask a [`Dispatcher`](crate::dispatcher::Dispatcher) whether they may
//! start a step ([`try_start_step`](crate::dispatcher::Dispatcher::try_start_step)), copy the
//! global model, compute a minibatch gradient through a [`GradientModel`] the trainer
//! implements, ask the dispatcher whether the gradient is accepted
//! ([`finish_step`](crate::dispatcher::Dispatcher::finish_step)), and apply it to the global
//! model with Hogwild semantics if it was ([`run_dispatched`]). Data-parallel synchronous SGD
//! (all `m` gradients averaged per step, barrier between steps) is [`run_sync`]: it needs the
//! runtime's help (one update from `m` gradients), so it is a runtime mode, not a dispatcher.
//!
//! **Momentum lives in the global model.** The velocity `v` is a second array of atomic words
//! next to `θ` and each accepted gradient `g` does `v ← μ·v + g; θ ← θ − η·v` word by word
//! ([`SharedParams::apply`]). So a run with one worker, or with the sequential or sync modes,
//! is exactly sequential SGD with momentum, and asynchronous runs update both arrays with the
//! same Hogwild interleavings (lost updates allowed, torn words impossible).
//!
//! The caller decides when to stop ([`Stop`]: accepted updates or wall time) and may watch the
//! run through a monitor closure called with periodic [`Snapshot`]s ([`Every`]); the closure
//! can stop the run on a metric (e.g. a target test accuracy) by returning [`Control::Stop`].
//!
//! Not compiled under `--cfg ordo_loom`: loom has no scoped threads, and what loom must check here is
//! the dispatcher (`core/tests/loom_*.rs`), not the floating-point loop.

mod config;
mod params;
mod record;
mod runtime;
mod sync_sgd;

pub use config::{Control, Every, SgdConfig, SgdError, Snapshot, Stop};
pub use params::SharedParams;
pub use record::{RunReport, StepEvent, StepRecord};
pub use runtime::run_dispatched;
pub use sync_sgd::run_sync;

/// A model whose minibatch gradient the runtime can ask for (the trainer implements it).
///
/// Must be `Sync`: every worker calls [`gradient`](GradientModel::gradient) on the same model
/// with its own [`Scratch`](GradientModel::Scratch).
pub trait GradientModel: Sync {
    /// Per-worker working memory (activations, …), made once per worker.
    type Scratch: Send;

    /// The number of parameters.
    fn num_params(&self) -> usize;

    /// Fresh working memory for one worker.
    fn scratch(&self) -> Self::Scratch;

    /// Write the gradient of the loss of minibatch `batch` at `params` into `grad` (overwriting
    /// it; `grad.len() == params.len() == num_params()`) and return that minibatch loss.
    fn gradient(
        &self,
        params: &[f32],
        batch: u64,
        scratch: &mut Self::Scratch,
        grad: &mut [f32],
    ) -> f32;
}
