//! The per-epoch bookkeeping of a run, shared by the engine's session
//! ([`super::train`](mod@super::train)) and the replay ([`super::replay`](mod@super::replay)):
//! each epoch's evaluation, record and checkpoint, and the [`RunResult`] at the end.

use super::device_step::Stepper;
use super::error::TrainError;
use crate::kge::data::dataset::{Dataset, Triple};
use crate::kge::eval::ranking::Filter;
use crate::kge::io::checkpoint::{Checkpoint, EntityRows, Identity};
use crate::kge::run::config::TrainConfig;
use crate::kge::run::event::Event;
use crate::kge::run::measure::metrics_of_embeddings;
use crate::kge::run::mode::TrainMode;
use crate::kge::run::results::{EpochStats, RunResult, store_embeddings};
use ordo::row_store::RowStore;
use std::path::Path;

/// Where a resumed run stands: the epoch records, the computation orders and the rows replaced
/// so far, and the epochs done (read from its checkpoint).
pub(super) struct Resumed {
    pub(super) epochs: Vec<EpochStats>,
    pub(super) orders: Vec<Vec<u64>>,
    pub(super) done: usize,
    pub(super) rows_replaced: u64,
}

/// The checkpoints a run writes: into `dir` every `every` epochs (0 = only after the last).
#[derive(Clone, Copy)]
pub(super) struct Checkpoints<'a> {
    pub(super) dir: Option<&'a Path>,
    pub(super) every: usize,
}

/// The per-epoch bookkeeping of a run.
pub(super) struct Epochs<'a> {
    d: &'a Dataset,
    cfg: &'a TrainConfig,
    /// The known answers of the evaluated queries only ([`Filter::for_queries`]).
    filter: Filter,
    valid: &'a [Triple],
    test: &'a [Triple],
    checkpoints: Checkpoints<'a>,
    /// The first epoch to train (0 unless resumed).
    start: usize,
    epochs: Vec<EpochStats>,
    orders: Vec<Vec<u64>>,
    rows_replaced: u64,
    wall: f64,
}

/// One epoch as it was trained: its 0-based index, training seconds, computation order and
/// the rows OAC's validation replaced in it.
pub(super) struct Trained {
    pub(super) epoch: usize,
    pub(super) seconds: f64,
    pub(super) order: Vec<u64>,
    pub(super) rows_replaced: u64,
}

/// The entity rows an epoch ended with: the engine's store, or the replay's plain table (rows
/// `width` floats wide).
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Store(&'a RowStore),
    Table(&'a [f32], usize),
}

/// The first `dim` columns of every `w`-wide row of `rows`.
fn embedding_columns(rows: &[f32], w: usize, dim: usize) -> Vec<f32> {
    rows.chunks(w.max(1)).flat_map(|r| r[..dim].iter().copied()).collect()
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

impl<'a> Epochs<'a> {
    /// The bookkeeping of a run of `cfg` on `d`, fresh or continuing from `resumed`: valid and
    /// test are cut to `cfg.eval_limit`, and the filter holds the answers of those queries only.
    pub(super) fn new(
        d: &'a Dataset,
        cfg: &'a TrainConfig,
        checkpoints: Checkpoints<'a>,
        resumed: Option<Resumed>,
    ) -> Self {
        let limit = |v: &'_ [Triple]| {
            v.len().min(if cfg.eval_limit == 0 { usize::MAX } else { cfg.eval_limit })
        };
        let (valid, test) = (&d.valid[..limit(&d.valid)], &d.test[..limit(&d.test)]);
        let evaluated: Vec<Triple> = valid.iter().chain(test).copied().collect();
        let resumed = resumed.unwrap_or_else(|| Resumed {
            epochs: Vec::with_capacity(cfg.epochs),
            orders: Vec::with_capacity(cfg.epochs),
            done: 0,
            rows_replaced: 0,
        });
        Epochs {
            d,
            cfg,
            filter: Filter::for_queries(d, &evaluated),
            valid,
            test,
            checkpoints,
            start: resumed.done,
            wall: resumed.epochs.last().map_or(0.0, |e| e.wall_s),
            epochs: resumed.epochs,
            orders: resumed.orders,
            rows_replaced: resumed.rows_replaced,
        }
    }

    /// The first epoch to train: the epochs done when the run started (0 unless resumed).
    pub(super) fn start(&self) -> usize {
        self.start
    }

    /// Record an epoch that ended with `rows`: evaluate it, tell `observe`, and write a
    /// checkpoint when one is due.
    pub(super) fn end(
        &mut self,
        trained: Trained,
        model: &Stepper,
        rows: Rows<'_>,
        observe: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), TrainError> {
        let Trained { epoch, seconds: epoch_s, order, rows_replaced: replaced } = trained;
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
        let Checkpoints { dir, every } = self.checkpoints;
        if let Some(dir) = dir
            && (done == cfg.epochs || (every > 0 && done.is_multiple_of(every)))
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

    /// The run's result: the final `store` and `model`, evaluated on the test triples.
    pub(super) fn finish(
        self,
        mode: TrainMode,
        model: &Stepper,
        store: RowStore,
    ) -> Result<RunResult, TrainError> {
        let cfg = self.cfg;
        let relations = model.relations()?;
        let ents = store_embeddings(&store, cfg.dim);
        let test = metrics_of_embeddings(cfg, &ents, &relations, self.test, &self.filter);
        drop(ents);
        Ok(RunResult {
            mode,
            epochs: self.epochs,
            test,
            order: self.orders,
            entities: store,
            row_width: cfg.row_width(),
            relations,
            relation_dim: cfg.step_config().relation_dim(),
            dense: model.dense()?,
            rows_replaced: self.rows_replaced,
        })
    }
}
