//! KGE training with the entity table in a partition buffer (`ordo-train kge --storage disk
//! --storage-dir DIR --partitions P --buffer c`; `--storage memory` is the in-memory twin: the
//! same partitions, order and batches without a disk).
//!
//! The entity rows (embedding and optimizer state together) live in an
//! [`ordo::partition::PartitionedStorage`]; relations stay dense in the model. An epoch walks
//! [`ordo::partition::ordering::beta`]'s buffer states; in each it trains the state's edge
//! buckets `(i, j)` (the training triples with head in partition `i` and tail in `j`), each
//! bucket's triples shuffled by `(seed, epoch, bucket)` and cut into batches, every batch's
//! negatives drawn from the rows of its bucket's two partitions (both in the buffer, as in
//! Marius and PyTorch-BigGraph). The buffer moves with an [`ordo::partition::Walk`] fed the
//! session's completions, without a drain at the swaps: a state enters once its partitions fit
//! beside those the previous state's batches in flight touch, and a partition leaves once none
//! does (the protocol of [`ordo::partition`]), so the pipeline stays full and `--mode oac` ends
//! equal to the synchronous replay of its recorded order. The epoch's end drains.
//!
//! **Replay invariant:** batch `id` is a pure function of `(seed, epoch, state, bucket, index)`;
//! ids are `epoch << 32 | position in the epoch`.
//!
//! **Evaluation streams the table once.** After each epoch's drain the validation triples, and
//! after the last validation and test together, are ranked (filtered, full or sampled as
//! `cfg.eval_sample` asks) by [`crate::kge::eval::eval_stream`] over [`StoredEntities`]: the
//! queries' own rows read row by row, then the embedding columns of one partition at a time,
//! from the buffer or streamed from its file (each partition outside the buffer once per
//! evaluation), never the table or its optimizer state. The metrics equal the in-memory
//! evaluator's on the same table, bit for bit.
//!
//! A disk run checkpoints at every epoch's end: the dense parameters to `dense.e{epoch}.f32`
//! (synced), then the storage's manifest, which names the epoch; a run started on a folder that
//! holds a checkpoint of the same run resumes from it, bit for bit. The initial files are not
//! kept once written back ([`PartitionedStorage::discard_initial`]), so a first epoch needs one
//! copy of the table on disk: a run killed before its first checkpoint starts over, writing
//! them again from the seed.

use crate::kge::data::batch::{NegSampling, Sampling, SplitMix64, TripleBatch};
use crate::kge::data::dataset::Dataset;
use crate::kge::eval::eval_stream::{EntityParts, evaluate_parts_sets};
use crate::kge::eval::ranking::{Filter, Metrics};
use crate::kge::model::step::{EmbeddingModel, NonFiniteLoss};
use crate::kge::run::config::TrainConfig;
use crate::kge::training::error::TrainError;
use ordo::engine::{
    self, Batch, CpuDevice, Engine, EngineConfig, EngineError, StepError, StopCause,
};
use ordo::partition::ordering::{Plan, SwapCost, beta};
use ordo::partition::{
    Cursor, DiskFiles, Geometry, IoStats, MemoryFiles, PartitionError, PartitionFiles,
    PartitionedStorage, Walk,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the entity partitions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    /// Partition files in `--storage-dir`, `--buffer` of them in memory.
    Disk,
    /// The in-memory twin: the same partitions and order, no disk.
    Memory,
}

/// The partition buffer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOpts {
    /// Disk or the twin.
    pub storage: StorageKind,
    /// The folder of a disk run.
    pub dir: Option<PathBuf>,
    /// `P`.
    pub partitions: usize,
    /// `c`.
    pub buffer: usize,
}

/// Why a partitioned run failed.
#[derive(Debug, thiserror::Error)]
pub enum PartitionedError {
    /// The storage refused its geometry or files, or its I/O failed.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The model's configuration.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The engine or a step failed.
    #[error("engine: {0}")]
    Engine(String),
    /// `--storage disk` without `--storage-dir`.
    #[error("--storage disk needs --storage-dir DIR")]
    NoDir,
    /// The dense parameters of the checkpoint to resume are missing or of the wrong size.
    #[error("{path}: {reason}")]
    Dense {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl<E: std::fmt::Display> From<EngineError<E>> for PartitionedError {
    fn from(e: EngineError<E>) -> Self {
        PartitionedError::Engine(e.to_string())
    }
}

impl PartitionedError {
    /// Whether the storage folder (or the request) is at fault: a partition file that is
    /// missing, cut short, fails its checksum or is another run's, a manifest that is not one,
    /// a bad geometry. A failing read or write, or a diverged run, is not.
    pub fn is_bad_input(&self) -> bool {
        match self {
            PartitionedError::Partition(p) => matches!(
                p,
                PartitionError::Plan(_)
                    | PartitionError::TooManyPartitions { .. }
                    | PartitionError::ForeignRun { .. }
                    | PartitionError::AlreadyCreated { .. }
                    | PartitionError::BadManifest { .. }
                    | PartitionError::MissingPartition { .. }
                    | PartitionError::TruncatedPartition { .. }
                    | PartitionError::Checksum { .. }
            ),
            PartitionedError::NoDir | PartitionedError::Dense { .. } => true,
            PartitionedError::Train(_) | PartitionedError::Engine(_) => false,
        }
    }
}

/// A session of epoch `epoch` (1-based) that stopped: a diverged step as
/// [`TrainError::Diverged`] (naming the batch, the epoch and `--lr`), the rest as the engine's
/// message.
fn stopped(e: EngineError<NonFiniteLoss>, epoch: usize) -> PartitionedError {
    match e {
        EngineError::Stopped { cause: StopCause::StepFailed { source, .. }, .. } => {
            TrainError::Diverged { epoch, source: StepError::new(source) }.into()
        }
        e => e.into(),
    }
}

impl PartitionOpts {
    /// Check the geometry against `entities` before anything is read or written.
    pub fn check(&self, entities: usize) -> Result<(), PartitionedError> {
        beta(self.partitions, self.buffer).map_err(PartitionError::from)?;
        if self.partitions > entities {
            return Err(PartitionError::TooManyPartitions {
                partitions: self.partitions,
                rows: entities,
            }
            .into());
        }
        if self.storage == StorageKind::Disk && self.dir.is_none() {
            return Err(PartitionedError::NoDir);
        }
        Ok(())
    }
}

/// The training triples by edge bucket.
pub struct Buckets {
    geometry: Geometry,
    /// Per bucket `src · P + dst`, its training triples' indices in file order.
    index: Vec<Vec<u32>>,
}

impl Buckets {
    /// Sort `d`'s training triples into the buckets of `geometry`.
    pub fn new(d: &Dataset, geometry: Geometry) -> Self {
        let p = geometry.partitions;
        let bucket = |t: &crate::kge::data::dataset::Triple| {
            geometry.partition_of(t.h as usize) * p + geometry.partition_of(t.t as usize)
        };
        // Counted first, so each bucket is allocated once at its size (no growth slack: at 60M
        // triples the index is 238 MB).
        let mut counts = vec![0usize; p * p];
        d.train.iter().for_each(|t| counts[bucket(t)] += 1);
        let mut index: Vec<Vec<u32>> = counts.into_iter().map(Vec::with_capacity).collect();
        for (i, t) in d.train.iter().enumerate() {
            index[bucket(t)].push(i as u32);
        }
        Buckets { geometry, index }
    }

    /// Batches of `size` triples an epoch holds (a bucket's last batch may be short).
    pub fn batches(&self, size: usize) -> usize {
        self.index.iter().map(|b| b.len().div_ceil(size.max(1))).sum()
    }

    /// Batches state `state` of `plan` holds ([`state_batches`](Self::state_batches) makes
    /// them), of `size` triples (a bucket's last batch may be short).
    pub fn state_len(&self, plan: &Plan, state: usize, size: usize) -> usize {
        let p = self.geometry.partitions;
        let buckets = plan.states[state].buckets.iter();
        buckets.map(|b| self.index[b.src * p + b.dst].len().div_ceil(size.max(1))).sum()
    }

    /// The batches of state `state` of `plan` in `epoch`, the first of them at position
    /// `first` of the epoch, made one at a time as they are taken (a bucket's shuffled order
    /// at a time): the state's batches are never all in memory (the first state of a 38M-entity
    /// run holds 3.7 million triples).
    pub fn state_batches<'a>(
        &'a self,
        d: &'a Dataset,
        sampling: &'a Sampling,
        plan: &'a Plan,
        state: usize,
        epoch: usize,
        first: usize,
    ) -> impl Iterator<Item = Batch<TripleBatch>> + 'a {
        let (g, p) = (self.geometry, self.geometry.partitions);
        let size = sampling.batch_size.max(1);
        let chunk = sampling.chunk.max(1);
        let mut at = first;
        plan.states[state].buckets.iter().flat_map(move |b| {
            let bucket = b.src * p + b.dst;
            let mut order = self.index[bucket].clone();
            let mut shuffle = SplitMix64::new(
                sampling.seed,
                0xB0C4_E700_0000 ^ ((epoch as u64) << 24) ^ bucket as u64,
            );
            for i in (1..order.len()).rev() {
                order.swap(i, shuffle.below(i as u32 + 1) as usize);
            }
            let (src_len, dst_len) = (g.len(b.src), if b.dst == b.src { 0 } else { g.len(b.dst) });
            let pool = (src_len + dst_len) as u32;
            let row_of = move |x: u32| {
                let x = x as usize;
                (if x < src_len { g.start(b.src) + x } else { g.start(b.dst) + x - src_len }) as u32
            };
            let (start, n) = (at, order.len().div_ceil(size));
            at += n;
            (0..n).map(move |k| {
                let positives = &order[k * size..((k + 1) * size).min(order.len())];
                let id = ((epoch as u64) << 32) | (start + k) as u64;
                let triples: Vec<_> = positives.iter().map(|&i| d.train[i as usize]).collect();
                let mut neg = SplitMix64::new(sampling.seed, id);
                let n = triples.len().div_ceil(chunk) * sampling.negatives;
                let neg_t = (0..n).map(|_| row_of(neg.below(pool))).collect();
                let neg_h = (0..n).map(|_| row_of(neg.below(pool))).collect();
                sampling.assemble(id, &triples, neg_t, neg_h)
            })
        })
    }
}

/// Progress of a partitioned run.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event {
    /// A buffer state of the epoch was entered: where the epoch stands.
    Progress {
        /// 1-based.
        epoch: usize,
        /// Batches submitted so far this epoch.
        done: usize,
        /// Batches in the epoch.
        total: usize,
        /// Wall seconds since the epoch started.
        seconds: f64,
    },
    /// An epoch ended.
    Epoch {
        /// 1-based.
        epoch: usize,
        /// Batches trained.
        batches: usize,
        /// Wall seconds.
        seconds: f64,
        /// Of them, waiting for a partition to load.
        io_wait: Duration,
        /// Filtered validation metrics after the epoch (`None` without validation triples).
        valid: Option<Metrics>,
        /// Seconds the validation took (after `seconds`).
        eval_seconds: f64,
        /// Buffer states whose entry had to drain the session (the previous state's batches
        /// not yet finished, e.g. a state with fewer batches than the pipeline holds): the
        /// swaps that emptied the pipeline.
        drains: usize,
    },
}

/// The entity embeddings of a partitioned storage (the first `dim` columns of each row), one
/// partition at a time ([`PartitionedStorage::columns`]). Read only while no batch is in flight.
pub struct StoredEntities<'a> {
    /// The storage.
    pub storage: &'a PartitionedStorage,
    /// Floats of a row that are its embedding.
    pub dim: usize,
}

impl EntityParts for StoredEntities<'_> {
    type Error = PartitionError;

    fn entities(&self) -> usize {
        self.storage.geometry().rows
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        self.storage.geometry().partitions
    }

    fn part(&self, k: usize) -> Result<(usize, Vec<f32>), PartitionError> {
        Ok((self.storage.geometry().start(k), self.storage.columns(k, 0..self.dim)?))
    }

    /// Row by row ([`PartitionedStorage::rows`]): no partition is streamed for the queries.
    fn rows(&self, ids: &[u32]) -> Result<Vec<f32>, PartitionError> {
        let g = self.storage.geometry();
        let mut out = Vec::with_capacity(ids.len() * self.dim);
        let mut at = 0;
        while at < ids.len() {
            let p = g.partition_of(ids[at] as usize);
            let end = at + ids[at..].partition_point(|&e| g.partition_of(e as usize) == p);
            let local: Vec<usize> = ids[at..end].iter().map(|&e| e as usize - g.start(p)).collect();
            out.extend(self.storage.rows(p, &local, 0..self.dim)?);
            at = end;
        }
        Ok(out)
    }
}

/// The triples a run evaluates (valid and test cut to `cfg.eval_limit`) and their filter.
struct Evaluation<'a> {
    valid: &'a [crate::kge::data::dataset::Triple],
    test: &'a [crate::kge::data::dataset::Triple],
    filter: Filter,
}

impl<'a> Evaluation<'a> {
    fn new(d: &'a Dataset, cfg: &TrainConfig) -> Self {
        let limit = |n: usize| n.min(if cfg.eval_limit == 0 { usize::MAX } else { cfg.eval_limit });
        let (valid, test) = (&d.valid[..limit(d.valid.len())], &d.test[..limit(d.test.len())]);
        let evaluated: Vec<_> = valid.iter().chain(test).copied().collect();
        Evaluation { valid, test, filter: Filter::for_queries(d, &evaluated) }
    }

    /// The metrics of each set of `sets` on the storage's rows and `model`'s relations, in one
    /// pass over the partitions (each one not in the buffer streamed once).
    fn metrics(
        &self,
        cfg: &TrainConfig,
        storage: &PartitionedStorage,
        model: &EmbeddingModel,
        sets: &[&[crate::kge::data::dataset::Triple]],
    ) -> Result<Vec<Metrics>, PartitionError> {
        let rdim = cfg.step_config().relation_dim();
        let rel = model.relations();
        let rel = ndarray::ArrayView2::from_shape((rel.len() / rdim, rdim), rel)
            .expect("relations are rdim wide");
        let sample = (cfg.eval_sample > 0).then_some((cfg.eval_sample, cfg.seed));
        let parts = StoredEntities { storage, dim: cfg.dim };
        evaluate_parts_sets((cfg.score, cfg.reciprocal), &parts, rel, sets, &self.filter, sample)
    }
}

/// What a partitioned run ends with.
pub struct PartitionedRun {
    /// The entity storage (resident partitions, the rest in files).
    pub storage: PartitionedStorage,
    /// The model (relations).
    pub model: EmbeddingModel,
    /// The plan of every epoch.
    pub plan: Plan,
    /// Per epoch trained by this call, the recorded order of batch ids.
    pub orders: Vec<Vec<u64>>,
    /// The first epoch this call trained (0, or the resumed checkpoint's).
    pub start_epoch: usize,
    /// Bytes and wait of the storage's I/O.
    pub io: IoStats,
    /// Wall time of the epochs (evaluation not included).
    pub train_time: Duration,
    /// Filtered test metrics of the final table (full or sampled as `cfg.eval_sample` asks).
    pub test: Metrics,
}

impl PartitionedRun {
    /// The plan's swaps against the lower bound.
    pub fn cost(&self) -> SwapCost {
        self.plan.cost()
    }
}

/// The run id a storage folder is bound to: the dataset, the table's shape and the seed.
pub fn run_id(d: &Dataset, cfg: &TrainConfig) -> String {
    format!("{}:{}x{}:{:?}:seed{}", d.name, d.entities.len(), cfg.row_width(), cfg.score, cfg.seed)
}

fn dense_path(dir: &Path, epoch: u64) -> PathBuf {
    dir.join(format!("dense.e{epoch}.f32"))
}

/// Write the dense parameters of the checkpoint at `epoch` (synced), before its manifest.
fn write_dense(dir: &Path, epoch: u64, dense: &[f32]) -> Result<(), PartitionError> {
    use std::io::Write;
    let path = dense_path(dir, epoch);
    let bytes: Vec<u8> = dense.iter().flat_map(|v| v.to_le_bytes()).collect();
    let io =
        |source| PartitionError::on_write(path.display().to_string(), bytes.len() as u64, source);
    let mut f = std::fs::File::create(&path).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    crate::atomic_fs::crash_point();
    Ok(())
}

fn read_dense(dir: &Path, epoch: u64, len: usize) -> Result<Vec<f32>, PartitionedError> {
    let path = dense_path(dir, epoch);
    let bad = |reason: String| PartitionedError::Dense { path: path.display().to_string(), reason };
    let bytes = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
    if bytes.len() != 4 * len {
        return Err(bad(format!("{} bytes, not {}", bytes.len(), 4 * len)));
    }
    Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect())
}

/// The initial entity rows, row `r` in order: [`crate::kge::model::init`]'s stream, so a
/// partitioned run starts from the same table as an in-memory one.
fn initial_rows(cfg: &TrainConfig) -> impl FnMut(usize, &mut [f32]) {
    let (dim, init, scale) = (cfg.dim, cfg.init, cfg.init_scale);
    let mut g = SplitMix64::new(cfg.seed, 0xE7);
    move |_, row| {
        row.fill(0.0);
        row[..dim].copy_from_slice(&init.sample(&mut g, dim, dim, scale));
    }
}

/// Create or resume the storage of `opts` for `d`; returns it with the epoch to start at and
/// the resumed dense parameters, if any.
pub fn open_storage(
    d: &Dataset,
    cfg: &TrainConfig,
    opts: &PartitionOpts,
) -> Result<(PartitionedStorage, usize, Option<Vec<f32>>), PartitionedError> {
    opts.check(d.entities.len())?;
    let geometry =
        Geometry { rows: d.entities.len(), width: cfg.row_width(), partitions: opts.partitions };
    let id = run_id(d, cfg);
    match (&opts.storage, &opts.dir) {
        (StorageKind::Memory, _) => {
            let s = PartitionedStorage::create(
                MemoryFiles::default(),
                geometry,
                opts.buffer,
                &id,
                initial_rows(cfg),
            )?;
            Ok((s, 0, None))
        }
        (StorageKind::Disk, None) => Err(PartitionedError::NoDir),
        (StorageKind::Disk, Some(dir)) => {
            let files = DiskFiles::new(dir)
                .map_err(|source| PartitionError::Io { path: dir.display().to_string(), source })?
                .with_durability_point(crate::atomic_fs::crash_point);
            match PartitionedStorage::open(files.clone(), &id, opts.buffer) {
                Ok((s, cursor)) => {
                    if cursor == Cursor::default() {
                        s.discard_initial()?;
                    }
                    if s.geometry() != geometry {
                        return Err(PartitionError::BadManifest {
                            manifest: dir.display().to_string(),
                            reason: format!(
                                "geometry {:?} is not this run's {geometry:?}",
                                s.geometry()
                            ),
                        }
                        .into());
                    }
                    let dense = match cursor.epoch {
                        0 => None,
                        e => Some(read_dense(
                            dir,
                            e,
                            engine::Model::dense(&cfg.init_model(d)?).len(),
                        )?),
                    };
                    Ok((s, cursor.epoch as usize, dense))
                }
                Err(PartitionError::MissingPartition { .. }) if never_checkpointed(dir, &id) => {
                    // Killed before its first checkpoint, after a write-back deleted an initial
                    // file (below): the initial rows are the seed's, so start over.
                    start_over(&files, dir)?;
                    create_discarding(files, geometry, opts.buffer, &id, cfg)
                }
                Err(PartitionError::NoManifest { .. }) => {
                    create_discarding(files, geometry, opts.buffer, &id, cfg)
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// A new disk storage whose initial files are not kept once written back
/// ([`PartitionedStorage::discard_initial`]): [`initial_rows`] writes them again after a crash,
/// so a first epoch needs one copy of the table on disk, not two.
fn create_discarding(
    files: DiskFiles,
    geometry: Geometry,
    buffer: usize,
    id: &str,
    cfg: &TrainConfig,
) -> Result<(PartitionedStorage, usize, Option<Vec<f32>>), PartitionedError> {
    let s = PartitionedStorage::create(files, geometry, buffer, id, initial_rows(cfg))?;
    s.discard_initial()?;
    Ok((s, 0, None))
}

/// Whether `dir`'s manifest is run `id`'s as created: no checkpoint since.
fn never_checkpointed(dir: &Path, id: &str) -> bool {
    let read = std::fs::read(dir.join("manifest.json")).ok();
    let m = read.and_then(|b| serde_json::from_slice::<ordo::partition::Manifest>(&b).ok());
    m.is_some_and(|m| m.run_id == id && m.cursor == Cursor::default())
}

/// Delete a never-checkpointed storage's files, the manifest last (a crash in between leaves
/// the same state to start over from).
fn start_over(files: &DiskFiles, dir: &Path) -> Result<(), PartitionedError> {
    let io = |path: String| move |source| PartitionError::Io { path, source };
    for name in files.list().map_err(io(dir.display().to_string()))? {
        files.remove(name).map_err(io(files.describe(Some(name))))?;
    }
    let manifest = dir.join("manifest.json");
    std::fs::remove_file(&manifest).map_err(io(manifest.display().to_string()))?;
    Ok(())
}

/// Train `cfg.epochs` epochs (from a resumed checkpoint's epoch on) in `mode` with the entity
/// rows in the partition buffer of `opts`.
pub fn train(
    d: &Dataset,
    cfg: &TrainConfig,
    opts: &PartitionOpts,
    mode: engine::Mode,
    observe: &mut dyn FnMut(Event),
) -> Result<PartitionedRun, PartitionedError> {
    if cfg.neg_sampling != NegSampling::Uniform || cfg.batch_negatives > 0 {
        // The buckets draw their negatives uniformly from the resident partitions themselves.
        let why = "--storage draws its negatives uniformly: give --neg-sampling uniform and no \
                   --batch-negatives";
        return Err(TrainError::Config(why).into());
    }
    let (storage, start_epoch, dense) = open_storage(d, cfg, opts)?;
    let mut model = cfg.init_model(d)?;
    if let Some(dense) = dense {
        model.set_dense(&dense);
    }
    let plan = beta(opts.partitions, opts.buffer).map_err(PartitionError::from)?;
    let buckets = Buckets::new(d, storage.geometry());
    let sampling = cfg.sampling(d);
    let threads = cfg.threads.max(1);
    let engine = Engine::new(EngineConfig::new(mode).threads(threads, threads))?;
    let n = plan.states.len();
    let total = buckets.batches(sampling.batch_size);
    let evaluation = Evaluation::new(d, cfg);
    let mut train_time = Duration::ZERO;
    let mut test = None;
    let orders = engine.session(&mut CpuDevice::new(), &mut model, &storage, |s| {
        let mut orders = Vec::new();
        let mut walk = Walk::new(&storage, &plan);
        for epoch in start_epoch..cfg.epochs {
            let (t, wait0) = (Instant::now(), storage.io_stats().wait);
            let mut order = Vec::new();
            // Per state, the position of its first batch in the epoch: batch ids name their
            // position, so a completion names its state.
            let mut firsts: Vec<usize> = Vec::with_capacity(n);
            let state_of = |firsts: &[usize], id: u64| {
                firsts.partition_point(|&f| f as u64 <= (id & 0xFFFF_FFFF)) - 1
            };
            let (mut at, mut drains) = (0, 0);
            for k in 0..n {
                let count = buckets.state_len(&plan, k, sampling.batch_size);
                // Enter the state as soon as its partitions fit beside those the batches in
                // flight still touch: the pipeline stays full across the swap. A state that
                // cannot enter yet (the earlier state's batches have not finished: only when a
                // state has fewer batches than the pipeline holds) drains the session.
                while !walk.try_enter(k, count)? {
                    let done = s.completions();
                    if done.is_empty() {
                        order.extend(s.finish().map_err(|e| stopped(e, epoch + 1))?.batch_ids());
                        walk.drained()?;
                        drains += 1;
                    }
                    for c in done {
                        walk.finished(state_of(&firsts, c.batch_id))?;
                    }
                }
                firsts.push(at);
                if at > 0 {
                    let seconds = t.elapsed().as_secs_f64();
                    observe(Event::Progress { epoch: epoch + 1, done: at, total, seconds });
                }
                let batches = buckets.state_batches(d, &sampling, &plan, k, epoch, at);
                at += count;
                for batch in batches {
                    if let Err(e) = s.submit(batch) {
                        // A submit refused after a failure (halted): `finish` says what failed.
                        s.finish().map_err(|e| stopped(e, epoch + 1))?;
                        return Err(e.into());
                    }
                    for c in s.completions() {
                        walk.finished(state_of(&firsts, c.batch_id))?;
                    }
                }
            }
            // The epoch's end: every batch is written before the checkpoint and evaluation.
            order.extend(s.finish().map_err(|e| stopped(e, epoch + 1))?.batch_ids());
            walk.drained()?;
            if let (StorageKind::Disk, Some(dir)) = (opts.storage, &opts.dir) {
                let done = epoch as u64 + 1;
                write_dense(dir, done, &engine::Model::dense(s.model()))?;
                storage.checkpoint(Cursor { epoch: done, state: 0 })?;
                let _ = std::fs::remove_file(dense_path(dir, epoch as u64));
            }
            let seconds = t.elapsed().as_secs_f64();
            train_time += t.elapsed();
            let io_wait = storage.io_stats().wait - wait0;
            let t = Instant::now();
            // After the last epoch, validation and test in one pass over the partitions.
            let last = epoch + 1 == cfg.epochs;
            let valid = match (evaluation.valid, last) {
                ([], false) => None,
                ([], true) => {
                    test = evaluation.metrics(cfg, &storage, s.model(), &[evaluation.test])?.pop();
                    None
                }
                (v, false) => evaluation.metrics(cfg, &storage, s.model(), &[v])?.pop(),
                (v, true) => {
                    let mut both =
                        evaluation.metrics(cfg, &storage, s.model(), &[v, evaluation.test])?;
                    test = both.pop();
                    both.pop()
                }
            };
            let eval_seconds = t.elapsed().as_secs_f64();
            observe(Event::Epoch {
                epoch: epoch + 1,
                batches: order.len(),
                seconds,
                io_wait,
                valid,
                eval_seconds,
                drains,
            });
            orders.push(order);
        }
        Ok::<_, PartitionedError>(orders)
    })?;
    let test = match test {
        Some(t) => t,
        // Nothing trained by this call (a finished run resumed).
        None => evaluation.metrics(cfg, &storage, &model, &[evaluation.test])?.remove(0),
    };
    let io = storage.io_stats();
    Ok(PartitionedRun { storage, model, plan, orders, start_epoch, io, train_time, test })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo::engine::{AsyncWrite, Model, replay_into};
    use ordo::storage::RowStorage;
    use std::collections::HashMap;

    fn config(epochs: usize) -> TrainConfig {
        TrainConfig {
            dim: 8,
            epochs,
            batch_size: 64,
            negatives: 4,
            chunk: 4,
            threads: 2,
            seed: 3,
            ..TrainConfig::default()
        }
    }

    fn opts(storage: StorageKind, dir: Option<&Path>) -> PartitionOpts {
        PartitionOpts { storage, dir: dir.map(Path::to_path_buf), partitions: 4, buffer: 2 }
    }

    /// The synchronous run of `orders` (epochs `0..`) on the in-memory twin with every
    /// partition resident (batches of neighbouring states interleave in a pipelined order, so
    /// the replay needs the partitions of both): each epoch's order replayed batch by batch.
    fn twin_replay(d: &Dataset, cfg: &TrainConfig, orders: &[Vec<u64>]) -> (Vec<f32>, Vec<f32>) {
        let o = PartitionOpts { buffer: 4, ..opts(StorageKind::Memory, None) };
        let (twin, _, _) = open_storage(d, cfg, &o).unwrap();
        (0..4).for_each(|p| twin.admit(p).unwrap());
        let plan = beta(4, 2).unwrap();
        let buckets = Buckets::new(d, twin.geometry());
        let sampling = cfg.sampling(d);
        let mut model = cfg.init_model(d).unwrap();
        for (epoch, order) in orders.iter().enumerate() {
            let mut batches = HashMap::new();
            for k in 0..plan.states.len() {
                let at = batches.len();
                batches.extend(
                    buckets.state_batches(d, &sampling, &plan, k, epoch, at).map(|b| (b.id, b)),
                );
            }
            assert_eq!(batches.len(), order.len());
            replay_into(&mut model, &twin, order, |id| batches.get(&id)).unwrap();
        }
        (twin.snapshot().unwrap(), model.dense())
    }

    #[test]
    fn oac_on_disk_equals_the_twins_sync_replay_and_async_differs() {
        let d = Dataset::load("umls").unwrap();
        let cfg = config(2);
        let dir = tempfile::tempdir().unwrap();
        let run = train(
            &d,
            &cfg,
            &opts(StorageKind::Disk, Some(dir.path())),
            engine::Mode::Oac,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(run.orders.len(), 2);
        let (table, dense) = twin_replay(&d, &cfg, &run.orders);
        let trained = run.storage.snapshot().unwrap();
        assert_ne!(trained, twin_replay(&d, &cfg, &[]).0, "training changed the table");
        assert_eq!(trained, table, "oac on disk == sync replay on the twin, bit for bit");
        assert_eq!(run.model.dense(), dense);
        assert!(run.io.bytes_read > 0 && run.io.bytes_written > 0);

        let run = train(
            &d,
            &cfg,
            &opts(StorageKind::Memory, None),
            engine::Mode::Async(AsyncWrite::AddDelta),
            &mut |_| {},
        )
        .unwrap();
        assert_ne!(
            run.storage.snapshot().unwrap(),
            twin_replay(&d, &cfg, &run.orders).0,
            "async lost no update?"
        );
    }

    /// The streamed evaluation of a trained table (some partitions in the buffer, written since
    /// their load, the others in files or the twin's memory) equals the in-memory evaluator's
    /// on a snapshot of the same table, full and sampled, validation and test, bit for bit; the
    /// last epoch's validation and test take one pass, streaming each partition outside the
    /// buffer once.
    #[test]
    fn streamed_evaluation_equals_the_in_memory_evaluator_on_the_same_table() {
        let d = Dataset::load("umls").unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (storage, sample) in [(StorageKind::Disk, 0), (StorageKind::Memory, 30)] {
            let cfg = TrainConfig { eval_sample: sample, ..config(1) };
            let dir = (storage == StorageKind::Disk).then_some(dir.path());
            let mut valid = Vec::new();
            let mut progress = Vec::new();
            let mut seen = |e: Event| match e {
                Event::Epoch { valid: v, batches, .. } => valid.push((v.unwrap(), batches)),
                Event::Progress { done, total, .. } => progress.push((done, total)),
            };
            let run = train(&d, &cfg, &opts(storage, dir), engine::Mode::Oac, &mut seen).unwrap();
            let resident = run.storage.resident();
            assert!(!resident.is_empty() && resident.len() < 4, "{resident:?}");
            let table = run.storage.snapshot().unwrap();
            let filter = Filter::of(&d);
            let rel = run.model.relations();
            let in_memory = |t: &[_]| crate::kge::metrics(&cfg, &table, rel, t, &filter);
            let epoch_batches = valid[0].1;
            assert_eq!(valid, [(in_memory(&d.valid), epoch_batches)], "{storage:?} valid");
            // Progress at each state after the first: rising, within the epoch's batches.
            assert!(!progress.is_empty());
            assert!(progress.windows(2).all(|w| w[0].0 < w[1].0), "{progress:?}");
            assert!(progress.iter().all(|&(done, total)| done < total && total == epoch_batches));
            assert_eq!(run.test, in_memory(&d.test), "{storage:?} test, sample {sample}");
            assert!(run.test.mrr > 0.0 && run.test.queries == 2 * d.test.len());
            // One pass for validation and test together: each partition outside the buffer is
            // streamed once; the queries' rows are read row by row.
            let g = run.storage.geometry();
            let outside: u64 =
                (0..4).filter(|p| !resident.contains(p)).map(|p| g.file_len(p)).sum();
            assert_eq!(run.io.bytes_streamed, outside, "{storage:?}: each streamed once");
            assert!(run.io.bytes_gathered > 0 && run.io.bytes_gathered < outside);
        }
    }

    /// `--save` of a partitioned run streams the embeddings partition by partition: the saved
    /// files load back (checked against their manifest) equal to the trained table's columns.
    #[test]
    fn a_save_streamed_from_the_storage_loads_back_as_the_trained_table() {
        let d = Dataset::load("umls").unwrap();
        let cfg = config(1);
        let dir = tempfile::tempdir().unwrap();
        let run = train(&d, &cfg, &opts(StorageKind::Memory, None), engine::Mode::Oac, &mut |_| {})
            .unwrap();
        let entities = StoredEntities { storage: &run.storage, dim: cfg.dim };
        let relations = (run.model.relations(), cfg.step_config().relation_dim());
        crate::kge::io::npy::save_parts(dir.path(), &d, &cfg, &entities, relations).unwrap();
        let saved = crate::kge::io::npy::load(dir.path(), &d).unwrap();
        let table = run.storage.snapshot().unwrap();
        let columns: Vec<f32> =
            table.chunks(cfg.row_width()).flat_map(|r| r[..cfg.dim].to_vec()).collect();
        assert_eq!(saved.entities.view().as_slice().unwrap(), &columns[..]);
        assert_eq!(saved.relations.as_slice().unwrap(), run.model.relations());
        let wrong = StoredEntities { storage: &run.storage, dim: cfg.dim + 2 };
        let err =
            crate::kge::io::npy::save_parts(dir.path(), &d, &cfg, &wrong, relations).unwrap_err();
        assert!(matches!(err, crate::kge::io::npy::NpyError::Shape(_)), "{err}");
    }

    #[test]
    fn a_resumed_disk_run_equals_the_sync_replay_of_both_parts() {
        let d = Dataset::load("umls").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let o = opts(StorageKind::Disk, Some(dir.path()));
        let first = train(&d, &config(1), &o, engine::Mode::Oac, &mut |_| {}).unwrap();
        drop(first.storage);
        let second = train(&d, &config(2), &o, engine::Mode::Oac, &mut |_| {}).unwrap();
        assert_eq!(second.start_epoch, 1);
        let orders = [first.orders[0].clone(), second.orders[0].clone()];
        let (table, dense) = twin_replay(&d, &config(2), &orders);
        assert_eq!(second.storage.snapshot().unwrap(), table);
        assert_eq!(second.model.dense(), dense);
    }

    #[test]
    fn bad_storage_options_are_typed_errors_before_anything_is_written() {
        let d = Dataset::load("umls").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let mut o = opts(StorageKind::Disk, Some(&dir));
        o.buffer = 5;
        let err = train(&d, &config(1), &o, engine::Mode::Oac, &mut |_| {}).err().unwrap();
        assert!(matches!(err, PartitionedError::Partition(PartitionError::Plan(_))), "{err}");
        assert!(!dir.exists(), "nothing written");
        let err =
            train(&d, &config(1), &opts(StorageKind::Disk, None), engine::Mode::Oac, &mut |_| {})
                .err()
                .unwrap();
        assert!(matches!(err, PartitionedError::NoDir), "{err}");

        let o = opts(StorageKind::Disk, Some(&dir));
        drop(open_storage(&d, &config(1), &o).unwrap());
        let other = TrainConfig { seed: 4, ..config(1) };
        let err = train(&d, &other, &o, engine::Mode::Oac, &mut |_| {}).err().unwrap();
        assert!(
            matches!(err, PartitionedError::Partition(PartitionError::ForeignRun { .. })),
            "{err}"
        );
        // A folder never checkpointed that lost an initial file starts over (the seed writes
        // it again); a checkpointed one that lost its file is refused.
        std::fs::remove_file(dir.join("p1.g0")).unwrap();
        let fresh = train(&d, &config(1), &o, engine::Mode::Oac, &mut |_| {}).unwrap();
        assert_eq!(fresh.start_epoch, 0);
        drop(fresh);
        let m: ordo::partition::Manifest =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        std::fs::remove_file(dir.join(format!("p1.g{}", m.files[1].generation))).unwrap();
        let err = train(&d, &config(2), &o, engine::Mode::Oac, &mut |_| {}).err().unwrap();
        assert!(
            matches!(err, PartitionedError::Partition(PartitionError::MissingPartition { .. })),
            "{err}"
        );
    }

    /// A fresh disk run keeps no initial file once it is written back (one copy of the table
    /// on disk in a first epoch); killed before its first checkpoint, with an initial file
    /// gone, the run starts over and ends equal to an uninterrupted one, bit for bit.
    #[test]
    fn a_run_killed_before_its_first_checkpoint_starts_over_equal() {
        let d = Dataset::load("umls").unwrap();
        let cfg = config(1);
        let (dir, full) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let o = opts(StorageKind::Disk, Some(dir.path()));
        let (s, _, _) = open_storage(&d, &cfg, &o).unwrap();
        s.admit(0).unwrap();
        assert!(s.write_if_newer(0, 0, &vec![0.5; cfg.row_width()]).unwrap());
        s.evict(0).unwrap();
        s.admit(0).unwrap(); // after the write-back
        assert!(!dir.path().join("p0.g0").exists(), "the initial file was kept");
        assert!(dir.path().join("p0.g1").exists());
        drop(s); // killed: no checkpoint
        let again = train(&d, &cfg, &o, engine::Mode::Sync, &mut |_| {}).unwrap();
        let whole = opts(StorageKind::Disk, Some(full.path()));
        let uninterrupted = train(&d, &cfg, &whole, engine::Mode::Sync, &mut |_| {}).unwrap();
        assert_eq!(again.start_epoch, 0);
        assert_eq!(again.storage.snapshot().unwrap(), uninterrupted.storage.snapshot().unwrap());
        assert_eq!(again.model.dense(), uninterrupted.model.dense());
    }
}
