//! The step the engine runs (on the host or a CUDA GPU), and the epoch's loss it keeps for the
//! trainer.

use super::error::TrainError;
use crate::kge::data::batch::{KgeBatch, NegSampling};
use crate::kge::model::gpu::{CudaKgeModel, Device, check_device, unsupported};
use crate::kge::model::step::KgeModel;
use crate::kge::run::config::TrainConfig;
use ordo::engine::{Model, StepError};
use ordo_gpu::{Gpu, GpuError};
use std::cell::Cell;

/// The step the engine runs: the CPU model, or the same step on a CUDA GPU.
pub(super) enum Step {
    /// The host step.
    Cpu(Box<KgeModel>),
    /// The same step on a CUDA GPU.
    Cuda(Box<CudaKgeModel>),
}

/// The step, and the epoch's loss taken out of it after every batch.
///
/// A session lends the model back only by shared reference between epochs
/// ([`ordo::engine::Session::model`]), so the epoch's loss sum lives in cells the trainer can
/// take through it. Each batch's sum is added in computation order starting from 0 each epoch,
/// so the mean has the bits the model's own per-epoch sum would have.
pub(super) struct Stepper {
    step: Step,
    loss_sum: Cell<f64>,
    positives: Cell<u64>,
}

impl Stepper {
    pub(super) fn new(step: Step) -> Self {
        Stepper { step, loss_sum: Cell::new(0.0), positives: Cell::new(0) }
    }

    /// Refuse a run whose device cannot be used, or whose step the CUDA kernels do not
    /// implement, before any table is built.
    pub(super) fn check(cfg: &TrainConfig) -> Result<(), TrainError> {
        check_device(cfg.device)?;
        if cfg.device == Device::Cuda
            && let Some(why) = unsupported(&cfg.step_config())
        {
            return Err(TrainError::Config(why));
        }
        if cfg.device == Device::Cuda && cfg.neg_sampling == NegSampling::Distinct {
            // The GPU's validation cache takes a batch's rows sorted.
            return Err(TrainError::Config("--neg-sampling distinct steps on the CPU only"));
        }
        Ok(())
    }

    /// The step on a CUDA GPU, its relation parameters copied from `cpu_model`.
    pub(super) fn cuda(gpu: &Gpu, cpu_model: &KgeModel) -> Result<Self, TrainError> {
        Ok(Stepper::new(Step::Cuda(Box::new(CudaKgeModel::new(gpu, cpu_model)?))))
    }

    /// Mean loss per positive since the last call, and reset.
    pub(super) fn take_loss(&self) -> f64 {
        self.loss_sum.take() / self.positives.take().max(1) as f64
    }

    pub(super) fn relations(&self) -> Result<Vec<f32>, GpuError> {
        match &self.step {
            Step::Cpu(m) => Ok(m.relations().to_vec()),
            Step::Cuda(m) => m.relations(),
        }
    }

    pub(super) fn dense(&self) -> Result<Vec<f32>, GpuError> {
        match &self.step {
            Step::Cpu(m) => Ok(m.dense()),
            Step::Cuda(m) => m.try_dense(),
        }
    }
}

impl Model for Stepper {
    type Data = KgeBatch;
    type Error = StepError;

    fn row_width(&self) -> usize {
        match &self.step {
            Step::Cpu(m) => m.row_width(),
            Step::Cuda(m) => m.row_width(),
        }
    }

    fn step(
        &mut self,
        b: &KgeBatch,
        rows: &mut ordo::engine::BatchRows<'_>,
    ) -> Result<(), StepError> {
        let (stepped, (sum, positives)) = match &mut self.step {
            Step::Cpu(m) => (m.step(b, rows).map_err(StepError::new), m.take_loss_sum()),
            Step::Cuda(m) => (m.step(b, rows), m.take_loss_sum()),
        };
        self.loss_sum.set(self.loss_sum.get() + sum);
        self.positives.set(self.positives.get() + positives);
        stepped
    }

    fn dense(&self) -> Vec<f32> {
        Stepper::dense(self).unwrap_or_default()
    }
}
