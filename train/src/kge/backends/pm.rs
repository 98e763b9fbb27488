//! KGE training on AdaPM (paper 002): `ordo-train kge --pm MODE --pm-nodes N`, or under
//! `mpirun -n N` with feature `mpi` (`train_pm_mpi`, each rank one node).
//!
//! The parameters live in an in-process [`Cluster`] of `N` nodes (threads as nodes, see
//! `ordo_pm::cluster`), or in the `N` ranks of an MPI job (`ordo_pm::mpi`): one key per entity row (`[embedding | optimizer state]`, as in the
//! engine's store) and, after them, one key per relation row (`[parameters | optimizer state]`,
//! zero-padded to the table's width). Each node has one training thread that works on its share
//! of the batches (global batch `i` goes to node `i mod N`, epoch after epoch) and, per batch:
//! signals intent for the keys of the batch `--intent-offset K` clocks ahead, pulls the batch's
//! keys, runs the same [`EmbeddingModel`] step the engine runs, pushes the step's change of every
//! pulled row as an **additive update** (the PM's semantics, paper 002 §3: new − old, so
//! concurrent updates from other nodes add up instead of being overwritten), and advances its
//! clock.
//!
//! This is AdaPM's own asynchronous regime and does **not** go through the OAC engine: no
//! computation order is recorded and the result is not equal to a synchronous run (pulls may
//! see replicas that miss other nodes' latest pushes until the next sync round). What the run
//! reports is the PM's traffic ([`PmStats`]) and the model's filtered test metrics, read after
//! the cluster is quiescent (when every node agrees on every key, see `ordo_pm::node`).
//!
//! Negatives ([`PmNegatives`]): by default each node draws its batch's negatives with
//! `NodeHandle::sample_local` among the entity keys it holds at that moment (paper 002's local
//! sampling), which also signals intent for the drawn keys until the end of the clock, so they
//! stay local until the step's push (without it the owner relocated ~2,000–4,000 of them per
//! node and epoch away mid-step on WordNet); the planned intents cover the positives' entity
//! rows and the relation rows. With `global` they are drawn as in the
//! engine's runs ([`crate::kge::data::batch`], uniform over all entities by default), so every
//! batch needs keys from the whole table, as in the paper's baselines without local sampling.

use crate::kge::data::batch::{NegSampling, Sampling, TripleBatch};
use crate::kge::data::dataset::Dataset;
use crate::kge::data::dataset::Triple;
use crate::kge::eval::ranking::{Filter, Metrics};
use crate::kge::model::device::Device;
use crate::kge::model::step::EmbeddingModel;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::measure::metrics;
use crate::kge::training::error::TrainError;
use indicatif::ProgressBar;
use ordo::engine::{Batch, BatchRows, Model, StepError};
use ordo_pm::cluster::{Cluster, NodeHandle};
use ordo_pm::rng;
use ordo_pm::{Key, PmError, PmMode, PmStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long the cluster may take to become quiescent after training.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a node's first batch waits for its keys to arrive (see [`run_node`]).
const WARM_UP: Duration = Duration::from_secs(2);

/// The parameter-manager side of a run.
///
/// ```
/// use ordo_pm::PmMode;
/// use ordo_train::kge::backends::pm::PmConfig;
/// use ordo_train::kge::backends::pm::PmNegatives;
/// let pm = PmConfig {
///     mode: PmMode::AdaPm,
///     nodes: 2,
///     intent_offset: 2,
///     negatives: PmNegatives::Local,
/// };
/// assert_eq!(pm.mode.name(), "adapm");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmConfig {
    /// Which strategy the nodes run (AdaPM or a baseline).
    pub mode: PmMode,
    /// Nodes (each with one training thread).
    pub nodes: usize,
    /// Clocks (batches) between a node's intent signal for a batch and its access.
    pub intent_offset: u64,
    /// Where each node draws its negatives from.
    pub negatives: PmNegatives,
}

/// Where a `--pm` node draws its batch's negatives from (`--pm-negatives`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PmNegatives {
    /// Uniformly among the entity keys the node holds locally (owned or replicated) when it
    /// steps the batch (paper 002 §3, local sampling): no remote access, no intent.
    #[default]
    Local,
    /// As the engine's runs draw them (`--neg-sampling`, uniform over all entities by
    /// default), announced by intent with the batch's other keys.
    Global,
}

impl PmNegatives {
    /// The flag's value.
    ///
    /// ```
    /// assert_eq!(ordo_train::kge::backends::pm::PmNegatives::Local.name(), "local");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            PmNegatives::Local => "local",
            PmNegatives::Global => "global",
        }
    }
}

/// Why a PM run failed.
#[derive(Debug, Error)]
pub enum PmTrainError {
    /// `--pm-nodes 0`.
    #[error("--pm-nodes must be at least 1")]
    NoNodes,
    /// `--pm` trains on the CPU only.
    #[error("--pm trains on the CPU only (give --device cpu)")]
    Device,
    /// A hyper-parameter is bad, or a step's loss became NaN or infinite
    /// ([`TrainError::Diverged`], naming the batch, its epoch and `--lr`).
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The parameter manager failed (an owner did not answer, the cluster did not quiesce).
    #[error("parameter manager: {0}")]
    Pm(#[from] PmError),
    /// A node's training thread panicked.
    #[error("the training thread of node {0} panicked")]
    NodePanicked(usize),
    /// The MPI job's size differs from the one its launcher announced.
    #[error("mpirun announced {launcher} ranks but MPI has {mpi}")]
    MpiSize {
        /// Ranks in the launcher's environment ([`mpi_launch`]).
        launcher: usize,
        /// Ranks in MPI's world communicator.
        mpi: usize,
    },
}

impl PmTrainError {
    /// Whether the error is the caller's bad input (exit status 2), not a failure while running.
    pub fn is_bad_input(&self) -> bool {
        match self {
            PmTrainError::NoNodes | PmTrainError::Device => true,
            PmTrainError::Train(t) => matches!(t, TrainError::Dim(_) | TrainError::Config(_)),
            _ => false,
        }
    }
}

/// The outcome of a PM run.
#[derive(Debug, Clone)]
pub struct PmRun {
    /// Nodes that trained.
    pub nodes: usize,
    /// The PM's counters summed over nodes, taken at quiescence after training (the final
    /// reads for evaluation are not counted).
    pub stats: PmStats,
    /// Mean loss per positive over the whole run.
    pub loss: f64,
    /// Positive triples stepped over all nodes (training triples × epochs).
    pub triples: u64,
    /// Training wall time, seconds: from the first batch until the cluster is quiescent
    /// (cluster start-up, the final read of every key and evaluation excluded).
    pub wall_s: f64,
    /// Filtered test metrics of the final parameters.
    pub test: Metrics,
}

impl PmRun {
    /// Training triples per second over the whole run.
    pub fn triples_per_s(&self) -> f64 {
        self.triples as f64 / self.wall_s.max(1e-9)
    }

    /// The one summary line of the run's PM traffic.
    ///
    /// ```
    /// use ordo_pm::PmStats;
    /// use ordo_train::kge::{backends::pm::PmRun, eval::ranking::Metrics};
    /// let stats = PmStats { local_pulls: 3, remote_pulls: 1, bytes_sent: 40, ..PmStats::default() };
    /// let test = Metrics::from_ranks(&[1.0]);
    /// let run = PmRun { nodes: 2, stats, loss: 0.0, triples: 10, wall_s: 2.0, test };
    /// assert_eq!(run.triples_per_s(), 5.0);
    /// assert_eq!(
    ///     run.stats_line(),
    ///     "pm: nodes=2 remote_share=0.250000 bytes_sent=40 relocations=0 replications=0"
    /// );
    /// ```
    pub fn stats_line(&self) -> String {
        let s = &self.stats;
        format!(
            "pm: nodes={} remote_share={:.6} bytes_sent={} relocations={} replications={}",
            self.nodes,
            s.remote_share(),
            s.bytes_sent,
            s.relocations,
            s.replications
        )
    }
}

/// Where entity and relation rows sit in the PM's table of `width`-float keys.
#[derive(Debug, Clone, Copy)]
struct Layout {
    entities: usize,
    /// Relation rows the model holds (twice the dataset's with inverses).
    relation_rows: usize,
    /// Floats per entity row (embedding and optimizer state).
    entity_width: usize,
    /// Relation parameters per row, and their optimizer state.
    rdim: usize,
    rstate: usize,
    /// Floats per key: the wider of an entity row and a relation row.
    width: usize,
}

impl Layout {
    fn of(cfg: &TrainConfig, d: &Dataset) -> Self {
        let sc = cfg.step_config();
        let rdim = sc.relation_dim();
        let rstate = cfg.optimizer.for_relations().state_width(rdim);
        let entity_width = sc.row_width();
        Layout {
            entities: d.entities.len(),
            relation_rows: sc.relation_rows(d.relations.len()),
            entity_width,
            rdim,
            rstate,
            width: entity_width.max(rdim + rstate),
        }
    }

    fn keys(&self) -> u64 {
        (self.entities + self.relation_rows) as u64
    }

    fn relation_key(&self, r: usize) -> Key {
        (self.entities + r) as Key
    }

    /// A batch's keys as the PM sees them: its entity `rows` in order, then its `relations`'
    /// keys (the order [`run_node`] reads pulled values in).
    fn batch_keys(&self, rows: &[u64], relations: &[usize]) -> Vec<Key> {
        rows.iter().copied().chain(relations.iter().map(|&r| self.relation_key(r))).collect()
    }

    /// The initial value of key `k`: entity rows from `rows`, relation rows from the model's
    /// dense state (`relation_rows × rdim` parameters, then their optimizer state).
    fn initial(&self, k: Key, rows: &[f32], dense: &[f32]) -> Vec<f32> {
        let mut v = vec![0.0; self.width];
        let k = k as usize;
        if k < self.entities {
            let ew = self.entity_width;
            v[..ew].copy_from_slice(&rows[k * ew..(k + 1) * ew]);
        } else {
            self.relation_to_key(k - self.entities, dense, &mut v);
        }
        v
    }

    /// Copy relation row `r` of `dense` into a key's value.
    fn relation_to_key(&self, r: usize, dense: &[f32], key: &mut [f32]) {
        let (rd, rs, params) = (self.rdim, self.rstate, self.relation_rows * self.rdim);
        key[..rd].copy_from_slice(&dense[r * rd..(r + 1) * rd]);
        key[rd..rd + rs].copy_from_slice(&dense[params + r * rs..params + (r + 1) * rs]);
    }

    /// Copy a key's value into relation row `r` of `dense`.
    fn key_to_relation(&self, r: usize, key: &[f32], dense: &mut [f32]) {
        let (rd, rs, params) = (self.rdim, self.rstate, self.relation_rows * self.rdim);
        dense[r * rd..(r + 1) * rd].copy_from_slice(&key[..rd]);
        dense[params + r * rs..params + (r + 1) * rs].copy_from_slice(&key[rd..rd + rs]);
    }
}

/// The relation rows a batch's step reads and updates: its positives' relations (and their
/// inverses with `reciprocal`), sorted, without repeats.
fn batch_relations(b: &TripleBatch, relations: usize, reciprocal: bool) -> Vec<usize> {
    let mut rs: Vec<usize> = b
        .pos
        .iter()
        .flat_map(|p| {
            let r = p.1 as usize;
            [Some(r), reciprocal.then_some(r + relations)]
        })
        .flatten()
        .collect();
    rs.sort_unstable();
    rs.dedup();
    rs
}

/// One batch as the PM sees it: its keys (entity rows first, in the batch's row order, then its
/// relation rows) and the relation rows themselves. With local negatives the batch holds the
/// positives only, and the node adds the negatives when it steps it.
struct PmBatch<'a> {
    batch: &'a Batch<TripleBatch>,
    relations: Vec<usize>,
    keys: Vec<Key>,
    /// The epoch it belongs to, from 1 (named by the error of a step that diverged).
    epoch: usize,
}

/// What every node of a run starts from: the model (for its step and dense state), the table's
/// layout and initial values, and every node's plan (global batch `i` goes to node `i mod N`).
struct Prepared<'a> {
    model: EmbeddingModel,
    layout: Layout,
    init_rows: Vec<f32>,
    init_dense: Vec<f32>,
    /// The run's sampling, for nodes that draw negatives locally (`None` with global ones).
    local: Option<Sampling>,
    batches: &'a [Batch<TripleBatch>],
}

/// Refuse, before anything starts, a negative sampling the PM would not do: the laid-out rows
/// of [`NegSampling::Distinct`] (the parameter manager keys a batch by its sorted rows), and
/// any sampling but uniform, or in-batch negatives besides, with local negatives, which a node
/// draws among its own keys.
fn refuse_sampling(cfg: &TrainConfig, pm: PmConfig) -> Result<(), TrainError> {
    if cfg.batch_negatives > 0 && pm.negatives == PmNegatives::Local {
        return Err(TrainError::Config(
            "--batch-negatives needs --pm-negatives global (local negatives are drawn among the \
             node's keys)",
        ));
    }
    match (cfg.neg_sampling, pm.negatives) {
        (NegSampling::Distinct, _) => {
            Err(TrainError::Config("--neg-sampling distinct does not go with --pm"))
        }
        (NegSampling::Batch, PmNegatives::Local) => Err(TrainError::Config(
            "--neg-sampling batch needs --pm-negatives global (local negatives are drawn among \
             the node's keys)",
        )),
        (NegSampling::Uniform, _) | (NegSampling::Batch, PmNegatives::Global) => Ok(()),
    }
}

/// The batches of every epoch as the nodes step them (without negatives when they are drawn
/// locally at the step).
fn planned_batches(d: &Dataset, cfg: &TrainConfig, pm: PmConfig) -> Vec<Batch<TripleBatch>> {
    let sampling = cfg.sampling(d);
    // With local negatives the planned batches carry none: the node draws them at its step.
    let planned = match pm.negatives {
        PmNegatives::Global => sampling,
        PmNegatives::Local => Sampling { negatives: 0, ..sampling },
    };
    (0..cfg.epochs).flat_map(|e| planned.epoch_batches(&d.train, e)).collect()
}

impl<'a> Prepared<'a> {
    fn new(
        d: &Dataset,
        cfg: &TrainConfig,
        pm: PmConfig,
        batches: &'a [Batch<TripleBatch>],
    ) -> Result<Self, PmTrainError> {
        if pm.nodes == 0 {
            return Err(PmTrainError::NoNodes);
        }
        if cfg.device != Device::Cpu {
            return Err(PmTrainError::Device);
        }
        let (model, store) = cfg.init(d)?;
        let layout = Layout::of(cfg, d);
        let (init_rows, init_dense) = (store.snapshot(), model.dense());
        let local = (pm.negatives == PmNegatives::Local).then_some(cfg.sampling(d));
        Ok(Prepared { model, layout, init_rows, init_dense, local, batches })
    }

    /// Node `n`'s batches of a run on `nodes` nodes, with their keys.
    fn plan(&self, d: &Dataset, cfg: &TrainConfig, n: usize, nodes: usize) -> Vec<PmBatch<'a>> {
        let relations = d.relations.len();
        let layout = self.layout;
        let per_epoch = cfg.sampling(d).batches_per_epoch(d.train.len()).max(1) as u64;
        self.batches
            .iter()
            .skip(n)
            .step_by(nodes)
            .map(|b| {
                let rels = batch_relations(&b.data, relations, cfg.reciprocal);
                let epoch = (b.id / per_epoch) as usize + 1;
                PmBatch {
                    batch: b,
                    keys: layout.batch_keys(&b.rows, &rels),
                    relations: rels,
                    epoch,
                }
            })
            .collect()
    }

    /// Run a node's `plan` on handle `h` (see [`run_node`]); `stop` is the run's
    /// [`Diverged`] flag, raised by the first node whose step diverges.
    fn train_node(
        &self,
        h: &NodeHandle,
        plan: &[PmBatch<'_>],
        (offset, stop): (u64, &Diverged),
        progress: &ProgressBar,
    ) -> Result<(f64, u64), PmTrainError> {
        let (model, dense) = (self.model.clone(), self.init_dense.clone());
        run_node(h, model, dense, plan, self.layout, offset, self.local, stop, progress)
    }

    /// Filtered test metrics of the final table (`keys × width`, row-major).
    fn evaluate(&self, d: &Dataset, cfg: &TrainConfig, table: &[f32]) -> Metrics {
        let layout = self.layout;
        let (ew, w) = (layout.entity_width, layout.width);
        let rows: Vec<f32> =
            table.chunks(w).take(layout.entities).flat_map(|k| k[..ew].iter().copied()).collect();
        let mut dense = self.init_dense.clone();
        for (r, key) in table.chunks(w).skip(layout.entities).enumerate() {
            layout.key_to_relation(r, key, &mut dense);
        }
        let rel = &dense[..layout.relation_rows * layout.rdim];
        let limit =
            if cfg.eval_limit == 0 { d.test.len() } else { cfg.eval_limit.min(d.test.len()) };
        let queries = &d.test[..limit];
        metrics(cfg, &rows, rel, queries, &Filter::for_queries(d, queries))
    }
}

/// Train on `d` with the parameters in an in-process AdaPM cluster of `pm.nodes` nodes (threads
/// as nodes), then evaluate on the test split. `progress` advances by one per batch.
pub fn train_pm(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    progress: &ProgressBar,
) -> Result<PmRun, PmTrainError> {
    refuse_sampling(cfg, pm)?;
    let batches = planned_batches(d, cfg, pm);
    let p = Prepared::new(d, cfg, pm, &batches)?;
    let layout = p.layout;
    let cluster = Cluster::in_process(pm.nodes, layout.keys(), layout.width, pm.mode, |k| {
        layout.initial(k, &p.init_rows, &p.init_dense)
    })?;
    progress.set_length(batches.len() as u64);
    let plans: Vec<Vec<PmBatch<'_>>> = (0..pm.nodes).map(|n| p.plan(d, cfg, n, pm.nodes)).collect();
    let start = Instant::now();
    let stop = Diverged::default();
    let outcomes: Vec<Result<(f64, u64), PmTrainError>> = std::thread::scope(|s| {
        let workers: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(n, plan)| {
                let (h, p, stop) = (cluster.handle(n), &p, &stop);
                s.spawn(move || p.train_node(&h?, plan, (pm.intent_offset, stop), progress))
            })
            .collect();
        workers
            .into_iter()
            .enumerate()
            .map(|(n, w)| w.join().unwrap_or(Err(PmTrainError::NodePanicked(n))))
            .collect()
    });
    let (mut loss_sum, mut positives) = (0.0, 0);
    for o in outcomes {
        let (l, p) = o?;
        loss_sum += l;
        positives += p;
    }
    cluster.quiesce(QUIESCE_TIMEOUT)?;
    let wall_s = start.elapsed().as_secs_f64();
    let stats = cluster.stats();
    // Read every key (any node gives the same value at quiescence).
    let all: Vec<Key> = (0..layout.keys()).collect();
    let mut table = vec![0.0; all.len() * layout.width];
    cluster.handle(0)?.pull(&all, &mut table)?;
    let test = p.evaluate(d, cfg, &table);
    let loss = loss_sum / positives.max(1) as f64;
    Ok(PmRun { nodes: pm.nodes, stats, loss, triples: positives, wall_s, test })
}

/// The rank and size of the MPI job this process was started in by `mpirun` (Open MPI's
/// `OMPI_COMM_WORLD_*` or the PMI variables of MPICH's launcher), read from the environment
/// before MPI is initialized; `None` outside `mpirun`.
///
/// ```
/// // Under `cargo test` no launcher set these.
/// assert_eq!(ordo_train::kge::backends::pm::mpi_launch(), None);
/// ```
pub fn mpi_launch() -> Option<(usize, usize)> {
    let var = |name: &str| std::env::var(name).ok()?.parse::<usize>().ok();
    let ompi = var("OMPI_COMM_WORLD_RANK").zip(var("OMPI_COMM_WORLD_SIZE"));
    ompi.or_else(|| var("PMI_RANK").zip(var("PMI_SIZE")))
}

/// Train on `d` as one node of an MPI job (this process's rank; `mpirun -n N`, every rank
/// running this with the same arguments), over `ordo_pm::mpi`: the process's communication
/// thread is the only one calling MPI, this thread trains. Every rank builds the same initial
/// table and batch order from the seed and steps its share (global batch `i` on rank `i mod
/// N`). After quiescence every rank holds the final table; rank 0 evaluates it and gets
/// `Some(run)`, with the counters summed over ranks; the other ranks get `None`. `pm.nodes`
/// must be the job's size (from [`mpi_launch`]).
#[cfg(feature = "mpi")]
pub fn train_pm_mpi(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    progress: &ProgressBar,
) -> Result<Option<PmRun>, PmTrainError> {
    refuse_sampling(cfg, pm)?;
    let batches = planned_batches(d, cfg, pm);
    let p = Prepared::new(d, cfg, pm, &batches)?;
    let layout = p.layout;
    let (init_rows, init_dense) = (p.init_rows.clone(), p.init_dense.clone());
    let init = move |k| layout.initial(k, &init_rows, &init_dense);
    let out = ordo_pm::mpi::run_node(layout.keys(), layout.width, pm.mode, init, |h, n, nodes| {
        if nodes != pm.nodes {
            return Err(PmTrainError::MpiSize { launcher: pm.nodes, mpi: nodes });
        }
        let plan = p.plan(d, cfg, n, nodes);
        if n == 0 {
            // Rank 0 shows its own batches: the others step as many, give or take one.
            progress.set_length(plan.len() as u64);
        }
        let start = Instant::now();
        // Each rank stops at its own diverged step (the flag is this process's).
        let done = p.train_node(h, &plan, (pm.intent_offset, &Diverged::default()), progress)?;
        Ok((done, start))
    })?;
    let ((loss_sum, positives), start) = out.result?;
    let wall_s = start.elapsed().as_secs_f64();
    if let Some(bad) = out.owners.iter().position(|&o| o != 1) {
        return Err(PmError::Transport(format!(
            "key {bad} has {} owners at quiescence",
            out.owners[bad]
        ))
        .into());
    }
    if out.rank != 0 {
        return Ok(None);
    }
    let test = p.evaluate(d, cfg, &out.table);
    // Each rank's positives: rank 0 knows its own; the whole run stepped every planned batch.
    let triples = batches.iter().map(|b| b.data.pos.len() as u64).sum::<u64>();
    let loss = loss_sum / positives.max(1) as f64;
    Ok(Some(PmRun { nodes: out.nodes, stats: out.stats, loss, triples, wall_s, test }))
}

/// Raised by the first node whose step diverges (its loss NaN or infinite): the other nodes
/// stop at their next batch rather than train on to the end of their plans.
#[derive(Debug, Default)]
struct Diverged(AtomicBool);

impl Diverged {
    fn raise(&self) {
        // Relaxed: only the flag is read; the error itself goes back through the join.
        self.0.store(true, Ordering::Relaxed);
    }

    fn raised(&self) -> bool {
        // Relaxed: as in `raise`.
        self.0.load(Ordering::Relaxed)
    }
}

/// One node's training thread: for batch `t` of its plan (its clock), signal intent for batch
/// `t + offset`, pull, step, push the change, advance the clock. With `local` (the run's
/// sampling), first draw the batch's negatives among the node's local entity keys. Returns the
/// summed loss and the number of positives stepped.
///
/// A step whose loss is NaN or infinite ends the node with [`TrainError::Diverged`], naming the
/// batch, its epoch and `--lr`, before its change is pushed; it raises `stop`, and a node that
/// sees `stop` raised ends at once.
#[allow(clippy::too_many_arguments)]
fn run_node(
    h: &NodeHandle,
    mut model: EmbeddingModel,
    mut dense: Vec<f32>,
    plan: &[PmBatch<'_>],
    layout: Layout,
    offset: u64,
    local: Option<Sampling>,
    stop: &Diverged,
    progress: &ProgressBar,
) -> Result<(f64, u64), PmTrainError> {
    let (ew, w) = (layout.entity_width, layout.width);
    let signal = |t: usize| match plan.get(t) {
        Some(b) => h.intent(&b.keys, t as u64, t as u64 + 1),
        None => Ok(()),
    };
    // Batches 0..offset are signaled before the first clock: as if signaled `offset` ahead.
    for t in 0..(offset as usize).min(plan.len()) {
        signal(t)?;
    }
    // ... and the first batch waits (up to WARM_UP) for its keys rather than pulling them remotely.
    if let (Some(first), true) = (plan.first(), offset > 0) {
        h.wait_local(&first.keys, WARM_UP);
    }
    let (mut loss_sum, mut positives) = (0.0, 0u64);
    let mut values = Vec::new();
    for (t, planned) in plan.iter().enumerate() {
        if stop.raised() {
            break;
        }
        signal(t + offset as usize)?;
        let drawn = local.map(|s| with_local_negatives(h, &s, planned, layout)).transpose()?;
        let (batch, keys) = match &drawn {
            Some((batch, keys)) => (batch, keys.as_slice()),
            None => (planned.batch, planned.keys.as_slice()),
        };
        values.resize(keys.len() * w, 0.0);
        h.pull(keys, &mut values)?;
        let ne = batch.rows.len();
        let mut rows: Vec<f32> =
            values.chunks(w).take(ne).flat_map(|k| k[..ew].iter().copied()).collect();
        let before = rows.clone();
        for (&r, key) in planned.relations.iter().zip(values.chunks(w).skip(ne)) {
            layout.key_to_relation(r, key, &mut dense);
        }
        model.set_dense(&dense);
        let mut batch_rows = BatchRows::new(&batch.rows, ew, &mut rows)
            .expect("the batch's rows are sorted and the buffer is rows × width");
        model.step(&batch.data, &mut batch_rows).map_err(|e| {
            stop.raise();
            TrainError::Diverged { epoch: planned.epoch, source: StepError::new(e) }
        })?;
        positives += batch.data.pos.len() as u64;
        loss_sum += model.take_loss() * batch.data.pos.len() as f64;
        // The additive update: each pulled row's change by this step.
        let mut updates = vec![0.0; values.len()];
        for ((u, new), old) in updates.chunks_mut(w).zip(rows.chunks(ew)).zip(before.chunks(ew)) {
            u[..ew].iter_mut().zip(new.iter().zip(old)).for_each(|(u, (n, o))| *u = n - o);
        }
        let after = model.dense();
        let mut new_key = vec![0.0; w];
        for ((&r, u), old) in planned
            .relations
            .iter()
            .zip(updates.chunks_mut(w).skip(ne))
            .zip(values.chunks(w).skip(ne))
        {
            layout.relation_to_key(r, &after, &mut new_key);
            u.iter_mut().zip(new_key.iter().zip(old)).for_each(|(u, (n, o))| *u = n - o);
        }
        dense = after;
        h.push(keys, &updates)?;
        h.advance_clock();
        progress.inc(1);
    }
    Ok((loss_sum, positives))
}

/// Batch `b` (planned without negatives) with `s.negatives` negatives per chunk and side drawn
/// by `sample_local` among the entity keys node `h` holds now, seeded by `(s.seed, batch id)`.
/// If the node holds no entity key, the negatives are drawn uniformly over all entities.
fn with_local_negatives(
    h: &NodeHandle,
    s: &Sampling,
    b: &PmBatch<'_>,
    layout: Layout,
) -> Result<(Batch<TripleBatch>, Vec<Key>), PmError> {
    let planned = b.batch;
    let global = |l: u32| planned.rows[l as usize] as u32;
    let positives: Vec<Triple> = planned
        .data
        .pos
        .iter()
        .map(|&(hd, r, tl)| Triple { h: global(hd), r, t: global(tl) })
        .collect();
    let per_side = positives.len().div_ceil(s.chunk.max(1)) * s.negatives;
    let mut rng = rng::seeded(s.seed ^ planned.id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let entities = layout.entities as Key;
    // Intent until the end of this clock: the drawn keys stay here until the push.
    let end = h.clock() + 1;
    let mut drawn = h.sample_local(2 * per_side, &mut rng, |k| k < entities, end)?;
    if drawn.is_empty() {
        drawn = (0..2 * per_side).map(|_| rng::below(&mut rng, entities)).collect();
    }
    let neg: Vec<u32> = drawn.into_iter().map(|k| k as u32).collect();
    let (neg_t, neg_h) = neg.split_at(per_side);
    let batch = s.assemble(planned.id, &positives, neg_t.to_vec(), neg_h.to_vec());
    let keys = layout.batch_keys(&batch.rows, &b.relations);
    Ok((batch, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_nodes_is_a_typed_error() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 1, ..TrainConfig::default() };
        let pm = PmConfig {
            mode: PmMode::AdaPm,
            nodes: 0,
            intent_offset: 1,
            negatives: PmNegatives::Local,
        };
        let e = train_pm(&d, &cfg, pm, &ProgressBar::hidden()).unwrap_err();
        assert!(matches!(e, PmTrainError::NoNodes) && e.is_bad_input(), "{e}");
    }

    /// A loss that becomes NaN or infinite stops every node, with an error naming the batch,
    /// the epoch and `--lr` (as the engine's trainers do).
    #[test]
    fn divergence_stops_the_run_naming_the_batch_epoch_and_lr() {
        let d = Dataset::load("nations").unwrap();
        let cfg =
            TrainConfig { dim: 8, epochs: 3, lr: 1e30, init_scale: 1e18, ..TrainConfig::default() };
        for negatives in [PmNegatives::Local, PmNegatives::Global] {
            let pm = PmConfig { mode: PmMode::AdaPm, nodes: 2, intent_offset: 1, negatives };
            let e = train_pm(&d, &cfg, pm, &ProgressBar::hidden()).unwrap_err();
            let PmTrainError::Train(TrainError::Diverged { epoch: 1, .. }) = &e else {
                panic!("{negatives:?}: not a divergence in epoch 1: {e}");
            };
            let m = e.to_string();
            assert!(m.starts_with("epoch 1: loss is ") && m.contains("in batch "), "{m}");
            assert!(m.contains("--lr") && !e.is_bad_input(), "{m}");
        }
    }

    #[test]
    fn relation_rows_round_trip_through_keys() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, reciprocal: true, ..TrainConfig::default() };
        let l = Layout::of(&cfg, &d);
        let dense: Vec<f32> =
            (0..l.relation_rows * (l.rdim + l.rstate)).map(|x| x as f32).collect();
        let mut back = vec![0.0; dense.len()];
        for r in 0..l.relation_rows {
            let key = l.initial(l.relation_key(r), &[], &dense);
            l.key_to_relation(r, &key, &mut back);
        }
        assert_eq!(back, dense);
    }
}
