//! Why a training run stopped.

use crate::kge::io::checkpoint::CheckpointError;
use crate::kge::model::score::DimError;
use crate::kge::model::step::NonFiniteLoss;
use ordo::engine::{EngineError, StepError, StopCause};
use ordo_gpu::GpuError;
use thiserror::Error;

/// Why training stopped.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The embedding dimension does not suit the model.
    #[error(transparent)]
    Dim(#[from] DimError),
    /// A hyper-parameter is out of range.
    #[error("bad configuration: {0}")]
    Config(&'static str),
    /// The dataset has too few entities for the negative sampling.
    #[error(transparent)]
    Sampling(#[from] crate::kge::data::batch::SamplingError),
    /// The entity table could not be allocated (the machine has less memory than the
    /// run's estimate was checked against).
    #[error("entity table: {0}")]
    Memory(ordo::row_store::StoreError),
    /// A model step failed (e.g. the loss became NaN).
    #[error("training failed: {0}")]
    Step(StepError),
    /// The engine refused the configuration or failed.
    #[error("engine: {0}")]
    Engine(EngineError),
    /// A checkpoint could not be written, or the one to resume is corrupt or of another run.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// `--device cuda` could not be used (no usable CUDA, or a CUDA call failed).
    #[error("--device cuda: {0}")]
    Cuda(#[from] GpuError),
    /// The run was stopped ([`Resumable::stop`](super::train::Resumable::stop)) during
    /// `epoch` (1-based), which was not ended: nothing of it was checkpointed or recorded.
    #[error("interrupted in epoch {epoch}: that epoch was not ended or checkpointed")]
    Interrupted {
        /// The epoch that was not ended.
        epoch: usize,
    },
    /// The loss became NaN or infinite in `epoch` (1-based): training diverged, and stopped at
    /// that batch (the error names it and the option to lower).
    #[error("epoch {epoch}: {source}")]
    Diverged {
        /// The epoch.
        epoch: usize,
        /// The step's error ([`NonFiniteLoss`]).
        source: StepError,
    },
}

/// `e`, an error of epoch `epoch` (1-based): a diverged step as [`TrainError::Diverged`], naming
/// the epoch beside the batch.
pub(super) fn in_epoch(e: TrainError, epoch: usize) -> TrainError {
    match e {
        TrainError::Step(source) if source.get_ref().is::<NonFiniteLoss>() => {
            TrainError::Diverged { epoch, source }
        }
        e => e,
    }
}

/// An engine error as the trainer reports it (what a session's `?` converts with).
impl From<EngineError> for TrainError {
    fn from(e: EngineError) -> Self {
        engine_error(e)
    }
}

/// An engine error as the trainer reports it: a failed step as [`TrainError::Step`], the rest
/// as [`TrainError::Engine`].
pub(super) fn engine_error(e: EngineError) -> TrainError {
    match e {
        EngineError::Stopped { cause: StopCause::StepFailed { source, .. }, .. } => {
            TrainError::Step(source)
        }
        e => TrainError::Engine(e),
    }
}
