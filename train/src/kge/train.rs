//! The training loop: epochs of batches through one of the engine's modes, a valid-MRR
//! evaluation after each epoch, test metrics at the end, and the recorded computation order.

use super::batch::{KgeBatch, NegSampling, Sampling};
use super::checkpoint::{Checkpoint, CheckpointError, EntityRows, Identity};
use super::data::{Dataset, Triple};
use super::eval::{Filter, Metrics, evaluate, evaluate_sampled};
use super::gpu::{CudaKgeModel, Device, check_device, cuda_device, unsupported};
use super::init::{Init, entity_store, init_relations};
use super::optim::Optimizer;
use super::score::{DimError, Loss, Regularizer, ScoreFn};
use super::step::{KgeModel, StepConfig};
use ndarray::{ArrayView2, s};
use ordo::engine::{
    self, CpuDevice, DeviceQueue, Engine, EngineConfig, EngineError, Model, StepError, StopCause,
};
use ordo::store::RowStore;
use ordo_gpu::GpuError;
use std::cell::Cell;
use std::time::Instant;
use thiserror::Error;

/// How batches go through the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One batch in flight: the reference.
    Sync,
    /// Hogwild: no validation; lost updates possible.
    Async,
    /// Async with a staleness bound (`--staleness`), as in Marius.
    Bounded,
    /// Optimistic Asynchrony Control: async throughput, equal to a synchronous order.
    Oac,
}

impl Mode {
    /// All modes, in the order `compare` runs them.
    pub const ALL: [Mode; 4] = [Mode::Sync, Mode::Async, Mode::Bounded, Mode::Oac];

    /// The lower-case name used on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::Bounded => "bounded",
            Mode::Oac => "oac",
        }
    }
}

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
    /// Where negatives come from.
    pub neg_sampling: NegSampling,
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
    /// Staleness bound of [`Mode::Bounded`] (batches in flight).
    pub staleness: usize,
    /// Evaluate on at most the first this many valid and test triples (0 = all).
    pub eval_limit: usize,
    /// Rank against this many sampled entities instead of all (0 = full ranking); see
    /// [`super::eval::evaluate_sampled`].
    pub eval_sample: usize,
    /// Where the step runs ([`Device::Cuda`]: ordo-gpu's kernels and device stage).
    pub device: Device,
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
        }
    }
}

impl TrainConfig {
    /// The options that shape the tables or the sequence of batches, as text (model, dim,
    /// optimizer, reciprocal, seed, batch size, negatives, chunk, negative sampling): what a
    /// checkpoint must agree with, and what a save records.
    pub fn shaping(&self) -> String {
        format!(
            "model {:?} dim {} optimizer {:?} reciprocal {} seed {} batch {} negatives {} chunk {} sampling {:?}",
            self.score,
            self.dim,
            self.optimizer,
            self.reciprocal,
            self.seed,
            self.batch_size,
            self.negatives,
            self.chunk,
            self.neg_sampling
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
        }
    }

    /// Floats per entity row (embedding and optimizer state).
    pub fn row_width(&self) -> usize {
        self.step_config().row_width()
    }

    /// A fresh model and entity store, initialized from the seed.
    pub fn init(&self, d: &Dataset) -> Result<(KgeModel, RowStore), TrainError> {
        let model = self.init_model(d)?;
        Ok((model, self.init_store(d)?))
    }

    /// The entity store of [`init`](Self::init) alone.
    pub fn init_store(&self, d: &Dataset) -> Result<RowStore, TrainError> {
        let init = (self.init, self.init_scale);
        entity_store(d.entities.len(), self.dim, self.row_width(), init, self.seed)
            .map_err(TrainError::Memory)
    }

    /// The model of [`init`](Self::init) alone, after checking the configuration: a resumed
    /// run takes its entity store from the checkpoint and never builds the initial one.
    pub fn init_model(&self, d: &Dataset) -> Result<KgeModel, TrainError> {
        self.score.check_dim(self.dim)?;
        if self.batch_size == 0 || self.negatives == 0 || self.chunk == 0 {
            return Err(TrainError::Config(
                "--batch-size, --negatives and --chunk must be positive",
            ));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(TrainError::Config("--lr must be a positive number"));
        }
        let non_negative = |x: f32| x >= 0.0 && x.is_finite();
        if !(non_negative(self.init_scale) && non_negative(self.reg) && self.margin.is_finite()) {
            return Err(TrainError::Config(
                "--init-scale and --reg-weight must be non-negative numbers, --margin a number",
            ));
        }
        let sc = self.step_config();
        let init = (self.init, self.init_scale);
        let rel = init_relations(
            sc.relation_rows(d.relations.len()),
            sc.relation_dim(),
            init,
            self.score == ScoreFn::RotatE,
            self.seed,
        );
        Ok(KgeModel::with_relations(sc, d.relations.len(), rel))
    }
}

/// Why training stopped.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The embedding dimension does not suit the model.
    #[error(transparent)]
    Dim(#[from] DimError),
    /// A hyper-parameter is out of range.
    #[error("bad configuration: {0}")]
    Config(&'static str),
    /// The entity table could not be allocated (the machine has less memory than the
    /// run's estimate was checked against).
    #[error("entity table: {0}")]
    Memory(ordo::store::StoreError),
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
}

/// The step the engine runs: the CPU model, or the same step on a CUDA GPU.
enum Step {
    Cpu(KgeModel),
    Cuda(Box<CudaKgeModel>),
}

/// The step, and the epoch's loss taken out of it after every batch.
///
/// A session lends the model back only by shared reference between epochs
/// ([`ordo::engine::Session::model`]), so the epoch's loss sum lives in cells the trainer can
/// take through it. Each batch's sum is added in computation order starting from 0 each epoch,
/// so the mean has the bits the model's own per-epoch sum would have.
struct Stepper {
    step: Step,
    loss_sum: Cell<f64>,
    positives: Cell<u64>,
}

impl Stepper {
    fn new(step: Step) -> Self {
        Stepper { step, loss_sum: Cell::new(0.0), positives: Cell::new(0) }
    }

    /// Mean loss per positive since the last call, and reset.
    fn take_loss(&self) -> f64 {
        self.loss_sum.take() / self.positives.take().max(1) as f64
    }

    fn relations(&self) -> Result<Vec<f32>, GpuError> {
        match &self.step {
            Step::Cpu(m) => Ok(m.relations().to_vec()),
            Step::Cuda(m) => m.relations(),
        }
    }

    fn dense(&self) -> Result<Vec<f32>, GpuError> {
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

/// Rows a batch can touch: its positives' heads and tails and its chunks' negatives.
fn max_batch_rows(cfg: &TrainConfig, entities: usize) -> usize {
    let chunks = cfg.batch_size.div_ceil(cfg.chunk.max(1));
    (2 * cfg.batch_size + 2 * chunks * cfg.negatives).min(entities)
}

/// One epoch's record.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochStats {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Training wall time up to the end of this epoch, seconds (evaluation excluded).
    pub wall_s: f64,
    /// This epoch's training wall time, seconds.
    pub epoch_s: f64,
    /// Mean loss per positive over the epoch.
    pub loss: f64,
    /// Filtered valid metrics after the epoch.
    pub valid: Metrics,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct RunResult {
    /// The mode that ran.
    pub mode: Mode,
    /// Per-epoch records.
    pub epochs: Vec<EpochStats>,
    /// Filtered test metrics of the final embeddings.
    pub test: Metrics,
    /// The computation order of each epoch (batch ids in the order the device stepped them).
    pub order: Vec<Vec<u64>>,
    /// Final entity rows (embedding, then optimizer state): the store the run trained, handed
    /// over as it is rather than copied out (on a large graph a copy doubles the peak memory);
    /// [`entity_rows`](Self::entity_rows) copies it when a plain table is wanted.
    pub entities: RowStore,
    /// Floats per entity row.
    pub row_width: usize,
    /// Final relation parameters, `relation rows × relation_dim`.
    pub relations: Vec<f32>,
    /// Floats per relation row.
    pub relation_dim: usize,
    /// Final dense state of the model (relations and their Adagrad sums).
    pub dense: Vec<f32>,
    /// Rows that OAC's validation replaced with a newer value from its cache (stale reads it
    /// repaired), over all epochs; 0 in other modes and in a replay.
    pub rows_replaced: u64,
}

impl RunResult {
    /// Training triples per second over the whole run.
    pub fn triples_per_s(&self, n_train: usize) -> f64 {
        let wall = self.epochs.last().map_or(0.0, |e| e.wall_s);
        (n_train * self.epochs.len()) as f64 / wall.max(1e-9)
    }

    /// Best valid MRR over the epochs.
    pub fn best_valid_mrr(&self) -> f64 {
        self.epochs.iter().map(|e| e.valid.mrr).fold(0.0, f64::max)
    }

    /// The first epoch whose valid MRR reaches `target`, if any.
    pub fn first_reaching(&self, target: f64) -> Option<&EpochStats> {
        self.epochs.iter().find(|e| e.valid.mrr >= target)
    }

    /// Final entity rows as one table, `entities × row_width`, row-major (a copy).
    pub fn entity_rows(&self) -> Vec<f32> {
        self.entities.snapshot()
    }

    /// Entity embeddings only, `entities × dim` (read row by row from the store).
    pub fn entity_embeddings(&self, dim: usize) -> Vec<f32> {
        store_embeddings(&self.entities, dim)
    }
}

/// What the loop tells its observer.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// An epoch of `batches` batches starts.
    EpochStart {
        /// 1-based epoch.
        epoch: usize,
        /// Batches in it.
        batches: usize,
    },
    /// This many more batches were stepped.
    Batches(usize),
    /// An epoch ended and was evaluated.
    EpochEnd(&'a EpochStats),
}

/// The first `dim` columns of every `w`-wide row of `rows`.
fn embedding_columns(rows: &[f32], w: usize, dim: usize) -> Vec<f32> {
    rows.chunks(w.max(1)).flat_map(|r| r[..dim].iter().copied()).collect()
}

/// The entity embeddings (first `dim` floats of each row) of `store`, read row by row without
/// copying the whole store: `N·dim` floats however wide the rows are.
fn store_embeddings(store: &RowStore, dim: usize) -> Vec<f32> {
    let mut row = vec![0.0; store.width()];
    let mut out = Vec::with_capacity(store.rows() * dim);
    for r in 0..store.rows() {
        store.read(r as u64, &mut row).expect("row in range with matching width");
        out.extend_from_slice(&row[..dim]);
    }
    out
}

/// Metrics on `triples` of the entity embeddings `entities` (`N × dim`, row-major) and the
/// relation parameters `relations`: full filtered ranking, or sampled with `cfg.eval_sample`.
pub fn metrics_of_embeddings(
    cfg: &TrainConfig,
    entities: &[f32],
    relations: &[f32],
    triples: &[Triple],
    filter: &Filter,
) -> Metrics {
    let (dim, rdim) = (cfg.dim, cfg.step_config().relation_dim());
    let ents = ArrayView2::from_shape((entities.len() / dim.max(1), dim), entities)
        .expect("rows are dim wide");
    let rel = ArrayView2::from_shape((relations.len() / rdim, rdim), relations).expect("rdim wide");
    let model = (cfg.score, cfg.reciprocal);
    match cfg.eval_sample {
        0 => evaluate(model, ents, rel, triples, filter),
        k => evaluate_sampled(model, ents, rel, triples, filter, (k, cfg.seed)),
    }
}

/// Metrics of the embeddings in `store` and `model` on `triples`.
pub fn metrics(
    cfg: &TrainConfig,
    store_rows: &[f32],
    relations: &[f32],
    triples: &[Triple],
    filter: &Filter,
) -> Metrics {
    let (dim, w, rdim) = (cfg.dim, cfg.row_width(), cfg.step_config().relation_dim());
    let rows =
        ArrayView2::from_shape((store_rows.len() / w, w), store_rows).expect("rows are w wide");
    let rel = ArrayView2::from_shape((relations.len() / rdim, rdim), relations).expect("rdim wide");
    let (model, ents) = ((cfg.score, cfg.reciprocal), rows.slice(s![.., ..dim]));
    match cfg.eval_sample {
        0 => evaluate(model, ents, rel, triples, filter),
        k => evaluate_sampled(model, ents, rel, triples, filter, (k, cfg.seed)),
    }
}

impl Mode {
    /// The engine mode this runs as (`Bounded` with the configured staleness bound; `Async`
    /// adds each step's delta to the store like Marius' and DGL-KE's `+=`).
    pub fn engine_mode(self, cfg: &TrainConfig) -> engine::Mode {
        match self {
            Mode::Sync => engine::Mode::Sync,
            Mode::Async => engine::Mode::Async(engine::AsyncWrite::AddDelta),
            Mode::Bounded => engine::Mode::Bounded(cfg.staleness.max(1)),
            Mode::Oac => engine::Mode::Oac,
        }
    }
}

/// Adjusts the engine configuration of a training run (see [`train`]).
pub type Tune<'a> = dyn Fn(EngineConfig) -> EngineConfig + 'a;

/// Train on `d` in `mode`, evaluating valid MRR after every epoch and test metrics at the end.
/// `tune`, if given, adjusts each epoch's engine configuration (e.g. installs a progress
/// [`engine::Observer`], or in tests a fault-injection hook).
pub fn train(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    observe: &mut dyn FnMut(Event<'_>),
    tune: Option<&Tune<'_>>,
) -> Result<RunResult, TrainError> {
    drive(d, cfg, mode, None, Resumable::default(), observe, tune)
}

/// Checkpointing of a run: where and how often to write, and where to resume from.
#[derive(Debug, Default)]
pub struct Resumable {
    /// Write a checkpoint here every `every` epochs and after the last.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Epochs between checkpoints (0 = only after the last).
    pub every: usize,
    /// Continue from this checkpoint (read with [`Checkpoint::read`]) up to `cfg.epochs`.
    pub resume: Option<Checkpoint>,
}

/// [`train`] with checkpoints and resume (see [`super::checkpoint`]): a run of `a + b` epochs
/// equals one of `a` epochs resumed for `b` more.
pub fn train_resumable(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    resumable: Resumable,
    observe: &mut dyn FnMut(Event<'_>),
    tune: Option<&Tune<'_>>,
) -> Result<RunResult, TrainError> {
    drive(d, cfg, mode, None, resumable, observe, tune)
}

/// Replay recorded computation orders (one list of batch ids per epoch) sequentially
/// ([`engine::replay`]) from the same initialization, with the same per-epoch evaluation: the
/// synchronous run that an OAC run must equal bit for bit. With `cfg.device` = CUDA the replay
/// steps on the GPU too (no device stage: one batch at a time); a GPU run equals bit for bit only
/// a GPU replay (see [`super::gpu`]).
pub fn replay(d: &Dataset, cfg: &TrainConfig, order: &[Vec<u64>]) -> Result<RunResult, TrainError> {
    let cfg = TrainConfig { epochs: order.len(), ..*cfg };
    drive(d, &cfg, Mode::Sync, Some(order), Resumable::default(), &mut |_| {}, None)
}

/// An engine error as the trainer reports it (what a session's `?` converts with).
impl From<EngineError> for TrainError {
    fn from(e: EngineError) -> Self {
        engine_error(e)
    }
}

fn engine_error(e: EngineError) -> TrainError {
    match e {
        EngineError::Stopped { cause: StopCause::StepFailed { source, .. }, .. } => {
            TrainError::Step(source)
        }
        e => TrainError::Engine(e),
    }
}

/// The per-epoch bookkeeping of a run, shared by the engine's session and the replay: the
/// epoch's evaluation, its record, and its checkpoint.
struct Epochs<'a> {
    d: &'a Dataset,
    cfg: &'a TrainConfig,
    /// The known answers of the evaluated queries only ([`Filter::for_queries`]).
    filter: Filter,
    valid: &'a [Triple],
    checkpoint: Option<&'a std::path::Path>,
    every: usize,
    epochs: Vec<EpochStats>,
    orders: Vec<Vec<u64>>,
    rows_replaced: u64,
    wall: f64,
}

/// The entity rows an epoch ended with: the engine's store, or the replay's plain table (rows
/// `width` floats wide).
#[derive(Clone, Copy)]
enum Rows<'a> {
    Store(&'a RowStore),
    Table(&'a [f32], usize),
}

impl Rows<'_> {
    /// The embedding columns, `N × dim`.
    fn embeddings(self, cfg: &TrainConfig) -> Vec<f32> {
        match self {
            Rows::Store(s) => store_embeddings(s, cfg.dim),
            Rows::Table(t, width) => embedding_columns(t, width, cfg.dim),
        }
    }
}

/// A checkpoint streams the full rows (with optimizer state) from the store or the table.
impl EntityRows for Rows<'_> {
    fn count(&self) -> usize {
        match self {
            Rows::Store(s) => s.rows(),
            Rows::Table(t, width) => t.len() / width,
        }
    }
    fn read_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Rows::Store(s) => s.read_row(r, out),
            Rows::Table(t, width) => out.copy_from_slice(&t[r * width..(r + 1) * width]),
        }
    }
}

impl Epochs<'_> {
    /// Record epoch `epoch` (0-based), which trained for `epoch_s` seconds in `order`: evaluate
    /// it, tell `observe`, and write a checkpoint when one is due.
    #[allow(clippy::too_many_arguments)]
    fn end(
        &mut self,
        epoch: usize,
        epoch_s: f64,
        order: Vec<u64>,
        replaced: u64,
        model: &Stepper,
        rows: Rows<'_>,
        observe: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), TrainError> {
        let cfg = self.cfg;
        self.wall += epoch_s;
        self.orders.push(order);
        self.rows_replaced += replaced;
        // Evaluation reads the embedding columns only (N·dim floats, not the optimizer state
        // beside them): full ranking scores every entity per query as one matrix product, so it
        // needs them as one dense matrix; that copy is the bound on evaluation memory.
        let ents = rows.embeddings(cfg);
        let valid =
            metrics_of_embeddings(cfg, &ents, &model.relations()?, self.valid, &self.filter);
        drop(ents);
        let stats = EpochStats {
            epoch: epoch + 1,
            wall_s: self.wall,
            epoch_s,
            loss: model.take_loss(),
            valid,
        };
        observe(Event::EpochEnd(&stats));
        self.epochs.push(stats);
        let done = epoch + 1;
        if let Some(dir) = self.checkpoint
            && (done == cfg.epochs || (self.every > 0 && done.is_multiple_of(self.every)))
        {
            let ck = Checkpoint {
                identity: Identity::of(self.d, cfg),
                epoch: done,
                // Streamed row by row into the files: no copy of the table.
                entities: rows,
                dense: model.dense()?,
                orders: self.orders.clone(),
                epochs: self.epochs.clone(),
                rows_replaced: self.rows_replaced,
            };
            ck.write(dir, self.d, cfg)?;
        }
        Ok(())
    }
}

/// Batches the loader thread builds ahead of the session (each holds its positives, negatives
/// and row ids: ≈ 60 kB at batch 1000): with the engine's bounded queues, the batch memory of
/// a run is O(batch · queue depth).
const LOADER_DEPTH: usize = 8;

/// Train epochs `start..cfg.epochs` in one engine session: its reader and writer threads live
/// across the epochs, and each epoch's batches are built one at a time as the pipeline takes
/// them ([`super::batch::EpochBatches`]), so the bounded queues are the only batch buffer.
#[allow(clippy::too_many_arguments)]
fn session_epochs<D: DeviceQueue<Stepper>>(
    engine: &Engine,
    device: &mut D,
    model: &mut Stepper,
    store: &RowStore,
    sampling: &Sampling,
    start: usize,
    run: &mut Epochs<'_>,
    observe: &mut dyn FnMut(Event<'_>),
) -> Result<(), TrainError> {
    let (d, cfg) = (run.d, run.cfg);
    engine.session(device, model, store, |s| {
        for epoch in start..cfg.epochs {
            let loader = sampling.epoch(&d.train, epoch);
            observe(Event::EpochStart { epoch: epoch + 1, batches: loader.len() });
            let t = Instant::now();
            // The loader builds batches on its own thread, at most `LOADER_DEPTH` ahead, so
            // building overlaps the device step (which runs on this thread, inside
            // `submit`). If a submit fails, the receiver is dropped and the loader stops.
            let submitted = std::thread::scope(|scope| {
                let (tx, rx) = std::sync::mpsc::sync_channel(LOADER_DEPTH);
                scope.spawn(move || {
                    for batch in loader {
                        if tx.send(batch).is_err() {
                            break;
                        }
                    }
                });
                // A batch is well-formed by construction, so a submit fails only once the
                // pipeline stopped, and `finish` then says why.
                s.submit_all(rx)
            });
            let report = s.finish().map_err(engine_error)?;
            submitted.map_err(engine_error)?;
            let epoch_s = t.elapsed().as_secs_f64();
            observe(Event::Batches(report.order.len()));
            let (order, replaced) = (report.batch_ids(), report.rows_replaced);
            run.end(epoch, epoch_s, order, replaced, s.model(), Rows::Store(store), observe)?;
        }
        Ok(())
    })
}

fn drive(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    replay: Option<&[Vec<u64>]>,
    resumable: Resumable,
    observe: &mut dyn FnMut(Event<'_>),
    tune: Option<&Tune<'_>>,
) -> Result<RunResult, TrainError> {
    check_device(cfg.device)?;
    if cfg.device == Device::Cuda
        && let Some(why) = unsupported(&cfg.step_config())
    {
        return Err(TrainError::Config(why));
    }
    let mut cpu_model = cfg.init_model(d)?;
    // A resumed run's store is the checkpoint's (whose tables must match this run's); the
    // initial one is built only for a fresh run, so the two never coexist.
    let (mut store, resume) = match resumable.resume {
        Some(ck) => {
            let fits = ck.identity == Identity::of(d, cfg)
                && cpu_model.set_dense(&ck.dense)
                && (ck.entities.rows(), ck.entities.width()) == (d.entities.len(), cfg.row_width());
            if !fits {
                return Err(TrainError::Config("the checkpoint does not fit this run"));
            }
            (ck.entities, Some((ck.epochs, ck.orders, ck.epoch, ck.rows_replaced)))
        }
        None => (cfg.init_store(d)?, None),
    };
    let (step, mut device) = match cfg.device {
        Device::Cpu => (Step::Cpu(cpu_model), None),
        Device::Cuda => {
            let gpu = ordo_gpu::Gpu::open(0)?;
            let step = Step::Cuda(Box::new(CudaKgeModel::new(&gpu, &cpu_model)?));
            // A replay steps on the calling thread without a device stage.
            let device = match replay {
                Some(_) => None,
                None => {
                    let n = d.entities.len();
                    Some(cuda_device(&gpu, n, max_batch_rows(cfg, n), cfg.dim)?)
                }
            };
            (step, device)
        }
    };
    let mut model = Stepper::new(step);
    let sampling = cfg.sampling(d);
    let limit = |v: &'_ [Triple]| {
        v.len().min(if cfg.eval_limit == 0 { usize::MAX } else { cfg.eval_limit })
    };
    let (valid, test) = (&d.valid[..limit(&d.valid)], &d.test[..limit(&d.test)]);
    let evaluated: Vec<Triple> = valid.iter().chain(test).copied().collect();
    let (epochs, orders, start, rows_replaced) = resume
        .unwrap_or_else(|| (Vec::with_capacity(cfg.epochs), Vec::with_capacity(cfg.epochs), 0, 0));
    let mut run = Epochs {
        d,
        cfg,
        filter: Filter::for_queries(d, &evaluated),
        valid,
        checkpoint: resumable.checkpoint.as_deref(),
        every: resumable.every,
        wall: epochs.last().map_or(0.0, |e: &EpochStats| e.wall_s),
        epochs,
        orders,
        rows_replaced,
    };
    drop(evaluated);
    match replay {
        Some(recorded) => {
            // The replay's plain table: the engine's sequential reference.
            let mut table = store.snapshot();
            for epoch in start..cfg.epochs {
                let mut loader = sampling.epoch(&d.train, epoch);
                let first_id = loader.first_id();
                observe(Event::EpochStart { epoch: epoch + 1, batches: loader.len() });
                let t = Instant::now();
                let order = recorded.get(epoch).ok_or(TrainError::Config("no recorded order"))?;
                // An id before this epoch's first, or past its last, is `UnknownBatch`.
                let batch_of =
                    |id: u64| id.checked_sub(first_id).and_then(|i| loader.get(i as usize));
                engine::replay_ids(&mut model, &mut table, order, batch_of)
                    .map_err(engine_error)?;
                let epoch_s = t.elapsed().as_secs_f64();
                run.end(
                    epoch,
                    epoch_s,
                    order.clone(),
                    0,
                    &model,
                    Rows::Table(&table, cfg.row_width()),
                    observe,
                )?;
            }
            store = RowStore::from_values(d.entities.len(), cfg.row_width(), &table)
                .expect("the table is entities × row_width");
        }
        None => {
            let threads = cfg.threads.max(1);
            let mut ecfg = EngineConfig::new(mode.engine_mode(cfg)).threads(threads, threads);
            if let Some(tune) = tune {
                ecfg = tune(ecfg);
            }
            let engine = Engine::new(ecfg).map_err(TrainError::Engine)?;
            let run = &mut run;
            match device.as_mut() {
                None => {
                    let cpu = &mut CpuDevice::new();
                    session_epochs(
                        &engine, cpu, &mut model, &store, &sampling, start, run, observe,
                    )?
                }
                Some(dev) => {
                    let r = session_epochs(
                        &engine, dev, &mut model, &store, &sampling, start, run, observe,
                    );
                    // The device stage keeps a CUDA failure of its cache calls for the next
                    // step; one raised by the last insert is only seen here.
                    if let Some(e) = dev.take_error() {
                        return Err(TrainError::Cuda(e));
                    }
                    r?
                }
            }
        }
    }
    let relations = model.relations()?;
    let ents = store_embeddings(&store, cfg.dim);
    let test = metrics_of_embeddings(cfg, &ents, &relations, test, &run.filter);
    drop(ents);
    Ok(RunResult {
        mode,
        epochs: run.epochs,
        test,
        order: run.orders,
        entities: store,
        row_width: cfg.row_width(),
        relations,
        relation_dim: cfg.step_config().relation_dim(),
        dense: model.dense()?,
        rows_replaced: run.rows_replaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_stops_training_with_a_clear_error_in_every_mode() {
        let d = Dataset::load("nations").unwrap();
        let cfg =
            TrainConfig { dim: 8, epochs: 3, lr: 1e30, init_scale: 1e18, ..TrainConfig::default() };
        for mode in Mode::ALL {
            let err = train(&d, &cfg, mode, &mut |_| {}, None).unwrap_err();
            assert!(matches!(err, TrainError::Step(_)), "{mode:?}: {err}");
            assert!(err.to_string().contains("training diverged"), "{err}");
        }
    }

    #[test]
    fn bad_hyper_parameters_are_errors() {
        let d = Dataset::load("nations").unwrap();
        let bad = [
            TrainConfig { dim: 7, ..TrainConfig::default() },
            TrainConfig { batch_size: 0, ..TrainConfig::default() },
            TrainConfig { lr: f32::NAN, ..TrainConfig::default() },
        ];
        for cfg in bad {
            assert!(train(&d, &cfg, Mode::Oac, &mut |_| {}, None).is_err(), "{cfg:?}");
        }
    }

    #[test]
    fn replay_rejects_an_order_from_another_epoch() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 1, ..TrainConfig::default() };
        assert!(matches!(replay(&d, &cfg, &[vec![1000]]), Err(TrainError::Engine(_))));
    }
}
