//! `--device cuda`: the KGE step on the GPU (ordo-gpu's kernels) inside the engine, through
//! ordo-gpu's device-resident [`Pipeline`] as the engine's device queue ([`cuda_pipeline`]):
//! the batch's rows go up once, are validated against the cache in device memory, stepped and
//! inserted there, and come back once, with several batches in flight.
//!
//! **What `--device cuda` takes** ([`unsupported`] refuses the rest before anything runs):
//! DistMult and ComplEx, the softmax or logistic loss, Adagrad, the L2 regularizer (or none),
//! no `--reciprocal`, and shared negatives (not `--neg-sampling distinct`). The throughput
//! config (`train/configs/wordnet30-complex-throughput.toml`) is in that set. Before it
//! allocates, the run estimates its device memory ([`device_bytes`]) and refuses, with the
//! figures, a run that does not fit.
//!
//! **One step, two implementations.** The CPU step ([`super::step::EmbeddingModel`]) and ordo-gpu's
//! kernels define the same update: [`device_batch`] writes a batch as ordo-gpu's groups (per
//! positive, a tail-corrupted group and a head-corrupted group, each the positive followed by
//! its chunk's shared negatives, so sharing is expressed by repeating rows), [`device_hyper`]
//! passes the same learning rate, Adagrad eps ([`super::step::ADAGRAD_EPS`]) and loss, and half
//! the L2 weight (ordo-gpu applies it per group; each positive is in two groups). Both sum the
//! loss over positives and sides, and both update relations from their pre-step values. The
//! check is `train/tests/gpu_reference.rs`: ordo-gpu's f64 reference against this trainer's f32
//! step on random batches, 1e-5 relative on the scale of each vector, with seeded perturbations
//! (another eps, another L2 split, a mean instead of a sum) that it must reject.
//!
//! Not bit-equal to the CPU: f32 sums run in other orders (see ordo-gpu's `kge` module docs), so
//! a GPU run equals bit for bit only a replay on the GPU; against the CPU replay it agrees within
//! a tolerance (`train/tests/gpu_kge.rs`, needs a GPU).

use super::device::Device;
use super::optim::Optimizer;
use super::score::{Loss, Regularizer, ScoreFn};
use super::step::{ADAGRAD_EPS, EmbeddingModel, NonFiniteLoss, StepConfig};
use crate::kge::data::batch::TripleBatch;
use ordo::engine::{BatchRows, Mode, Model, StepError, SubmitError};
use ordo_gpu::cache::{CacheConfig, DeviceBatch};
use ordo_gpu::kge::{self as gk, DeviceKgeBatch, KgeHyper, KgeKernels, KgeShape};
use ordo_gpu::pipeline::{DeviceModel, Pipeline, PipelineConfig, Streams, check_fits, on_device};
use ordo_gpu::{Gpu, GpuError};
use std::collections::VecDeque;

/// `Ok` if `device` can be used here; for [`Device::Cuda`] without a usable driver, NVRTC and
/// device, the reason ([`ordo_gpu::cuda_unavailable_reason`]). Call it before any work.
pub fn check_device(device: Device) -> Result<(), GpuError> {
    match (device, ordo_gpu::cuda_unavailable_reason()) {
        (Device::Cuda, Some(reason)) => Err(GpuError::NoDevice { reason }),
        _ => Ok(()),
    }
}

/// The batch as ordo-gpu's scored triples: for each positive `(h, r, t)` of chunk `c`, the group
/// `(h, r, t), (h, r, t'₁..ₙ)` with the chunk's corrupted tails, then `(h, r, t), (h'₁..ₙ, r, t)`
/// with its corrupted heads (rows are the batch's local positions, `rows` of them).
pub fn device_batch(b: &TripleBatch, rows: usize) -> gk::KgeBatch {
    chunked_batch(b, rows).groups()
}

/// The batch as ids only, for the step in the CPU step's shape
/// ([`gk::chunked_step`]): positives and each chunk's shared negatives (tails, then heads).
pub fn chunked_batch(b: &TripleBatch, rows: usize) -> gk::ChunkedBatch {
    let chunk = b.chunk.max(1);
    let mut chunk_negatives = Vec::new();
    for ci in 0..b.pos.len().div_ceil(chunk) {
        let (tails, heads) = b.chunk_negatives(ci);
        chunk_negatives.extend_from_slice(tails);
        chunk_negatives.extend_from_slice(heads);
    }
    gk::ChunkedBatch {
        rows,
        positives: b.pos.iter().map(|&(h, r, t)| [h, r, t]).collect(),
        chunk,
        negatives: b.negatives,
        chunk_negatives,
    }
}

/// Why ordo-gpu's kernels cannot run this step, if they cannot: they implement DistMult and
/// ComplEx with the softmax or logistic loss, Adagrad, the L2 regularizer, and no inverse
/// relations.
pub fn unsupported(cfg: &StepConfig) -> Option<&'static str> {
    let ok = matches!(cfg.score, ScoreFn::DistMult | ScoreFn::ComplEx)
        && matches!(cfg.loss, Loss::Softmax | Loss::Logistic)
        && cfg.optimizer == Optimizer::Adagrad
        && (cfg.reg == 0.0 || cfg.regularizer == Regularizer::L2)
        && !cfg.reciprocal;
    (!ok).then_some(
        "--device cuda runs distmult/complex with softmax/logistic, adagrad, l2 and no \
         --reciprocal only",
    )
}

/// ordo-gpu's shape for this step (`None` if [`unsupported`]).
pub fn device_shape(cfg: &StepConfig, relations: usize) -> Option<KgeShape> {
    let model = match cfg.score {
        ScoreFn::DistMult => gk::KgeModel::DistMult,
        ScoreFn::ComplEx => gk::KgeModel::ComplEx,
        _ => return None,
    };
    Some(KgeShape { model, dim: cfg.dim, relations })
}

/// ordo-gpu's hyper-parameters for this step (half the L2 weight: see the module docs; `None`
/// if [`unsupported`]).
pub fn device_hyper(cfg: &StepConfig) -> Option<KgeHyper> {
    let loss = match cfg.loss {
        Loss::Softmax => gk::KgeLoss::Softmax,
        Loss::Logistic => gk::KgeLoss::Logistic,
        _ => return None,
    };
    Some(KgeHyper { lr: cfg.lr, eps: ADAGRAD_EPS, reg: cfg.reg / 2.0, loss })
}

/// The CPU model's dense state (`relations × dim` parameters, then as many Adagrad sums) as
/// ordo-gpu's relation rows (`relations × 2·dim`: parameters, sums).
pub fn relation_rows<T: Copy>(dense: &[T], dim: usize) -> Vec<T> {
    let (params, sums) = dense.split_at(dense.len() / 2);
    params.chunks(dim).zip(sums.chunks(dim)).flat_map(|(p, s)| p.iter().chain(s)).copied().collect()
}

/// The inverse of [`relation_rows`].
pub fn dense_of<T: Copy>(rows: &[T], dim: usize) -> Vec<T> {
    let per_row = |half: usize| rows.chunks(2 * dim).flat_map(move |r| &r[half * dim..][..dim]);
    per_row(0).chain(per_row(1)).copied().collect()
}

/// The KGE step on a CUDA GPU, as an [`ordo::engine::Model`]: each step uploads the batch's rows
/// and triples, runs ordo-gpu's kernels (relations stay on the device, updated in computation
/// order) and copies the rows back. A non-finite loss stops training like the CPU step's
/// [`NonFiniteLoss`] (the kernels have then already updated the device's relations; the rows
/// are not written back).
#[derive(Debug)]
pub struct CudaKgeModel {
    cfg: StepConfig,
    hyper: KgeHyper,
    kernels: KgeKernels,
    loss_sum: f64,
    positives: u64,
    /// The last device steps' uploads, kept alive a while: dropping a device buffer makes its
    /// stream wait for the kernels reading it, which would stall the next batch's copies.
    recent: VecDeque<DeviceKgeBatch>,
}

impl CudaKgeModel {
    /// A GPU model starting from `cpu`'s relation parameters and Adagrad sums.
    pub fn new(gpu: &Gpu, cpu: &EmbeddingModel) -> Result<Self, GpuError> {
        let cfg = *cpu.config();
        let no = |reason| GpuError::NoDevice { reason };
        if let Some(reason) = unsupported(&cfg) {
            return Err(no(reason));
        }
        let relations = cpu.relations().len() / cfg.dim;
        let (Some(shape), Some(hyper)) = (device_shape(&cfg, relations), device_hyper(&cfg)) else {
            return Err(no("unsupported configuration"));
        };
        let dense = cpu.dense();
        let kernels =
            KgeKernels::new(gpu, gpu.new_stream()?, shape, &relation_rows(&dense, cfg.dim))?;
        Ok(CudaKgeModel {
            cfg,
            hyper,
            kernels,
            loss_sum: 0.0,
            positives: 0,
            recent: VecDeque::new(),
        })
    }

    /// Mean loss per positive since the last call, and reset (as [`EmbeddingModel::take_loss`]).
    pub fn take_loss(&mut self) -> f64 {
        let (sum, positives) = self.take_loss_sum();
        sum / positives.max(1) as f64
    }

    /// The loss summed over the positives stepped since the last call, and their number; resets
    /// both (what [`take_loss`](Self::take_loss) averages).
    pub fn take_loss_sum(&mut self) -> (f64, u64) {
        let taken = (self.loss_sum, self.positives);
        (self.loss_sum, self.positives) = (0.0, 0);
        taken
    }

    /// The dense state in the CPU model's layout (parameters, then Adagrad sums; blocking).
    pub fn try_dense(&self) -> Result<Vec<f32>, GpuError> {
        Ok(dense_of(&self.kernels.relations()?, self.cfg.dim))
    }

    /// Count a stepped batch's loss, or refuse a non-finite one (as the CPU step does).
    fn account(&mut self, b: &TripleBatch, loss: f64) -> Result<(), StepError> {
        if !loss.is_finite() {
            return Err(StepError::new(NonFiniteLoss { batch: b.id, loss: loss as f32 }));
        }
        self.loss_sum += loss;
        self.positives += b.pos.len() as u64;
        Ok(())
    }

    /// Relation embeddings, `relations × dim` (blocking).
    pub fn relations(&self) -> Result<Vec<f32>, GpuError> {
        let mut d = self.try_dense()?;
        d.truncate(d.len() / 2);
        Ok(d)
    }

    fn step_inner(&mut self, b: &TripleBatch, rows: &mut BatchRows<'_>) -> Result<f64, GpuError> {
        let stream = self.kernels.stream().clone();
        let batch =
            DeviceKgeBatch::upload(&stream, self.kernels.shape(), &device_batch(b, rows.len()))?;
        let mut values = stream.clone_htod(rows.values())?;
        self.kernels.step(&batch, &mut values, &self.hyper)?;
        let loss = self.kernels.last_loss()?;
        if loss.is_finite() {
            stream.memcpy_dtoh(&values, rows.values_mut())?;
            stream.synchronize()?;
        }
        Ok(loss)
    }
}

impl Model for CudaKgeModel {
    type Data = TripleBatch;
    type Error = StepError;

    fn row_width(&self) -> usize {
        2 * self.cfg.dim
    }

    fn step(&mut self, b: &TripleBatch, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let loss = self.step_inner(b, rows).map_err(StepError::new)?;
        self.account(b, loss)
    }

    /// The dense state ([`try_dense`](Self::try_dense)); empty if the copy fails.
    fn dense(&self) -> Vec<f32> {
        self.try_dense().unwrap_or_default()
    }
}

/// The step on the batch's rows in device memory, inside the [`Pipeline`]. The batch is
/// expanded into ordo-gpu's groups here, on the device thread, and the loss is read back with
/// a second wait per batch (both are what the GEMM-shaped step is to remove).
impl DeviceModel for CudaKgeModel {
    fn step_on_device(
        &mut self,
        streams: &Streams,
        b: &TripleBatch,
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<StepError>> {
        let groups = device_batch(b, batch.rows().len());
        let up = DeviceKgeBatch::upload(&streams.h2d, self.kernels.shape(), &groups)
            .map_err(on_device)?;
        self.kernels.step(&up, batch.values_mut(), &self.hyper).map_err(on_device)?;
        if self.recent.len() == 16 {
            self.recent.pop_front();
        }
        self.recent.push_back(up);
        let loss = self.kernels.last_loss().map_err(on_device)?;
        self.account(b, loss).map_err(SubmitError::Step)
    }
}

/// Device bytes a training run needs, `(total, what)`: the pipeline's staging and cache
/// ([`PipelineConfig::device_bytes`]), the relation rows, and the KGE step's buffers for one
/// batch of `positives` positives with `negatives` shared negatives per side (per scored
/// triple: 3 ids, a score and a coefficient, 3 contribution entries of 2 words, ≤ 44 bytes).
pub fn device_bytes(
    config: &PipelineConfig,
    relations: usize,
    dim: usize,
    positives: usize,
    negatives: usize,
) -> (u64, String) {
    let (staging, cache) = config.device_bytes();
    let rel = relations as u64 * 2 * dim as u64 * 4;
    let scored = positives as u64 * 2 * (negatives as u64 + 1);
    let step = scored * 44;
    let what = format!(
        "staging {} MiB, cache {} MiB, relations {} MiB, step {} MiB",
        staging >> 20,
        cache >> 20,
        rel >> 20,
        step >> 20
    );
    (staging + cache + rel + step, what)
}

/// Batches a `--device cuda` run keeps in flight on the GPU (one in `Sync`).
pub const GPU_DEPTH: usize = 4;

/// ordo-gpu's [`Pipeline`] sized for this training run: batches of at most `max_rows` rows,
/// [`GPU_DEPTH`] in flight (one in `Sync`), in `Oac` a cache that holds every entity row plus
/// one batch (so it cannot overflow whatever the STE does); the kernels of `model` launch on
/// its compute stream. `batch` is `(positives, negatives)` per batch. Refuses a run whose
/// device memory does not fit ([`device_bytes`]).
pub fn cuda_pipeline(
    gpu: &Gpu,
    model: &CudaKgeModel,
    mode: Mode,
    entities: usize,
    max_rows: usize,
    batch: (usize, usize),
) -> Result<Pipeline, GpuError> {
    let dim = model.cfg.dim;
    let cache = (mode == Mode::Oac)
        .then(|| CacheConfig::for_in_flight(1, entities + max_rows, 2 * dim))
        .transpose()?;
    let depth = if mode == Mode::Sync { 1 } else { GPU_DEPTH };
    let config = PipelineConfig { depth, max_rows, width: 2 * dim, cache, timing: false };
    let relations = model.kernels.shape().relations;
    let (need, what) = device_bytes(&config, relations, dim, batch.0, batch.1);
    let (free, _) = gpu.context().mem_get_info()?;
    check_fits(need, free as u64, what)?;
    Pipeline::new(gpu, config, model.kernels.stream().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The throughput config's figures: ComplEx dim 200 (rows of 400 floats), WordNet 3.0's
    /// 82,115 entities and 18 relations, batches of 1,000 positives with 100 shared negatives
    /// per chunk side (≤ 5,800 rows).
    #[test]
    fn the_device_memory_estimate_of_the_throughput_config() {
        let cache = CacheConfig::for_in_flight(1, 82_115 + 5_800, 400).unwrap();
        let config = PipelineConfig {
            depth: GPU_DEPTH,
            max_rows: 5_800,
            width: 400,
            cache: Some(cache),
            timing: false,
        };
        let (need, what) = device_bytes(&config, 18, 200, 1_000, 100);
        // Staging 4 × 5,800 × 1,624 B ≈ 36 MiB; cache 262,144 slots × 1,616 B ≈ 404 MiB;
        // the step 202,000 scored triples × 44 B ≈ 8 MiB.
        assert_eq!(need, 4 * 5_800 * 1_624 + 262_144 * 1_616 + 18 * 400 * 4 + 202_000 * 44);
        assert_eq!(what, "staging 35 MiB, cache 404 MiB, relations 0 MiB, step 8 MiB");
    }

    #[test]
    fn relation_layouts_round_trip() {
        // 2 relations, dim 2: params [1 2 | 3 4], sums [5 6 | 7 8].
        let dense = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let rows = relation_rows(&dense, 2);
        assert_eq!(rows, [1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
        assert_eq!(dense_of(&rows, 2), dense);
    }

    #[test]
    fn cuda_is_refused_with_the_reason_when_unavailable() {
        assert!(check_device(Device::Cpu).is_ok());
        match ordo_gpu::cuda_unavailable_reason() {
            Some(reason) => {
                // On a GPU machine (`ORDO_REQUIRE_GPU=1`) a refusal is a failure, not a pass.
                assert!(
                    std::env::var_os("ORDO_REQUIRE_GPU").is_none_or(|v| v != "1"),
                    "ORDO_REQUIRE_GPU=1 but CUDA is not usable: {reason}"
                );
                let e = check_device(Device::Cuda).unwrap_err().to_string();
                assert!(e.contains(reason), "{e}");
            }
            None => assert!(check_device(Device::Cuda).is_ok()),
        }
    }
}
