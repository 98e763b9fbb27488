//! One training run in one process for a caller that drives the training itself
//! ([`OneRun`]): checked, its outputs locked before and written after by the run layer.

use super::error::{BoxError, ConfigError};
use super::launch::{hold_outputs, resumable, write_out};
use super::options::Options;
use super::plan::{Job, Request};
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
/// [`Prepared::finish`] after.
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
    /// The options, for the output directories and the memory limit.
    pub(super) opts: Options,
}

impl OneRun {
    /// Merge and check `opts` as `ordo-train kge` does ([`Job::new`]), for one run in one
    /// process, its table in memory: a `--pm`, `--load` or `--storage` run is refused
    /// ([`ConfigError::Unsupported`]).
    pub fn new(opts: Options) -> Result<OneRun, BoxError> {
        let job = Job::new(opts, Request::Train, None)?;
        let o = &job.opts;
        // `--storage` (the table in partitions) is a run of its own kind (`run_partitioned`),
        // not a session over an in-memory table: refused rather than silently trained in memory.
        if job.pm.is_some() || o.load.is_some() || o.partition_opts(false)?.is_some() {
            return Err(ConfigError::Unsupported(
                "one run in one process, its table in memory: no subcommand, --pm, --load or --storage",
            )
            .into());
        }
        Ok(OneRun {
            dataset: o.dataset().to_string(),
            config: job.cfg,
            mode: o.mode(),
            save: o.save.clone(),
            opts: job.opts,
        })
    }

    /// What `ordo-train kge` does between loading the dataset `d` and training, in its order:
    /// the device checked, the run's memory estimated against the limit, the options checked by
    /// building the model, the output directories locked (a checkpoint to resume checked
    /// first, `--out` marked incomplete), and the checkpoint to resume read.
    pub fn prepare(&self, d: &Dataset) -> Result<Prepared, BoxError> {
        let (o, cfg) = (&self.opts, &self.config);
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
