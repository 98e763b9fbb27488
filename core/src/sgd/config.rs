//! What the caller decides: learning rate, momentum, when to stop, when to look.

use std::time::Duration;
use thiserror::Error;

/// When a run stops (whichever limit comes first; a monitor can also stop it, see
/// [`Control`]). At least one limit must be set, so no run is endless by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stop {
    /// Stop after exactly this many model updates (accepted gradients; for sync SGD, averaged
    /// steps). A worker whose step finishes after the last update was taken drops it: it is
    /// neither applied nor recorded.
    pub max_updates: Option<u64>,
    /// Stop once this much wall time has passed.
    pub max_time: Option<Duration>,
}

impl Stop {
    /// Stop after `n` model updates.
    pub fn updates(n: u64) -> Self {
        Self { max_updates: Some(n), max_time: None }
    }
    /// Stop after `d` of wall time.
    pub fn time(d: Duration) -> Self {
        Self { max_updates: None, max_time: Some(d) }
    }
}

/// How often the monitor closure is called with a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    /// Never (the run only stops on [`Stop`]).
    Never,
    /// Each time the update count has grown by this much (checked about every millisecond).
    Updates(u64),
    /// Each time this much wall time has passed.
    Time(Duration),
}

/// The monitor's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep training.
    Continue,
    /// Stop now (e.g. the target accuracy is reached).
    Stop,
}

/// Hyper-parameters and limits of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdConfig {
    /// Learning rate η (paper default 0.005).
    pub lr: f32,
    /// Momentum μ (paper default 0.5); 0 is plain SGD.
    pub momentum: f32,
    /// When to stop.
    pub stop: Stop,
    /// When to call the monitor.
    pub every: Every,
}

impl Default for SgdConfig {
    /// The paper's setting (η = 0.005, μ = 0.5), 10,000 updates, no monitor.
    fn default() -> Self {
        Self { lr: 0.005, momentum: 0.5, stop: Stop::updates(10_000), every: Every::Never }
    }
}

impl SgdConfig {
    /// Check the configuration against a worker count.
    #[cfg_attr(ordo_loom, allow(dead_code))] // the runtimes that call it are not built under loom
    pub(crate) fn validate(&self, threads: usize) -> Result<(), SgdError> {
        if threads == 0 {
            return Err(SgdError::NoWorkers);
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(SgdError::BadLearningRate(self.lr));
        }
        if !(self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum)) {
            return Err(SgdError::BadMomentum(self.momentum));
        }
        if self.stop.max_updates.is_none() && self.stop.max_time.is_none() {
            return Err(SgdError::NoStop);
        }
        if matches!(self.every, Every::Updates(0)) || self.every == Every::Time(Duration::ZERO) {
            return Err(SgdError::ZeroPeriod);
        }
        Ok(())
    }
}

/// A bad argument to the SGD runtime; nothing ran when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
#[non_exhaustive]
pub enum SgdError {
    /// At least one worker thread is needed.
    #[error("the number of worker threads must be at least 1")]
    NoWorkers,
    /// The initial parameters do not match the model.
    #[error("the model has {expected} parameters but {got} initial values were given")]
    ParamLen {
        /// `GradientModel::num_params()`.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// η must be finite and positive.
    #[error("the learning rate must be finite and > 0, got {0}")]
    BadLearningRate(f32),
    /// μ must be in [0, 1).
    #[error("the momentum must be in [0, 1), got {0}")]
    BadMomentum(f32),
    /// Neither an update limit nor a time limit was given.
    #[error("a stop condition (max updates or max time) is required")]
    NoStop,
    /// A monitor period of zero.
    #[error("the monitor period must be > 0")]
    ZeroPeriod,
    /// More blocks (workers) than the model has layers to give them.
    #[error("{blocks} blocks cannot be layer-aligned over a model of {layers} layers")]
    TooManyBlocks {
        /// Blocks asked for (one per worker).
        blocks: usize,
        /// Layers of the model.
        layers: usize,
    },
    /// The model's layer sizes do not add up to its parameter count.
    #[error("the layers hold {layers} parameters but the model has {params}")]
    LayerSizes {
        /// Sum of `LayeredModel::layer_sizes`.
        layers: usize,
        /// `GradientModel::num_params`.
        params: usize,
    },
    /// Zero steps per epoch.
    #[error("an epoch must have at least one step")]
    NoEpoch,
    /// Switch or dampening epochs not strictly increasing.
    #[error("--switch-at and --lr-drops epochs must be strictly increasing")]
    UnsortedEpochs,
    /// Weight decay must be finite and ≥ 0.
    #[error("the weight decay must be finite and >= 0, got {0}")]
    BadWeightDecay(f32),
}

/// What the monitor sees: the global model at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Model updates applied so far (accepted gradients, or averaged sync steps).
    pub updates: u64,
    /// Steps started so far (accepted or not).
    pub started: u64,
    /// Wall time since the run began.
    pub wall: Duration,
    /// A copy of `θ` (Hogwild: words of concurrent updates may be mixed).
    pub params: &'a [f32],
}
