//! One training run in one process for a caller that drives the training itself
//! ([`OneRun`]): checked, its outputs locked before and written after by the run layer; its
//! table in memory ([`Prepared`]) or in a partition buffer ([`PreparedParts`]).

use super::error::{BoxError, ConfigError};
use super::launch::{hold_outputs, resumable, write_out};
use super::options::Options;
use super::partitioned_run::{prepare_partitioned, save_partitioned};
use super::plan::{Job, Request};
use crate::kge::backends::partitioned::{self, PartitionOpts, PartitionedRun};
use crate::kge::data::dataset::Dataset;
use crate::kge::io::npy;
use crate::kge::model::gpu::check_device;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::mode::TrainMode;
use crate::kge::run::results::RunResult;
use crate::kge::training::error::TrainError;
use crate::kge::training::train::Resumable;
use crate::memory::Budget;
use crate::outdir::{Held, OutputLock};
use std::path::PathBuf;

/// One training run, for a caller that drives the training itself (the Python package's
/// `ordo.kge.train`): its [`Options`] checked as `ordo-train kge` checks them, and its output
/// directories (`--save`, `--checkpoint`, `--resume`, `--out`) locked, checked and written by
/// the same code as the command line's: [`OneRun::prepare`] before training,
/// [`Prepared::finish`] after. With `--storage` the table is in a partition buffer instead:
/// [`OneRun::prepare_parts`], [`PreparedParts::train`] and [`PreparedParts::finish`], the same
/// steps as the command line's `--storage` run.
#[derive(Debug)]
pub struct OneRun {
    /// `--dataset`: an embedded name or a directory.
    pub dataset: String,
    /// The training configuration.
    pub config: TrainConfig,
    /// `--mode`.
    pub mode: TrainMode,
    /// `--save`, if given.
    pub save: Option<PathBuf>,
    /// `--storage`, `--storage-dir`, `--partitions` and `--buffer`, if the table is in
    /// partitions (`--buffer` not yet fitted to `--memory-limit`: [`OneRun::prepare_parts`]).
    pub partitions: Option<PartitionOpts>,
    /// The options, for the output directories and the memory limit.
    pub(super) opts: Options,
}

impl OneRun {
    /// Merge and check `opts` as `ordo-train kge` does ([`Job::new`]), for one run in one
    /// process: a `--pm` or `--load` run is refused ([`ConfigError::Unsupported`]); a
    /// `--storage` run's options are checked as the command line checks them.
    pub fn new(opts: Options) -> Result<OneRun, BoxError> {
        let job = Job::new(opts, Request::Train, None)?;
        let o = &job.opts;
        if job.pm.is_some() || o.load.is_some() {
            return Err(ConfigError::Unsupported(
                "one run in one process: no subcommand, --pm or --load",
            )
            .into());
        }
        Ok(OneRun {
            dataset: o.dataset().to_string(),
            config: job.cfg,
            mode: o.mode(),
            save: o.save.clone(),
            partitions: o.partition_opts(false)?,
            opts: job.opts,
        })
    }

    /// What `ordo-train kge --storage` does between loading the dataset `d` and training, in
    /// its order: the storage folder's free disk and the buffer's memory checked against what
    /// the run will write and hold (`--buffer` picked from `--memory-limit` when not given),
    /// then `--save`'s directory locked. Refused ([`ConfigError::Unsupported`]) for a run
    /// without `--storage`.
    pub fn prepare_parts(&self, d: &Dataset) -> Result<PreparedParts, BoxError> {
        let popts = self.partitions.clone().ok_or(ConfigError::Unsupported(
            "prepare_parts is for a --storage run (its table in partitions)",
        ))?;
        let (opts, held) = prepare_partitioned(&self.opts, &self.config, d, popts)?;
        Ok(PreparedParts { opts, save: self.save.clone(), held })
    }

    /// What `ordo-train kge` does between loading the dataset `d` and training, in its order:
    /// the device checked, the run's memory estimated against the limit, the options checked by
    /// building the model, the output directories locked (a checkpoint to resume checked
    /// first, `--out` marked incomplete), and the checkpoint to resume read.
    /// Refused ([`ConfigError::Unsupported`]) for a `--storage` run: [`OneRun::prepare_parts`].
    pub fn prepare(&self, d: &Dataset) -> Result<Prepared, BoxError> {
        let (o, cfg) = (&self.opts, &self.config);
        if self.partitions.is_some() {
            return Err(ConfigError::Unsupported(
                "a --storage run's table is in partitions: prepare it with prepare_parts",
            )
            .into());
        }
        check_device(cfg.device).map_err(TrainError::Cuda)?;
        o.check_memory(cfg, d, None, &[self.mode], Budget::of_process(o.memory_limit), None)?;
        cfg.init_model(d)?;
        let same = |dir: &PathBuf, _: TrainMode| dir.clone();
        let (held, out) = hold_outputs(o, d, cfg, &[self.mode], &same)?;
        let resumable = resumable(o, d, cfg, self.mode, &same)?;
        Ok(Prepared { resumable, save: o.save.clone(), out, held })
    }
}

/// A [`OneRun`] ready to train: its output directories locked (until [`Prepared::finish`] or a
/// drop) and its checkpointing, the checkpoint to resume read.
#[derive(Debug)]
pub struct Prepared {
    /// `--checkpoint`, `--checkpoint-every` and the `--resume` checkpoint, for
    /// [`train_resumable`](crate::kge::train_resumable) (take it with `std::mem::take`).
    pub resumable: Resumable,
    save: Option<PathBuf>,
    out: Option<OutputLock>,
    held: Held,
}

impl Prepared {
    /// After training, what `ordo-train kge` writes: `--save` (staged, swapped in whole), then
    /// `--out` (CSV, plots, `COMPLETE` last); then the directories are unlocked.
    pub fn finish(self, d: &Dataset, cfg: &TrainConfig, r: &RunResult) -> Result<(), BoxError> {
        if let Some(dir) = &self.save {
            npy::save(dir, d, cfg, r)?;
        }
        if let Some(lock) = &self.out {
            write_out(lock, d, cfg, std::slice::from_ref(r))?;
        }
        drop(self.held);
        Ok(())
    }
}

/// A [`OneRun`] with `--storage`, ready to train: its disk and memory checked, `--buffer`
/// fitted, `--save`'s directory locked (until [`PreparedParts::finish`] or a drop).
#[derive(Debug)]
pub struct PreparedParts {
    /// The partition buffer the run trains with (`--buffer` fitted to `--memory-limit`).
    pub opts: PartitionOpts,
    save: Option<PathBuf>,
    held: Held,
}

impl PreparedParts {
    /// Train `d` as `ordo-train kge --storage` does ([`partitioned::train`]): a disk run
    /// checkpoints at every epoch's end and resumes from its folder's checkpoint.
    pub fn train(
        &self,
        d: &Dataset,
        cfg: &TrainConfig,
        mode: TrainMode,
        observe: &mut dyn FnMut(partitioned::Event),
    ) -> Result<PartitionedRun, BoxError> {
        Ok(partitioned::train(d, cfg, &self.opts, mode.engine_mode(cfg.staleness), observe)?)
    }

    /// After training, what `ordo-train kge --storage` writes: `--save`, streamed from the
    /// storage partition by partition; then the directory is unlocked.
    pub fn finish(
        self,
        d: &Dataset,
        cfg: &TrainConfig,
        run: &PartitionedRun,
    ) -> Result<(), BoxError> {
        if let Some(dir) = &self.save {
            save_partitioned(dir, d, cfg, run)?;
        }
        drop(self.held);
        Ok(())
    }
}
