//! What a run records: one [`StepRecord`] per step, and the [`RunReport`].

use std::time::Duration;

/// One SGD step as the runtime saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRecord {
    /// The step's start index from `try_start_step` (sync mode: `round · m + worker`).
    pub index: u64,
    /// The worker that ran it.
    pub worker: u32,
    /// Staleness of an accepted step (updates begun between its model copy and its own
    /// apply, see [`BlockStore::momentum_step`](super::BlockStore::momentum_step)); `None` for a rejected step.
    pub tau: Option<u64>,
    /// The minibatch loss at the copied model.
    pub loss: f32,
    /// Wall time since the run began, when the step finished.
    pub end: Duration,
}

impl StepRecord {
    /// Was the gradient applied?
    pub fn accepted(&self) -> bool {
        self.tau.is_some()
    }
}

/// What an optional per-step observer is told, right after the dispatcher's decision (e.g. to
/// feed a probing policy the losses it compares).
pub type StepEvent = StepRecord;

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Every step, sorted by start index.
    pub steps: Vec<StepRecord>,
    /// Model updates applied (accepted gradients; for sync SGD, averaged steps).
    pub updates: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// The final θ.
    pub params: Vec<f32>,
}

impl RunReport {
    /// Steps started (accepted or not).
    pub fn started(&self) -> usize {
        self.steps.len()
    }

    /// Fraction of started steps whose gradient was applied (1 for an empty run).
    pub fn accept_rate(&self) -> f64 {
        if self.steps.is_empty() {
            return 1.0;
        }
        self.steps.iter().filter(|s| s.accepted()).count() as f64 / self.steps.len() as f64
    }

    /// Mean staleness of accepted steps (0 when none).
    pub fn mean_tau(&self) -> f64 {
        let (sum, n) = self
            .steps
            .iter()
            .filter_map(|s| s.tau)
            .fold((0u128, 0u64), |(s, n), t| (s + u128::from(t), n + 1));
        if n == 0 { 0.0 } else { sum as f64 / n as f64 }
    }

    /// Largest staleness of an accepted step (0 when none).
    pub fn max_tau(&self) -> u64 {
        self.steps.iter().filter_map(|s| s.tau).max().unwrap_or(0)
    }
}

/// What one worker of an ASSM / PASSM / PASSM+ run did and where its time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerTelemetry {
    /// Steps run.
    pub steps: u64,
    /// Of which PASSM steps (restricted subgradient, lock-free write of the own block).
    pub passm_steps: u64,
    /// Layers whose backpropagation the restriction skipped, summed over steps.
    pub layers_skipped: u64,
    /// Parameters whose subgradient the restriction skipped, summed over steps (each costs
    /// about two multiply-adds per example of the minibatch in a dense layer's backward).
    pub params_skipped: u64,
    /// Time spent waiting for partition locks (ASSM reads and writes).
    pub lock_wait: Duration,
    /// Time reading the model (locks included).
    pub read: Duration,
    /// Time computing subgradients.
    pub compute: Duration,
    /// Time writing the model (locks included).
    pub write: Duration,
}

/// The outcome of an ASSM / PASSM / PASSM+ run.
#[derive(Debug, Clone)]
pub struct BlockRunReport {
    /// Steps, updates, wall time and final parameters (every step is applied: `tau` is always
    /// set, counting the updates begun between the step's read and its write).
    pub run: RunReport,
    /// Per worker, in worker order.
    pub workers: Vec<WorkerTelemetry>,
    /// The partition the run used (worker `c` owns block `c` in PASSM steps).
    pub blocks: super::Blocks,
}
