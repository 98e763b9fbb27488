//! The step the engine runs (on the host or a CUDA GPU), and the epoch's loss it keeps for the
//! trainer.

use super::error::TrainError;
use crate::kge::data::batch::{NegSampling, TripleBatch};
use crate::kge::model::device::Device;
use crate::kge::model::gpu::{CudaKgeModel, check_device, unsupported};
use crate::kge::model::step::EmbeddingModel;
use crate::kge::run::config::TrainConfig;
use ordo::engine::{Model, StepError, SubmitError};
use ordo_gpu::cache::DeviceBatch;
use ordo_gpu::pipeline::{DeviceModel, Pipeline, Streams, on_device};
use ordo_gpu::{Gpu, GpuError};
use std::cell::Cell;

/// The step the engine runs: the CPU model, or the same step on a CUDA GPU.
pub(super) enum Step {
    /// The host step.
    Cpu(Box<EmbeddingModel>),
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
    /// What the kernels do not implement is bad input on any machine, so it is refused before
    /// the device is looked for.
    pub(super) fn check(cfg: &TrainConfig) -> Result<(), TrainError> {
        if cfg.device == Device::Cuda
            && let Some(why) = unsupported(&cfg.step_config())
        {
            return Err(TrainError::Config(why));
        }
        if cfg.device == Device::Cuda && cfg.neg_sampling == NegSampling::Distinct {
            // The GPU's validation cache takes a batch's rows sorted.
            return Err(TrainError::Config("--neg-sampling distinct steps on the CPU only"));
        }
        check_device(cfg.device)?;
        Ok(())
    }

    /// The step on a CUDA GPU, its relation parameters copied from `cpu_model`.
    pub(super) fn cuda(gpu: &Gpu, cpu_model: &EmbeddingModel) -> Result<Self, TrainError> {
        Ok(Stepper::new(Step::Cuda(Box::new(CudaKgeModel::new(gpu, cpu_model)?))))
    }

    /// Mean loss per positive since the last call, and reset.
    pub(super) fn take_loss(&self) -> f64 {
        self.loss_sum.take() / self.positives.take().max(1) as f64
    }

    /// ordo-gpu's pipeline for this step (the CUDA step only); see
    /// [`cuda_pipeline`](crate::kge::model::gpu::cuda_pipeline).
    pub(super) fn pipeline(
        &self,
        gpu: &Gpu,
        mode: ordo::engine::Mode,
        entities: usize,
        max_rows: usize,
        batch: (usize, usize),
    ) -> Result<Pipeline, GpuError> {
        match &self.step {
            Step::Cuda(m) => {
                crate::kge::model::gpu::cuda_pipeline(gpu, m, mode, entities, max_rows, batch)
            }
            Step::Cpu(_) => Err(GpuError::Pipeline("the CPU step has no device pipeline")),
        }
    }

    /// Add a stepped batch's loss to the epoch's.
    fn add_loss(&self, (sum, positives): (f64, u64)) {
        self.loss_sum.set(self.loss_sum.get() + sum);
        self.positives.set(self.positives.get() + positives);
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
    type Data = TripleBatch;
    type Error = StepError;

    fn row_width(&self) -> usize {
        match &self.step {
            Step::Cpu(m) => m.row_width(),
            Step::Cuda(m) => m.row_width(),
        }
    }

    fn step(
        &mut self,
        b: &TripleBatch,
        rows: &mut ordo::engine::BatchRows<'_>,
    ) -> Result<(), StepError> {
        let (stepped, loss) = match &mut self.step {
            Step::Cpu(m) => (m.step(b, rows).map_err(StepError::new), m.take_loss_sum()),
            Step::Cuda(m) => (m.step(b, rows), m.take_loss_sum()),
        };
        self.add_loss(loss);
        stepped
    }

    fn dense(&self) -> Vec<f32> {
        Stepper::dense(self).unwrap_or_default()
    }
}

/// The CUDA step on the pipeline's device rows; the CPU step has none (a pipeline is built
/// only for the CUDA step: [`Stepper::pipeline`]).
impl DeviceModel for Stepper {
    fn step_on_device(
        &mut self,
        streams: &Streams,
        b: &TripleBatch,
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<StepError>> {
        let Step::Cuda(m) = &mut self.step else {
            return Err(on_device(GpuError::Pipeline("the CPU step has no device step")));
        };
        let stepped = m.step_on_device(streams, b, batch);
        let loss = m.take_loss_sum();
        self.add_loss(loss);
        stepped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::model::optim::Optimizer;
    use crate::kge::model::score::{Loss, ScoreFn};

    /// A model, loss or optimizer the kernels do not implement is refused with `--device cuda`
    /// as bad input, on any machine: before the device is looked for, so a machine without
    /// CUDA says the same as one with it.
    #[test]
    fn what_the_kernels_do_not_implement_is_refused_before_the_device() {
        let cuda = TrainConfig { device: Device::Cuda, ..TrainConfig::default() };
        let refused = [
            TrainConfig { score: ScoreFn::TransEL2, ..cuda },
            TrainConfig { loss: Loss::Softplus, ..cuda },
            TrainConfig { optimizer: Optimizer::Adam, ..cuda },
            TrainConfig { optimizer: Optimizer::PbgAdagrad, ..cuda },
            TrainConfig { reciprocal: true, ..cuda },
        ];
        for cfg in refused {
            match Stepper::check(&cfg) {
                Err(TrainError::Config(why)) => assert!(why.contains("--device cuda"), "{why}"),
                other => panic!("{:?}: {other:?}", (cfg.score, cfg.loss, cfg.optimizer)),
            }
        }
        // What the kernels implement gets past the check to the device (refused only where
        // there is no CUDA).
        let supported = TrainConfig { score: ScoreFn::ComplEx, ..cuda };
        match (Stepper::check(&supported), ordo_gpu::cuda_unavailable_reason()) {
            (Ok(()), None) | (Err(TrainError::Cuda(GpuError::NoDevice { .. })), Some(_)) => {}
            (r, _) => panic!("{r:?}"),
        }
    }
}
