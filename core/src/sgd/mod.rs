//! The shared-memory SGD runtime of Interval-Asynchrony (paper 001, Algorithm 1).
//!
//! The models, data and CLI that run on it (the MLP and CNN on Fashion-MNIST, `ordo-train sgd`)
//! are `ordo_train::sgd` (`train/src/sgd`).
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
//! next to `θ` in the run's [`BlockStore`] (built by [`BlockStore::hogwild`]) and each accepted
//! gradient `g` does `v ← μ·v + g; θ ← θ − η·v` word by word ([`BlockStore::momentum_step`]).
//! So a run with one worker, or with the sequential or sync modes, is exactly sequential SGD
//! with momentum, and asynchronous runs update both arrays with the same Hogwild interleavings
//! (lost updates allowed, torn words impossible).
//!
//! The caller decides when to stop ([`Stop`]: accepted updates or wall time) and may watch the
//! run through a monitor closure called with periodic [`Snapshot`]s ([`Every`]); the closure
//! can stop the run on a metric (e.g. a target test accuracy) by returning [`Control::Stop`].
//!
//! **Paper 003's methods** (ASSM, PASSM, PASSM+; [`run_async_subgradient`]) share the workers,
//! records, monitor and dense store of this runtime, with their own write discipline: the
//! parameter vector split into layer-aligned [`Blocks`] ([`BlockStore::new`]), each worker with a
//! *private* momentum, written under per-block locks (ASSM, [`assm`]) or lock-free by the
//! block's owner (PASSM, [`passm`]), switched at epochs by a [`BlockSchedule`] (PASSM+). The model computes restricted subgradients
//! through [`LayeredModel`].
//!
//! Everything here is compiled under every cfg, so the public API is the same under
//! `--cfg ordo_loom` too; loom checks the shared-memory parts of paper 003 (blocks, the block
//! store, ASSM's and PASSM's reads and writes, the phase gate: `core/tests/loom_passm.rs`) and
//! the dispatcher of paper 001 (`core/tests/loom_*.rs`), not the floating-point loop, whose
//! tests (`core/tests/sgd_*.rs`) are not built under `ordo_loom` (loom's atomics work only
//! inside a loom model).

pub mod assm;
mod block_store;
mod blocks;
mod config;
pub mod passm;
mod phase_gate;
mod record;
mod runtime;
mod schedule;
mod subgradient;
mod sync_sgd;

pub use block_store::{BlockStore, ROW_WORDS};
pub use blocks::Blocks;
pub use config::{Control, Every, SgdConfig, SgdError, Snapshot, Stop};
pub use phase_gate::PhaseGate;
pub use record::{BlockRunReport, RunReport, StepEvent, StepRecord, WorkerTelemetry};
pub use runtime::run_dispatched;
pub use schedule::{BlockSchedule, Method};
pub use subgradient::run_async_subgradient;
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

/// A model of consecutive layers that can stop backpropagation early (paper 003 §4, *restricted
/// backpropagation*): the subgradient with respect to layers `lowest..` only, which skips the
/// backward work of the layers below.
///
/// Layout: layer `l`'s parameters are the words `offset(l)..offset(l + 1)` of the parameter
/// vector, where `offset(l)` is the sum of the first `l` entries of
/// [`layer_sizes`](LayeredModel::layer_sizes) (input layer first).
pub trait LayeredModel: GradientModel {
    /// Parameters per layer, input layer first; they sum to `num_params()`.
    fn layer_sizes(&self) -> Vec<usize>;

    /// Write the subgradient of minibatch `batch`'s loss at `params` with respect to layers
    /// `lowest..` into `grad[offset(lowest)..]` and zeros below, and return the minibatch loss.
    ///
    /// Contract: `grad[offset(lowest)..]` equals, bit for bit, the same words of
    /// [`gradient`](GradientModel::gradient)'s output (the same numbers, fewer of them).
    fn restricted_gradient(
        &self,
        params: &[f32],
        batch: u64,
        lowest: usize,
        scratch: &mut Self::Scratch,
        grad: &mut [f32],
    ) -> f32;
}
