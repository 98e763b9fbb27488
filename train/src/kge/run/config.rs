//! A run's configuration: every hyper-parameter, and what the batch sampler and the step take
//! from it. The fresh model and store it describes are built by [`crate::kge::training::initial_state`].

use crate::kge::data::batch::{NegSampling, Sampling};
use crate::kge::data::dataset::Dataset;
use crate::kge::model::device::Device;
use crate::kge::model::init::Init;
use crate::kge::model::optim::Optimizer;
use crate::kge::model::precision::Precision;
use crate::kge::model::score::{Loss, Regularizer, ScoreFn};
use crate::kge::model::step::StepConfig;

/// Every hyper-parameter of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    /// Scoring function.
    pub score: ScoreFn,
    /// Loss.
    pub loss: Loss,
    /// Embedding floats per entity and relation.
    pub dim: usize,
    /// Learning rate.
    pub lr: f32,
    /// Optimizer (its state travels with each entity row).
    pub optimizer: Optimizer,
    /// Regularizer weight per use of an embedding (0 = off).
    pub reg: f32,
    /// The regularizer `reg` weighs.
    pub regularizer: Regularizer,
    /// Initial distribution of embeddings.
    pub init: Init,
    /// Its scale (uniform bound, normal standard deviation, Xavier gain).
    pub init_scale: f32,
    /// γ of the margin loss.
    pub margin: f32,
    /// Inverse relations (tail-only corruption through `r⁻¹` for the head side).
    pub reciprocal: bool,
    /// Where the `negatives` come from.
    pub neg_sampling: NegSampling,
    /// In-batch negatives per positive and side besides the `negatives` (see
    /// [`Sampling::batch_negatives`]; 0 = none). PyTorch-BigGraph's default setting is 100
    /// uniform `negatives` and 50 of these.
    pub batch_negatives: usize,
    /// Passes over the training triples.
    pub epochs: usize,
    /// Positives per batch.
    pub batch_size: usize,
    /// Negatives per positive and side.
    pub negatives: usize,
    /// Positives sharing one set of negatives (1 = none shared).
    pub chunk: usize,
    /// Master seed (initialization, shuffles, negatives).
    pub seed: u64,
    /// Engine reader and writer threads.
    pub threads: usize,
    /// Staleness bound of [`TrainMode::Bounded`](super::mode::TrainMode::Bounded) (batches in flight).
    pub staleness: usize,
    /// Evaluate on at most the first this many valid and test triples (0 = all).
    pub eval_limit: usize,
    /// Rank against this many sampled entities instead of all (0 = full ranking); see
    /// [`crate::kge::eval::ranking::evaluate_sampled`].
    pub eval_sample: usize,
    /// Where the step runs ([`Device::Cuda`]: ordo-gpu's kernels and device stage).
    pub device: Device,
    /// How the entity rows are stored (`f32`, or bf16 rounded stochastically).
    pub precision: Precision,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            score: ScoreFn::ComplEx,
            loss: Loss::Softmax,
            dim: 100,
            lr: 0.1,
            optimizer: Optimizer::Adagrad,
            reg: 0.0,
            regularizer: Regularizer::L2,
            init: Init::Uniform,
            init_scale: 0.1,
            margin: 1.0,
            reciprocal: false,
            neg_sampling: NegSampling::Uniform,
            batch_negatives: 0,
            epochs: 25,
            batch_size: 128,
            negatives: 64,
            chunk: 16,
            seed: 0,
            threads: 1,
            staleness: 4,
            eval_limit: 0,
            eval_sample: 0,
            device: Device::Cpu,
            precision: Precision::F32,
        }
    }
}

impl TrainConfig {
    /// The options that shape the tables or the sequence of batches, as text (model, dim,
    /// optimizer, reciprocal, seed, batch size, negatives, chunk, negative sampling): what a
    /// checkpoint must agree with, and what a save records. In-batch negatives are named only
    /// when there are some, so the runs without them read as they always have.
    pub fn shaping(&self) -> String {
        let in_batch = match self.batch_negatives {
            0 => String::new(),
            b => format!(" batch-negatives {b}"),
        };
        format!(
            "model {:?} dim {} optimizer {:?} reciprocal {} seed {} batch {} negatives {} chunk {} sampling {:?}{}",
            self.score,
            self.dim,
            self.optimizer,
            self.reciprocal,
            self.seed,
            self.batch_size,
            self.negatives,
            self.chunk,
            self.neg_sampling,
            in_batch
        )
    }

    /// The batch sampler for a dataset.
    pub fn sampling(&self, d: &Dataset) -> Sampling {
        Sampling {
            seed: self.seed,
            batch_size: self.batch_size,
            negatives: self.negatives,
            chunk: self.chunk,
            entities: d.entities.len() as u32,
            neg_sampling: self.neg_sampling,
            batch_negatives: self.batch_negatives,
        }
    }

    /// The step's hyper-parameters.
    pub fn step_config(&self) -> StepConfig {
        StepConfig {
            score: self.score,
            loss: self.loss,
            dim: self.dim,
            lr: self.lr,
            reg: self.reg,
            regularizer: self.regularizer,
            optimizer: self.optimizer,
            margin: self.margin,
            reciprocal: self.reciprocal,
            precision: self.precision,
            seed: self.seed,
        }
    }

    /// Floats per entity row (embedding and optimizer state).
    pub fn row_width(&self) -> usize {
        self.step_config().row_width()
    }
}
