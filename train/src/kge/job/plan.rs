//! A `kge` job: what the command line (or any caller) asks for, merged over `--config` and
//! checked on its own ([`Job::new`]), and the checks a job passes before work starts
//! ([`check`]).

use super::error::{BoxError, ConfigError};
use super::options::{Options, Synth, parse_config, read_config};
use crate::kge::backends::pm::{PmConfig, PmNegatives};
use crate::kge::data::batch::NegSampling;
use crate::kge::data::dataset::Dataset;
use crate::kge::model::device::Device;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::mode::TrainMode;
use crate::memory::Budget;
use crate::option_error::OptionError;
use std::path::{Path, PathBuf};

/// What `kge` is asked to do: train one mode, or a subcommand with its own options (which
/// override the top level's).
#[derive(Debug)]
pub enum Request {
    /// `kge`: train one mode.
    Train,
    /// `kge compare`: every mode on the same data, seed and hyper-parameters.
    Compare(Options),
    /// `kge eval`: the test metrics of saved embeddings.
    Eval(Options),
    /// `kge synth`: write a synthetic graph.
    Synth(Synth),
}

/// The most triples `kge synth` writes: about 200 GB of text, beyond any disk it is run on.
const MAX_SYNTH_TRIPLES: u64 = 10_000_000_000;

/// The options of `kge compare` given neither `--dataset` nor `--config`: `(its file in the
/// repository, its text)`. WordNet 3.0 at a size where the pipeline pays (see the file).
const COMPARE_DEFAULT: (&str, &str) = (
    "train/configs/compare-wordnet30.toml",
    include_str!("../../../configs/compare-wordnet30.toml"),
);

/// What `kge` was asked to do, with every option checked on its own: what [`run`](super::run)
/// takes.
#[derive(Debug)]
pub struct Job {
    pub(super) command: Option<Command>,
    pub(super) opts: Options,
    pub(super) cfg: TrainConfig,
    pub(super) pm: Option<PmConfig>,
    /// The MPI job this process runs in, `(rank, size)`, if any.
    pub(super) launch: Option<(usize, usize)>,
}

/// The subcommand of a [`Job`] (its options merged into [`Job::opts`]).
#[derive(Debug)]
pub(super) enum Command {
    Compare,
    Eval,
    Synth { entities: u32, triples: u64, relations: u32, communities: u32, out: PathBuf, seed: u64 },
}

impl Job {
    /// The job `request` asks for with the top level's options `opts`: the subcommand's options
    /// merged over `opts` and over `--config`'s file, then every option checked on its own.
    /// `launch` is the MPI job this process runs in ([`mpi_launch`](super::mpi_launch)), if any.
    pub fn new(
        opts: Options,
        request: Request,
        launch: Option<(usize, usize)>,
    ) -> Result<Job, BoxError> {
        Job::resolve(opts, request, read_config, launch)
    }

    /// [`Job::new`] with `--config`'s text returned by `config`.
    pub(super) fn resolve(
        opts: Options,
        request: Request,
        config: impl FnOnce(&Path) -> Result<String, ConfigError>,
        launch: Option<(usize, usize)>,
    ) -> Result<Job, BoxError> {
        let (command, opts) = match request {
            Request::Train => (None, opts),
            Request::Compare(sub) => {
                let opts = sub.or(opts);
                let opts = if opts.dataset.is_none() && opts.config.is_none() {
                    opts.or(parse_config(Path::new(COMPARE_DEFAULT.0), COMPARE_DEFAULT.1)?)
                } else {
                    opts
                };
                (Some(Command::Compare), opts)
            }
            Request::Eval(sub) => (Some(Command::Eval), sub.or(opts)),
            Request::Synth(s) => {
                // Only --out and --seed may come before `synth`; nothing else applies to it.
                if let Some(flag) = opts.given().into_iter().find(|f| f != "--out" && f != "--seed")
                {
                    return Err(ConfigError::NotFor { flag, command: "kge synth" }.into());
                }
                let out = s
                    .out
                    .or(opts.out.clone())
                    .ok_or(ConfigError::Unsupported("kge synth needs --out DIR"))?;
                let synth = Command::Synth {
                    entities: s.entities,
                    triples: s.triples,
                    relations: s.relations,
                    communities: s.communities,
                    out,
                    seed: s.seed.or(opts.seed).unwrap_or(0),
                };
                (Some(synth), opts)
            }
        };
        let opts = opts.resolve(config)?;
        let cfg = opts.config();
        if let Some(Command::Synth { entities, triples, relations, communities, .. }) = &command {
            crate::option_error::count("--entities", *entities as usize, u32::MAX as usize)?;
            crate::option_error::count("--relations", *relations as usize, u32::MAX as usize)?;
            if communities > entities {
                let why = format!("must be at most --entities = {entities}");
                return Err(OptionError::new("--communities", communities, why).into());
            }
            if !(1..=MAX_SYNTH_TRIPLES).contains(triples) {
                let why = format!("must be in 1..={MAX_SYNTH_TRIPLES}");
                return Err(OptionError::new("--triples", triples, why).into());
            }
            let least = *entities as u64 + crate::kge::data::synth::MIN_EXTRA;
            if *triples < least {
                let why = format!(
                    "must be at least --entities + 2 = {least}: one train triple per entity, then \
                     one each for valid and test"
                );
                return Err(OptionError::new("--triples", triples, why).into());
            }
            return Ok(Job { command, opts, cfg, pm: None, launch });
        }
        opts.validate(&cfg)?;
        if matches!(command, Some(Command::Eval)) && opts.load.is_none() {
            return Err(ConfigError::Unsupported("kge eval needs --load DIR").into());
        }
        if opts.load.is_some() && !matches!(command, Some(Command::Eval)) {
            return Err(ConfigError::Unsupported(
                "--load is read by `kge eval` only; to continue a run, give --resume DIR",
            )
            .into());
        }
        opts.check_repeat(matches!(command, Some(Command::Compare)))?;
        // Bad flag combinations fail before the dataset is read.
        let pm = opts.pm_config(command.is_some(), launch)?;
        opts.partition_opts(command.is_some())?;
        opts.check_precision(&cfg)?;
        // The runs that draw their own negatives take only uniform ones; distinct batches' rows
        // are laid out, not sorted, which the PM and the GPU's cache do not take.
        let (sampling, distinct) = (cfg.neg_sampling, cfg.neg_sampling == NegSampling::Distinct);
        let local = pm.is_some_and(|p| p.negatives == PmNegatives::Local);
        let others = [
            (distinct && pm.is_some(), "--pm"),
            (distinct && cfg.device == Device::Cuda, "--device cuda"),
            (sampling != NegSampling::Uniform && opts.storage.is_some(), "--storage"),
            (
                sampling != NegSampling::Uniform && local,
                "--pm's local negatives (the default; give --pm-negatives global)",
            ),
        ];
        if let Some((_, what)) = others.into_iter().find(|(given, _)| *given) {
            let name = if distinct { "distinct" } else { "batch" };
            let why = format!("does not go with {what}");
            return Err(OptionError::new("--neg-sampling", name, why).into());
        }
        // In-batch negatives beside the others: the runs that draw their own refuse them too.
        let in_batch = [
            (opts.storage.is_some(), "--storage"),
            (local, "--pm's local negatives (the default; give --pm-negatives global)"),
        ];
        if let Some((_, what)) = in_batch.into_iter().find(|(given, _)| *given)
            && cfg.batch_negatives > 0
        {
            let why = format!("does not go with {what}");
            let value = cfg.batch_negatives.to_string();
            return Err(OptionError::new("--batch-negatives", value, why).into());
        }
        Ok(Job { command, opts, cfg, pm, launch })
    }

    /// The training configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    /// The options, merged and checked.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The modes this job trains, in order.
    pub fn modes(&self) -> Vec<TrainMode> {
        match self.command {
            Some(Command::Compare) => TrainMode::ALL.to_vec(),
            _ => vec![self.opts.mode()],
        }
    }

    /// [`Options::check_memory`] for this job on `d`; nothing to check for `eval` (it holds
    /// the saved tables, which `--load` sizes) or `synth`.
    pub(super) fn check_memory(&self, d: &Dataset, budget: Budget) -> Result<(), OptionError> {
        match self.command {
            Some(Command::Eval | Command::Synth { .. }) => Ok(()),
            _ => self
                .opts
                .check_memory(&self.cfg, d, self.pm.as_ref(), &self.modes(), budget, None)
                .map(|_| ()),
        }
    }
}

/// In-memory inputs of [`check`]: what `--config`, `--dataset` and the like would read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    /// The text of the `--config` file, if one is named.
    pub config: &'a str,
    /// `train.txt`, `valid.txt` and `test.txt` of the dataset.
    pub dataset: [&'a str; 3],
}

/// Everything [`Job::new`] and [`run`](super::run) do before work starts, with no side effect:
/// merge the options, read `--config` and the dataset from `inputs` instead of files, validate
/// every option and check the run's memory against `budget`. `Ok` means `run` would start
/// training (or writing a synthetic graph); an `Err` is what it would refuse with. Used by the
/// fuzz target.
pub fn check(
    opts: Options,
    request: Request,
    inputs: &Inputs<'_>,
    budget: Budget,
) -> Result<(), BoxError> {
    let plan = Job::resolve(opts, request, |_| Ok(inputs.config.to_string()), None)?;
    if let Some(Command::Synth { .. }) = plan.command {
        return Ok(());
    }
    let d = Dataset::from_strs("input", inputs.dataset)?;
    plan.check_memory(&d, budget)?;
    Ok(())
}
