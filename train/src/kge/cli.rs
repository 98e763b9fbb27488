//! `ordo-train kge`: train link prediction in one mode, or `kge compare` to run every mode on the
//! same data, seeds and hyper-parameters (the OAC paper's Figures 2 and 3 for our data).
//!
//! ```text
//! ordo-train kge [OPTIONS]             # one mode (--mode, default oac)
//! ordo-train kge compare [OPTIONS]     # sync, async, bounded, oac
//! ordo-train kge eval --load DIR       # test metrics of saved embeddings
//! ```

use crate::kge::backends::partitioned::{self, PartitionOpts, PartitionedError, StorageKind};
use crate::kge::backends::pm::{PmConfig, PmNegatives, PmRun, PmTrainError, mpi_launch, train_pm};
use crate::kge::data::batch::NegSampling;
use crate::kge::data::dataset::DataError;
use crate::kge::data::dataset::Dataset;
use crate::kge::io::checkpoint::{Checkpoint, CheckpointError};
use crate::kge::io::compare;
use crate::kge::io::npy;
use crate::kge::io::npy::NpyError;
use crate::kge::io::plot;
use crate::kge::model::gpu::{Device, check_device};
use crate::kge::model::init::Init;
use crate::kge::model::optim::Optimizer;
use crate::kge::model::score::{Loss, Regularizer, ScoreFn};
use crate::kge::run::config::TrainConfig;
use crate::kge::run::event::Event;
use crate::kge::run::mode::Mode;
use crate::kge::run::results::{EpochStats, RunResult};
use crate::kge::training::error::TrainError;
use crate::kge::training::train::{Resumable, Tune, train_resumable};
use crate::memory::{Budget, Estimate, n, product};
use crate::options::{MAX_THREADS, OptionError, count, non_negative, positive};
use crate::outdir::{Held, LockError, OutputLock};
use indicatif::{ProgressBar, ProgressStyle};
use ordo::engine::{EngineConfig, Observer, Stamp};
use ordo_pm::PmMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `--intent-offset`'s default: 2 clocks ahead keeps all but 0.07% of accesses local with
/// in-process nodes (BENCHMARKS.md, AdaPM offset sweep). Not raised under mpirun, where 8 clocks
/// are needed on WordNet: on UMLS (135 entities, every key replicated on every node) intents
/// 8 clocks long kept replicas stale enough for a 4-rank run to miss 0.97x the single-process
/// MRR (0.8819 vs 0.9160, tests/e2e_pm.rs, once in two CI runs).
const INTENT_OFFSET: u64 = 2;

/// The largest `--intent-offset`: a million clocks is beyond any run's batches per epoch, and
/// a clock plus the offset must not overflow.
const MAX_INTENT_OFFSET: usize = 1_000_000;

/// Arguments of `ordo-train kge`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct KgeArgs {
    #[command(subcommand)]
    command: Option<KgeCommand>,
    #[command(flatten)]
    opts: KgeOpts,
}

#[derive(Debug, clap::Subcommand)]
enum KgeCommand {
    /// Run every mode (sync, async, bounded, oac) on the same data, seed and hyper-parameters,
    /// then compare time-to-accuracy. Without --dataset or --config: the embedded WordNet 3.0
    /// with train/configs/compare-wordnet30.toml's options (each flag overrides its line).
    Compare(Box<KgeOpts>),
    /// Print the filtered test metrics of embeddings saved with --save (give --load).
    Eval(Box<KgeOpts>),
    /// Write a synthetic graph with power-law degrees to --out DIR (train/valid/test.txt).
    Synth(SynthArgs),
}

/// The most comparisons one `kge compare --repeat` runs (a day of the main job).
const MAX_REPEAT: usize = 1000;

/// The most triples `kge synth` writes: about 200 GB of text, beyond any disk it is run on.
const MAX_SYNTH_TRIPLES: u64 = 10_000_000_000;

/// Options of `ordo-train kge synth` (it takes none of the training options).
#[derive(Debug, clap::Args)]
struct SynthArgs {
    /// Entities.
    #[arg(long, default_value_t = 1_000_000)]
    entities: u32,
    /// Triples (98% train, 1% valid, 1% test; at most 10^10).
    #[arg(long, default_value_t = 20_000_000)]
    triples: u64,
    /// Relations.
    #[arg(long, default_value_t = 100)]
    relations: u32,
    /// The directory to write train.txt, valid.txt and test.txt to.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of the graph [default: 0].
    #[arg(long)]
    seed: Option<u64>,
}

/// Options shared by all `kge` commands. Every training option may also come from
/// `--config FILE` (TOML, or JSON for a `.json` file; keys are the long flag names, e.g.
/// `batch-size = 1024`); a flag given on the command line overrides the file.
///
/// Each output directory (--save, --checkpoint, --out, and --resume's) is locked for the whole
/// run through the file `.NAME.lock` beside it, before training: a second run, or an unwritable
/// path, is refused then, naming the path (and the holder's pid).
#[derive(Debug, Default, clap::Args, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct KgeOpts {
    /// Dataset: umls, kinships, nations, wordnet30 (embedded) or a directory with
    /// train/valid/test.txt [default: umls; `kge compare` without --dataset or --config runs
    /// wordnet30 with the options of train/configs/compare-wordnet30.toml].
    #[arg(long)]
    dataset: Option<String>,
    /// Scoring function [default: complex].
    #[arg(long, value_enum)]
    model: Option<ScoreFn>,
    /// Loss over each positive and its negatives [default: softmax].
    #[arg(long, value_enum)]
    loss: Option<Loss>,
    /// γ of the margin loss [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    margin: Option<f32>,
    /// Embedding floats per entity (ComplEx, RotatE: even; dim/2 complex numbers) [default: 100].
    #[arg(long)]
    dim: Option<usize>,
    /// Passes over the training triples [default: 25].
    #[arg(long)]
    epochs: Option<usize>,
    /// Positives per batch [default: 128].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Negatives per positive, for each of head and tail corruption [default: 64].
    #[arg(long)]
    negatives: Option<usize>,
    /// Positives per chunk sharing one set of negatives (1 = no sharing) [default: 16].
    #[arg(long)]
    chunk: Option<usize>,
    /// Where negatives come from [default: uniform].
    #[arg(long, value_enum)]
    neg_sampling: Option<NegSampling>,
    /// Inverse relations: every query is a tail query, `(?, r, t)` asked as `(t, r⁻¹, ?)`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    reciprocal: Option<bool>,
    /// Learning rate [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    lr: Option<f32>,
    /// Optimizer (its state travels with each entity row) [default: adagrad].
    #[arg(long, value_enum)]
    optimizer: Option<Optimizer>,
    /// Regularizer on the embeddings each positive uses [default: l2].
    #[arg(long, value_enum)]
    regularizer: Option<Regularizer>,
    /// Regularizer weight per use of an embedding (0 = off) [default: 0].
    #[arg(long, alias = "reg", allow_negative_numbers = true)]
    reg_weight: Option<f32>,
    /// Initial distribution of the embeddings [default: uniform].
    #[arg(long, value_enum)]
    init: Option<Init>,
    /// Its scale: uniform bound, normal standard deviation or Xavier gain [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    init_scale: Option<f32>,
    /// Seed of initialization, shuffles and negatives [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// Mode of a single run [default: oac].
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Engine reader threads and writer threads (each) [default: 1].
    #[arg(long)]
    threads: Option<usize>,
    /// Staleness bound of --mode bounded (batches in flight) [default: 4].
    #[arg(long)]
    staleness: Option<usize>,
    /// Evaluate on at most the first this many valid and test triples (0 = all; for large sets)
    /// [default: 0].
    #[arg(long)]
    eval_limit: Option<usize>,
    /// Rank each answer against this many sampled entities instead of all (DGL-KE/PBG's
    /// evaluation for large graphs; printed as "sampled") [default: 0 = full ranking].
    #[arg(long)]
    eval_sample: Option<usize>,
    /// Write metrics.csv and the plots mrr_vs_time.png / mrr_vs_epoch.png here, then COMPLETE
    /// (the run id) once all are written: a directory without COMPLETE is partial or being
    /// written.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Save the final embeddings as this directory: entities.npy, relations.npy, their names
    /// (entities.txt, relations.txt) and manifest.json (run id, model, options, dataset, CRC-32
    /// of each file), replacing any previous save all at once; with compare, one subdirectory per
    /// mode.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Embeddings directory written by --save (for `kge eval` only; a training run refuses it).
    /// Its files are checked against manifest.json, its names against the dataset's (line by
    /// line), and its model against --model (which defaults to the saved one).
    #[arg(long)]
    load: Option<PathBuf>,
    /// Where the training step runs: cpu, or cuda (ordo-gpu's kernels and device-side
    /// validation cache; checked first, fails with the reason when CUDA is not usable).
    /// Evaluation runs on the CPU either way [default: cpu].
    #[arg(long, value_enum)]
    device: Option<Device>,
    /// Write a checkpoint (embeddings, optimizer state, epoch, recorded order, manifest.json)
    /// to this directory every --checkpoint-every epochs and after the last, as epoch-NNNNNN/
    /// named by the file `latest`; with compare, one per mode.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Epochs between checkpoints (0 = only after the last) [default: 0].
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Continue the run checkpointed in this directory up to --epochs. Checked first: every
    /// file against manifest.json, the model, options, dataset sizes and training triples, the
    /// saved names against the dataset's (line by line), the epoch against its directory and
    /// records, and --epochs not below it.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Train with the parameters in AdaPM (or a baseline) over in-process nodes instead of the
    /// engine: adapm, static, replicate, no-relocation, no-replication, immediate.
    #[arg(long)]
    #[serde(default, deserialize_with = "pm_mode")]
    pm: Option<PmMode>,
    /// Nodes of --pm (one training thread each) [default: 2].
    #[arg(long)]
    pm_nodes: Option<usize>,
    /// Batches (clocks) ahead that --pm nodes signal intent [default: 2]. Under mpirun on a
    /// large graph use 8: messages between processes take longer than 2 clocks (BENCHMARKS.md,
    /// AdaPM on 4 MPI ranks).
    #[arg(long)]
    intent_offset: Option<u64>,
    /// Where --pm nodes draw negatives: local (among the keys the node holds, paper 002) or
    /// global (as the engine's runs) [default: local].
    #[arg(long, value_enum)]
    pm_negatives: Option<PmNegatives>,
    /// Refuse a run whose estimated memory exceeds this many bytes (a number, or with a K, M,
    /// G or T suffix) [default: the cgroup's limit, or else the available memory].
    #[arg(long, value_parser = crate::memory::parse_bytes)]
    memory_limit: Option<u64>,
    /// Keep the entity table in a partition buffer: disk (files in --storage-dir, --buffer of
    /// --partitions in memory) or memory (the in-memory twin: the same partitions and bucket
    /// order without a disk). A disk folder holding this run's checkpoint resumes it.
    #[arg(long, value_enum)]
    storage: Option<StorageKind>,
    /// The folder of the partition files of --storage disk.
    #[arg(long)]
    storage_dir: Option<PathBuf>,
    /// Partitions of the entity table with --storage [default: 16].
    #[arg(long)]
    partitions: Option<usize>,
    /// Partitions held in memory with --storage (at least 2, at most --partitions) [default: 4].
    #[arg(long)]
    buffer: Option<usize>,
    /// With compare: run the whole comparison this many times, then print each mode's median
    /// and range over the runs and how many runs matched sync to the bit (one run's lead
    /// scatters by about 10%) [default: 1].
    #[arg(long)]
    repeat: Option<usize>,
    /// Read options from this TOML (or `.json`) file; flags given here override it.
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    #[serde(skip)]
    quiet: bool,
}

/// `--config FILE` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML/JSON or names an unknown option or value.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with the line).
        message: String,
    },
    /// Options that do not go together.
    #[error("{0}")]
    Unsupported(&'static str),
    /// A flag the subcommand does not use.
    #[error("{flag}: not an option of {command}")]
    NotFor {
        /// The flag.
        flag: String,
        /// The subcommand.
        command: &'static str,
    },
    /// An engine-only option given with `--pm`.
    #[error("--pm does not go with {0}")]
    PmIncompatible(&'static str),
}

/// `pm = "adapm"` in a config file.
fn pm_mode<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<PmMode>, D::Error> {
    use serde::Deserialize;
    let name = Option::<String>::deserialize(de)?;
    name.map(|n| n.parse().map_err(serde::de::Error::custom)).transpose()
}

/// Read a config file's text. A leading byte-order mark is dropped (TOML and JSON parsers
/// refuse it) and CRLF line ends are read as LF by both parsers, so a file saved by any editor
/// means the same.
fn read_config(path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })
}

/// Parse a config file's `text`: JSON if `path` ends in `.json`, TOML otherwise.
fn parse_config(path: &std::path::Path, text: &str) -> Result<KgeOpts, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let parse = |message: String| ConfigError::Parse { path: path.to_path_buf(), message };
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).map_err(|e| parse(e.to_string()))
    } else {
        toml::from_str(text).map_err(|e| parse(e.to_string()))
    }
}

/// Calls macro `$m` with every `Option` field of [`KgeOpts`] (all but `config` and `quiet`):
/// the one list that [`KgeOpts::or`] merges and [`KgeOpts::given`] reports.
macro_rules! option_fields {
    ($m:ident) => {
        $m!(
            dataset,
            model,
            loss,
            margin,
            dim,
            epochs,
            batch_size,
            negatives,
            chunk,
            neg_sampling,
            reciprocal,
            lr,
            optimizer,
            regularizer,
            reg_weight,
            init,
            init_scale,
            seed,
            mode,
            threads,
            staleness,
            eval_limit,
            eval_sample,
            out,
            save,
            load,
            device,
            checkpoint,
            checkpoint_every,
            resume,
            pm,
            pm_nodes,
            intent_offset,
            pm_negatives,
            memory_limit,
            storage,
            storage_dir,
            partitions,
            buffer,
            repeat
        )
    };
}

impl KgeOpts {
    /// These options with every unset one taken from `file`.
    fn or(self, file: KgeOpts) -> KgeOpts {
        macro_rules! merged {
            ($($f:ident),*) => {
                KgeOpts {
                    $($f: self.$f.or(file.$f),)*
                    config: self.config.or(file.config),
                    quiet: self.quiet || file.quiet,
                }
            };
        }
        option_fields!(merged)
    }

    /// The flags among these options that are set, as `--long-name`s.
    fn given(&self) -> Vec<String> {
        macro_rules! given {
            ($($f:ident),*) => {
                [$((self.$f.is_some(), stringify!($f)),)* (self.config.is_some(), "config")]
            };
        }
        let all = option_fields!(given);
        all.into_iter().filter(|g| g.0).map(|(_, f)| format!("--{}", f.replace('_', "-"))).collect()
    }

    /// The command-line options over those of `--config`, whose text `config` returns.
    fn resolve(
        self,
        config: impl FnOnce(&std::path::Path) -> Result<String, ConfigError>,
    ) -> Result<KgeOpts, ConfigError> {
        match &self.config {
            Some(path) => {
                let file = parse_config(path, &config(path)?)?;
                Ok(self.or(file))
            }
            None => Ok(self),
        }
    }

    fn dataset(&self) -> &str {
        self.dataset.as_deref().unwrap_or("umls")
    }

    /// How many times `kge compare` runs its comparison ([`check_repeat`](Self::check_repeat)).
    fn repeats(&self) -> usize {
        self.repeat.unwrap_or(1)
    }

    /// `--repeat`: only with `compare` (`compare` says whether this is it), at least 1, and
    /// above 1 without the options that write a run's results, which each run would overwrite.
    fn check_repeat(&self, compare: bool) -> Result<(), BoxError> {
        let Some(n) = self.repeat else { return Ok(()) };
        if !compare {
            return Err(ConfigError::Unsupported("--repeat needs `kge compare`").into());
        }
        count("--repeat", n, MAX_REPEAT)?;
        let writes = self.save.is_some()
            || self.checkpoint.is_some()
            || self.resume.is_some()
            || self.out.is_some();
        if n > 1 && writes {
            return Err(ConfigError::Unsupported(
                "--repeat above 1 does not go with --save, --checkpoint, --resume or --out (each \
                 run would overwrite the last one's; run once to write them)",
            )
            .into());
        }
        Ok(())
    }

    /// The `--pm` run these options ask for, if any; `Unsupported` for flags that do not go with
    /// it (or PM flags without `--pm`). `launch` is the MPI job this process runs in
    /// ([`mpi_launch`]), whose ranks are then the nodes.
    fn pm_config(
        &self,
        subcommand: bool,
        launch: Option<(usize, usize)>,
    ) -> Result<Option<PmConfig>, ConfigError> {
        let Some(mode) = self.pm else {
            if self.pm_nodes.is_some()
                || self.intent_offset.is_some()
                || self.pm_negatives.is_some()
            {
                return Err(ConfigError::Unsupported(
                    "--pm-nodes, --intent-offset and --pm-negatives need --pm",
                ));
            }
            return Ok(None);
        };
        let engine_only = [
            (subcommand, "a subcommand (compare, eval, synth)"),
            (self.mode.is_some(), "--mode (the PM runs its own asynchronous regime)"),
            (self.checkpoint.is_some() || self.resume.is_some(), "--checkpoint or --resume"),
            (
                self.save.is_some() || self.load.is_some() || self.out.is_some(),
                "--save, --load or --out",
            ),
            (self.device.is_some_and(|d| d != Device::Cpu), "--device other than cpu"),
        ];
        if let Some((_, what)) = engine_only.into_iter().find(|(given, _)| *given) {
            return Err(ConfigError::PmIncompatible(what));
        }
        let nodes = match launch {
            // Under mpirun the ranks are the nodes.
            Some(_) if !cfg!(feature = "mpi") => {
                return Err(ConfigError::Unsupported(
                    "--pm under mpirun needs ordo-train built with --features mpi",
                ));
            }
            Some(_) if self.pm_nodes.is_some() => {
                return Err(ConfigError::Unsupported(
                    "--pm-nodes does not go with mpirun (each rank is one node)",
                ));
            }
            Some((_, size)) => size,
            None => self.pm_nodes.unwrap_or(2),
        };
        if nodes == 0 {
            return Err(ConfigError::Unsupported("--pm-nodes must be at least 1"));
        }
        Ok(Some(PmConfig {
            mode,
            nodes,
            intent_offset: self.intent_offset.unwrap_or(INTENT_OFFSET),
            negatives: self.pm_negatives.unwrap_or_default(),
        }))
    }

    /// The partition buffer these options ask for (`--storage`), if any; `Unsupported` for
    /// flags that do not go with it (or its flags without it), an [`OptionError`] for a buffer
    /// that does not fit the partitions.
    fn partition_opts(&self, subcommand: bool) -> Result<Option<PartitionOpts>, BoxError> {
        let Some(storage) = self.storage else {
            if self.storage_dir.is_some() || self.partitions.is_some() || self.buffer.is_some() {
                return Err(ConfigError::Unsupported(
                    "--storage-dir, --partitions and --buffer need --storage",
                )
                .into());
            }
            return Ok(None);
        };
        let others = [
            (subcommand, "a subcommand (compare, eval, synth)"),
            (self.pm.is_some(), "--pm"),
            (
                self.checkpoint.is_some() || self.resume.is_some(),
                "--checkpoint or --resume (a disk storage checkpoints itself)",
            ),
            (self.load.is_some(), "--load"),
            (self.device.is_some_and(|d| d != Device::Cpu), "--device other than cpu"),
        ];
        if let Some((_, what)) = others.into_iter().find(|(given, _)| *given) {
            return Err(format!("--storage does not go with {what}").into());
        }
        if storage == StorageKind::Memory && self.storage_dir.is_some() {
            return Err(ConfigError::Unsupported(
                "--storage memory keeps no files: drop --storage-dir",
            )
            .into());
        }
        let opts = PartitionOpts {
            storage,
            dir: self.storage_dir.clone(),
            partitions: self.partitions.unwrap_or(16),
            buffer: self.buffer.unwrap_or(4),
        };
        if let Err(e) = ordo::partition::ordering::beta(opts.partitions, opts.buffer) {
            return Err(OptionError::new("--buffer", opts.buffer, e.to_string()).into());
        }
        if storage == StorageKind::Disk && opts.dir.is_none() {
            return Err(ConfigError::Unsupported("--storage disk needs --storage-dir DIR").into());
        }
        Ok(Some(opts))
    }

    /// Every training option on its own, before anything is read or written: the one place
    /// `kge` refuses a value. Those that need the data are [`check_memory`](Self::check_memory)'s.
    fn validate(&self, cfg: &TrainConfig) -> Result<(), OptionError> {
        let dim = |e: crate::kge::model::score::DimError| {
            OptionError::new("--dim", cfg.dim, e.to_string())
        };
        cfg.score.check_dim(cfg.dim).map_err(dim)?;
        count("--batch-size", cfg.batch_size, usize::MAX)?;
        count("--negatives", cfg.negatives, usize::MAX)?;
        count("--chunk", cfg.chunk, usize::MAX)?;
        count("--threads", cfg.threads, MAX_THREADS)?;
        count("--staleness", cfg.staleness, usize::MAX)?;
        positive("--lr", cfg.lr.into())?;
        // γ ≤ 0 makes every margin loss zero at the start: nothing would train.
        positive("--margin", cfg.margin.into())?;
        non_negative("--init-scale", cfg.init_scale.into())?;
        non_negative("--reg-weight", cfg.reg.into())?;
        if let Some(nodes) = self.pm_nodes {
            count("--pm-nodes", nodes, MAX_THREADS)?;
        }
        if let Some(offset) = self.intent_offset {
            count("--intent-offset", offset.try_into().unwrap_or(usize::MAX), MAX_INTENT_OFFSET)?;
        }
        if let Some(limit) = self.memory_limit {
            count("--memory-limit", limit.try_into().unwrap_or(usize::MAX), usize::MAX)?;
        }
        Ok(())
    }

    /// The memory a run of `modes` on `d` will need, against `budget`: the one place `kge`
    /// checks sizes, after the data is read and before any table is allocated. Counts the
    /// entity table with its optimizer state and the snapshot evaluation takes (and the copy a
    /// checkpoint writes), the relation parameters, the batches in flight (two per engine
    /// thread, two more, and the staleness bound's), the sampled-evaluation buffers (one per
    /// rayon thread), the recorded order and statistics of every epoch (kept for the replay
    /// and the checkpoint, so `--epochs` is bounded by memory and a huge value is refused
    /// here rather than stalling), the threads' stacks and, with `--pm`, a replica of every row
    /// on every node.
    fn check_memory(
        &self,
        cfg: &TrainConfig,
        d: &Dataset,
        pm: Option<&PmConfig>,
        modes: &[Mode],
        budget: Budget,
    ) -> Result<u64, OptionError> {
        cfg.sampling(d)
            .check()
            .map_err(|e| OptionError::new("--neg-sampling", "distinct", e.to_string()))?;
        const F: u64 = 4; // bytes per f32
        let dim = n(cfg.dim);
        let row = cfg.optimizer.checked_state_width(dim).and_then(|s| s.checked_add(dim));
        let ents = n(d.entities.len());
        let rels = n(d.relations.len()) * if cfg.reciprocal { 2 } else { 1 };
        let mut e = Estimate::default();
        // RowStore words (a version word and two floats per word), the snapshot evaluation
        // reads, and the full rows a checkpoint or resume holds beside the store.
        let copy = if self.checkpoint.is_some() || self.resume.is_some() { row } else { Some(dim) };
        let words = row.map(|w| 1 + w.div_ceil(2));
        let per_entity = (|| {
            words?
                .checked_mul(8)?
                .checked_add(dim.checked_mul(F)?)?
                .checked_add(copy?.checked_mul(F)?)
        })();
        e.add("--dim", cfg.dim, "entity table", per_entity.and_then(|b| b.checked_mul(ents)));
        // Parameters, optimizer state (at most 2·dim + 1) and gradient of each relation row.
        let per_rel = dim.checked_mul(4).and_then(|x| x.checked_add(1));
        e.add(
            "--dim",
            cfg.dim,
            "relation parameters",
            per_rel.and_then(|x| product(&[x, rels, F])),
        );
        // A batch's gathered rows (full rows in, gradients out) and its scores.
        let (batch, negatives) = (n(cfg.batch_size), n(cfg.negatives));
        let row_io = row.and_then(|r| r.checked_add(dim)).and_then(|r| r.checked_mul(F));
        // A batch gathers each distinct row once: never more rows than entities.
        let pos_rows = batch.checked_mul(3).map(|r| r.min(ents));
        let pos_bytes = row_io.and_then(|r| product(&[r, pos_rows?]));
        let chunks = batch.div_ceil(n(cfg.chunk));
        let neg_bytes = (|| {
            let rows = product(&[chunks, 2, negatives])?.min(ents);
            product(&[rows, row_io?])?.checked_add(product(&[batch, 2, negatives, 2, F])?)
        })();
        let workers = match pm {
            Some(pm) => n(pm.nodes),
            None => n(cfg.threads) * 2 + 2,
        };
        let in_flight = |b: Option<u64>| b.and_then(|b| b.checked_mul(workers));
        // A term sized by several options names the one furthest above its default.
        let def = TrainConfig::default();
        let ratio = |v: usize, default: usize| v as f64 / default.max(1) as f64;
        let blame = |of: &[(&'static str, usize, usize)]| {
            let worst = of.iter().max_by(|a, b| ratio(a.1, a.2).total_cmp(&ratio(b.1, b.2)));
            worst.map_or(("--batch-size", cfg.batch_size), |&(o, v, _)| (o, v))
        };
        let dim_of = ("--dim", cfg.dim, def.dim);
        let (batch_of, negatives_of) = (
            ("--batch-size", cfg.batch_size, def.batch_size),
            ("--negatives", cfg.negatives, def.negatives),
        );
        let (o, v) = blame(&[batch_of, dim_of]);
        e.add(o, v, "batches in flight", in_flight(pos_bytes));
        let (o, v) = blame(&[negatives_of, batch_of, dim_of]);
        e.add(o, v, "negatives in flight", in_flight(neg_bytes));
        if pm.is_none() && modes.contains(&Mode::Bounded) {
            let per_batch = pos_bytes.and_then(|p| p.checked_add(neg_bytes?));
            let bytes = per_batch.and_then(|b| b.checked_mul(n(cfg.staleness)));
            let (o, v) = blame(&[
                ("--staleness", cfg.staleness, def.staleness),
                negatives_of,
                batch_of,
                dim_of,
            ]);
            e.add(o, v, "batches the staleness bound admits", bytes);
        }
        let rayon = n(rayon::current_num_threads());
        let sample = product(&[n(cfg.eval_sample), F, rayon]);
        e.add("--eval-sample", cfg.eval_sample, "sampled evaluation", sample);
        // Each epoch's recorded order (a u64 id per batch) and its statistics, per mode.
        let per_epoch =
            n(d.train.len()).div_ceil(batch).checked_mul(8).and_then(|b| b.checked_add(256));
        let orders = per_epoch.and_then(|b| product(&[b, n(cfg.epochs), n(modes.len())]));
        e.add("--epochs", cfg.epochs, "recorded orders and epoch statistics", orders);
        // Reserved (if not all touched) stack of every thread: 2 MiB each, Rust's default.
        let stacks = product(&[workers, 2 << 20]);
        match pm {
            Some(pm) => e.add("--pm-nodes", pm.nodes, "thread stacks", stacks),
            None => e.add("--threads", cfg.threads, "thread stacks", stacks),
        };
        if let Some(pm) = pm {
            let replicas = row.and_then(|r| product(&[n(pm.nodes), ents, r, F]));
            e.add("--pm-nodes", pm.nodes, "row replicas on every node", replicas);
        }
        e.check(budget)
    }

    fn mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::Oac)
    }

    fn config(&self) -> TrainConfig {
        let d = TrainConfig::default();
        TrainConfig {
            score: self.model.unwrap_or(d.score),
            loss: self.loss.unwrap_or(d.loss),
            dim: self.dim.unwrap_or(d.dim),
            lr: self.lr.unwrap_or(d.lr),
            optimizer: self.optimizer.unwrap_or(d.optimizer),
            reg: self.reg_weight.unwrap_or(d.reg),
            regularizer: self.regularizer.unwrap_or(d.regularizer),
            init: self.init.unwrap_or(d.init),
            init_scale: self.init_scale.unwrap_or(d.init_scale),
            margin: self.margin.unwrap_or(d.margin),
            reciprocal: self.reciprocal.unwrap_or(d.reciprocal),
            neg_sampling: self.neg_sampling.unwrap_or(d.neg_sampling),
            epochs: self.epochs.unwrap_or(d.epochs),
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            negatives: self.negatives.unwrap_or(d.negatives),
            chunk: self.chunk.unwrap_or(d.chunk),
            seed: self.seed.unwrap_or(d.seed),
            threads: self.threads.unwrap_or(d.threads),
            staleness: self.staleness.unwrap_or(d.staleness),
            eval_limit: self.eval_limit.unwrap_or(d.eval_limit),
            eval_sample: self.eval_sample.unwrap_or(d.eval_sample),
            device: self.device.unwrap_or(d.device),
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

/// The exit status for an error of [`run`]: 2 for bad input (a malformed or unknown dataset, a
/// bad configuration file or hyper-parameter, a corrupt checkpoint or one of another run,
/// embeddings that do not fit), 1 for a failure while running.
pub fn exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    let bad_checkpoint = CheckpointError::is_bad_input;
    let bad_input = e.is::<DataError>()
        || e.downcast_ref::<LockError>().is_some_and(|l| !matches!(l, LockError::Staged(_)))
        || e.is::<OptionError>()
        || e.is::<ConfigError>()
        || e.downcast_ref::<NpyError>().is_some_and(NpyError::is_bad_input)
        || e.downcast_ref::<PartitionedError>().is_some_and(PartitionedError::is_bad_input)
        || e.downcast_ref::<PmTrainError>().is_some_and(PmTrainError::is_bad_input)
        || e.downcast_ref::<CheckpointError>().is_some_and(bad_checkpoint)
        || e.downcast_ref::<TrainError>().is_some_and(|t| match t {
            TrainError::Dim(_) | TrainError::Config(_) => true,
            TrainError::Checkpoint(c) => bad_checkpoint(c),
            _ => false,
        });
    if bad_input { 2 } else { 1 }
}

/// The options of `kge compare` given neither `--dataset` nor `--config`: `(its file in the
/// repository, its text)`. WordNet 3.0 at a size where the pipeline pays (see the file).
const COMPARE_DEFAULT: (&str, &str) =
    ("train/configs/compare-wordnet30.toml", include_str!("../../configs/compare-wordnet30.toml"));

/// What `kge` was asked to do, with every option checked on its own.
struct Plan {
    command: Option<Command>,
    opts: KgeOpts,
    cfg: TrainConfig,
    pm: Option<PmConfig>,
}

/// The subcommand of a [`Plan`] (its options merged into [`Plan::opts`]).
enum Command {
    Compare,
    Eval,
    Synth { entities: u32, triples: u64, relations: u32, out: PathBuf, seed: u64 },
}

impl Plan {
    /// Merge the subcommand's options over the top level's and over `--config` (whose text
    /// `config` returns), then [`KgeOpts::validate`]. `launch` is the MPI job, if any.
    fn new(
        args: KgeArgs,
        config: impl FnOnce(&std::path::Path) -> Result<String, ConfigError>,
        launch: Option<(usize, usize)>,
    ) -> Result<Plan, BoxError> {
        let KgeArgs { command, opts } = args;
        let (command, opts) = match command {
            None => (None, opts),
            Some(KgeCommand::Compare(sub)) => {
                let opts = (*sub).or(opts);
                let opts = if opts.dataset.is_none() && opts.config.is_none() {
                    opts.or(parse_config(Path::new(COMPARE_DEFAULT.0), COMPARE_DEFAULT.1)?)
                } else {
                    opts
                };
                (Some(Command::Compare), opts)
            }
            Some(KgeCommand::Eval(sub)) => (Some(Command::Eval), (*sub).or(opts)),
            Some(KgeCommand::Synth(s)) => {
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
                    out,
                    seed: s.seed.or(opts.seed).unwrap_or(0),
                };
                (Some(synth), opts)
            }
        };
        let opts = opts.resolve(config)?;
        let cfg = opts.config();
        if let Some(Command::Synth { entities, triples, relations, .. }) = &command {
            crate::options::count("--entities", *entities as usize, u32::MAX as usize)?;
            crate::options::count("--relations", *relations as usize, u32::MAX as usize)?;
            if !(1..=MAX_SYNTH_TRIPLES).contains(triples) {
                let why = format!("must be in 1..={MAX_SYNTH_TRIPLES}");
                return Err(OptionError::new("--triples", triples, why).into());
            }
            return Ok(Plan { command, opts, cfg, pm: None });
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
        Ok(Plan { command, opts, cfg, pm })
    }

    /// The modes this plan trains, in order.
    fn modes(&self) -> Vec<Mode> {
        match self.command {
            Some(Command::Compare) => Mode::ALL.to_vec(),
            _ => vec![self.opts.mode()],
        }
    }

    /// [`KgeOpts::check_memory`] for this plan on `d`; nothing to check for `eval` (it holds
    /// the saved tables, which `--load` sizes) or `synth`.
    fn check_memory(&self, d: &Dataset, budget: Budget) -> Result<(), OptionError> {
        match self.command {
            Some(Command::Eval | Command::Synth { .. }) => Ok(()),
            _ => self
                .opts
                .check_memory(&self.cfg, d, self.pm.as_ref(), &self.modes(), budget)
                .map(|_| ()),
        }
    }
}

/// One training run as the CLI's flags describe it, for a caller that drives the training
/// itself (the Python package's `ordo.kge.train`, which turns its keyword arguments into
/// these flags): parsed by the same clap struct and checked as `ordo-train kge` checks them,
/// so the flags stay the one list of options and a misspelt one is the CLI's own error. Its
/// output directories (`--save`, `--checkpoint`, `--resume`, `--out`) are locked, checked and
/// written by the CLI's own code too: [`RunPlan::prepare`] before training,
/// [`Prepared::finish`] after.
#[derive(Debug)]
pub struct RunPlan {
    /// `--dataset`: an embedded name or a directory.
    pub dataset: String,
    /// The training configuration.
    pub config: TrainConfig,
    /// `--mode`.
    pub mode: Mode,
    /// `--save`, if given.
    pub save: Option<PathBuf>,
    /// The options, for the output directories and the memory limit.
    opts: KgeOpts,
}

/// Parse and check `flags` (without the program and `kge`) as `ordo-train kge FLAGS` does, for
/// one run in one process, its table in memory: a subcommand, `--pm`, `--load` and `--storage`
/// are refused ([`ConfigError::Unsupported`]).
pub fn plan_run<T: Into<std::ffi::OsString>>(
    flags: impl IntoIterator<Item = T>,
) -> Result<RunPlan, BoxError> {
    #[derive(clap::Parser)]
    #[command(name = "kge")]
    struct Flags {
        #[command(flatten)]
        args: KgeArgs,
    }
    let argv = std::iter::once("kge".into()).chain(flags.into_iter().map(Into::into));
    let Flags { args } = <Flags as clap::Parser>::try_parse_from(argv)?;
    let plan = Plan::new(args, read_config, None)?;
    let o = &plan.opts;
    // `--storage` (the table in partitions) is a run of its own kind (`run_partitioned`), not
    // a session over an in-memory table: refused rather than silently trained in memory.
    if plan.command.is_some()
        || plan.pm.is_some()
        || o.load.is_some()
        || o.partition_opts(false)?.is_some()
    {
        return Err(ConfigError::Unsupported(
            "one run in one process, its table in memory: no subcommand, --pm, --load or --storage",
        )
        .into());
    }
    Ok(RunPlan {
        dataset: o.dataset().to_string(),
        config: plan.cfg,
        mode: o.mode(),
        save: o.save.clone(),
        opts: plan.opts,
    })
}

impl RunPlan {
    /// What `ordo-train kge` does between loading the dataset `d` and training, in its order:
    /// the device checked, the run's memory estimated against the limit, the options checked by
    /// building the model, the output directories locked (a checkpoint to resume checked
    /// first, `--out` marked incomplete), and the checkpoint to resume read.
    pub fn prepare(&self, d: &Dataset) -> Result<Prepared, BoxError> {
        let (o, cfg) = (&self.opts, &self.config);
        check_device(cfg.device).map_err(TrainError::Cuda)?;
        o.check_memory(cfg, d, None, &[self.mode], Budget::of_process(o.memory_limit))?;
        cfg.init_model(d)?;
        let same = |dir: &PathBuf, _: Mode| dir.clone();
        let (held, out) = hold_outputs(o, d, cfg, &[self.mode], &same)?;
        let resumable = resumable(o, d, cfg, self.mode, &same)?;
        Ok(Prepared { resumable, save: o.save.clone(), out, held })
    }
}

/// A [`RunPlan`] ready to train: its output directories locked (until [`Prepared::finish`] or a
/// drop) and its checkpointing, the checkpoint to resume read.
#[derive(Debug)]
pub struct Prepared {
    /// `--checkpoint`, `--checkpoint-every` and the `--resume` checkpoint, for
    /// [`train_resumable`] (take it with `std::mem::take`).
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

/// In-memory inputs of [`check`]: what `--config`, `--dataset` and the like would read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    /// The text of the `--config` file, if one is named.
    pub config: &'a str,
    /// `train.txt`, `valid.txt` and `test.txt` of the dataset.
    pub dataset: [&'a str; 3],
}

/// Everything [`run`] does before work starts, with no side effect: parse the options, read
/// `--config` and the dataset from `inputs` instead of files, validate every option and check
/// the run's memory against `budget`. `Ok` means `run` would start training (or writing a
/// synthetic graph); an `Err` is what `run` would refuse with. Used by the fuzz target.
pub fn check(args: KgeArgs, inputs: &Inputs<'_>, budget: Budget) -> Result<(), BoxError> {
    let plan = Plan::new(args, |_| Ok(inputs.config.to_string()), None)?;
    if let Some(Command::Synth { .. }) = plan.command {
        return Ok(());
    }
    let d = Dataset::from_strs("input", inputs.dataset)?;
    plan.check_memory(&d, budget)?;
    Ok(())
}

/// Run `ordo-train kge`.
pub fn run(args: KgeArgs) -> Result<(), BoxError> {
    let launch = mpi_launch();
    let plan = Plan::new(args, read_config, launch)?;
    let (o, cfg) = (&plan.opts, plan.cfg);
    if let Some(Command::Synth { entities, triples, relations, out, seed }) = &plan.command {
        crate::kge::data::synth::write(out, *entities, *relations, *triples, *seed)?;
        println!("wrote {triples} triples over {entities} entities to {}", out.display());
        return Ok(());
    }
    let pm = plan.pm;
    // Before anything is read or written: a run asked for a GPU must not fall back or half-run.
    check_device(cfg.device).map_err(TrainError::Cuda)?;
    // Under mpirun only rank 0 of a --pm run prints (errors aside).
    let silent = pm.is_some() && launch.is_some_and(|(rank, _)| rank != 0);
    let d = Dataset::load_with_progress(o.dataset(), !o.quiet && !silent)?;
    if !silent {
        eprintln!("{}", d.summary());
    }
    if let Some(popts) = o.partition_opts(plan.command.is_some())? {
        // The table is on disk: the in-memory estimate does not apply.
        // The save's directory is locked before anything trains (busy or unwritable: now).
        let mut held = Held::default();
        if let Some(dir) = &o.save {
            held.hold(dir, false)?;
        }
        return run_partitioned(&d, &cfg, &popts, plan.opts.mode(), o.save.as_deref());
    }
    plan.check_memory(&d, Budget::of_process(o.memory_limit))?;
    if let Some(Command::Eval) = plan.command {
        let dir = o.load.as_ref().ok_or("kge eval needs --load DIR")?;
        let saved = npy::load(dir, &d)?;
        // Trained on this train.txt (names alone do not say: lines swapped keep every id).
        if let Some(m) = &saved.manifest {
            m.check_train(dir, &d).map_err(NpyError::from)?;
        }
        if saved.manifest.is_none() {
            eprintln!(
                "note: {} has no manifest.json (a save of format 0, from before manifests): loaded \
                 without checksums or its model; its names were checked",
                dir.display()
            );
        }
        let score = saved.model(dir, o.model, cfg.score)?;
        let m = npy::evaluate_loaded(&d, score, &saved.entities, &saved.relations)?;
        println!("test  {}", test_metrics(&d, &m));
        return Ok(());
    }
    if let Some(pm) = pm {
        let out = Output { quiet: o.quiet, silent };
        return run_pm(&d, &cfg, pm, out, launch.is_some());
    }
    let modes = plan.modes();
    let subcommand = plan.command.is_some();
    // With compare, each mode has its own directory under each of --save, --checkpoint and
    // --resume.
    let per_mode = |dir: &PathBuf, mode: Mode| {
        if subcommand { dir.join(mode.name()) } else { dir.clone() }
    };
    // Before any output is touched: the checkpoints to resume (locked, then checked without
    // their tables); then every output directory, locked for the whole run (an unwritable or
    // busy one is found here, not after training).
    // The options are checked (by building the model's small relation table once) before any
    // output is touched.
    cfg.init_model(&d)?;
    let (held, out_lock) = hold_outputs(o, &d, &cfg, &modes, &per_mode)?;
    println!(
        "{:?} dim {}{} · {:?} loss · batch {} · {} negatives/side (chunks of {}, {:?}) · {:?} lr {} · init {:?} {} · {:?} {} · {} epochs · seed {} · {:?}",
        cfg.score,
        cfg.dim,
        if cfg.reciprocal { " (reciprocal)" } else { "" },
        cfg.loss,
        cfg.batch_size,
        cfg.negatives,
        cfg.chunk,
        cfg.neg_sampling,
        cfg.optimizer,
        cfg.lr,
        cfg.init,
        cfg.init_scale,
        cfg.regularizer,
        cfg.reg,
        cfg.epochs,
        cfg.seed,
        cfg.device
    );
    let repeats = o.repeats();
    // With --repeat (checked: nothing is written then), each comparison's rows and which modes
    // matched sync to the bit; the parameters themselves are dropped after each comparison.
    let mut runs = Vec::new();
    for rep in 1..=repeats {
        if repeats > 1 {
            println!("\n=== comparison {rep} of {repeats} ===");
        }
        let results = train_modes(o, &d, &cfg, &modes, &per_mode)?;
        if results.len() > 1 && d.valid.is_empty() {
            println!("\nno validation split: no time-to-accuracy comparison");
        } else if results.len() > 1 {
            print_comparison(&results, d.train.len());
        }
        if let Some(lock) = &out_lock {
            let out = lock.dir();
            write_out(lock, &d, &cfg, &results)?;
            println!(
                "wrote {}/{{metrics.csv, mrr_vs_time.png, mrr_vs_epoch.png, COMPLETE}}",
                out.display()
            );
        }
        if repeats > 1
            && let Some(sync) = results.iter().find(|r| r.mode == Mode::Sync)
            && let Some((_, rows)) = compare::compare(&results, d.train.len())
        {
            runs.push((rows, compare::same_bits_as(sync, &results)));
        }
    }
    if repeats > 1 {
        print!("\n{}", compare::repeated_text(&compare::repeated(&runs)));
    }
    drop(held);
    Ok(())
}

/// Train each of `modes` in turn on `d` (one comparison, or the single run of `kge`), printing
/// each mode's epochs and test metrics, and saving its embeddings under --save.
fn train_modes(
    o: &KgeOpts,
    d: &Dataset,
    cfg: &TrainConfig,
    modes: &[Mode],
    per_mode: &DirOf<'_>,
) -> Result<Vec<RunResult>, BoxError> {
    let mut results = Vec::new();
    for &mode in modes {
        println!("\n== mode {} ==", mode.name());
        if cfg.eval_sample > 0 {
            println!("(valid and test MRR: sampled ranking against {} entities)", cfg.eval_sample);
        }
        if d.valid.is_empty() {
            println!("no validation split (valid.txt has no triple): valid MRR is not computed");
        }
        println!("{:>5} {:>8} {:>9} {:>10}", "epoch", "wall s", "loss", "valid MRR");
        let resumable = resumable(o, d, cfg, mode, per_mode)?;
        let has_valid = !d.valid.is_empty();
        let r = train_with_progress(d, cfg, mode, resumable, o.quiet, has_valid)?;
        println!(
            "test ({}{}): {}  ({:.0} triples/s)",
            mode.name(),
            if cfg.eval_sample > 0 {
                format!(", sampled ranking against {} entities", cfg.eval_sample)
            } else {
                String::new()
            },
            test_metrics(d, &r.test),
            r.triples_per_s(d.train.len())
        );
        if mode == Mode::Oac {
            println!(
                "oac: validation replaced {} stale row reads with newer values from its cache",
                r.rows_replaced
            );
        }
        if let Some(dir) = &o.save {
            let dir = per_mode(dir, mode);
            npy::save(&dir, d, cfg, &r)?;
            println!("saved embeddings to {}", dir.display());
        }
        results.push(r);
    }
    Ok(results)
}

/// Where each mode of a run writes under an output directory the options name: the directory
/// itself, or (with `compare`) its subdirectory named after the mode.
type DirOf<'a> = dyn Fn(&PathBuf, Mode) -> PathBuf + 'a;

/// What `ordo-train kge` does with its output directories before training, in its order: the
/// checkpoints to resume, locked, then checked without their tables; then every directory to
/// write (`--checkpoint`, `--save`), locked for the whole run, and `--out`, locked and marked
/// incomplete. An unwritable or busy directory is found here, not after training.
fn hold_outputs(
    o: &KgeOpts,
    d: &Dataset,
    cfg: &TrainConfig,
    modes: &[Mode],
    dir_of: &DirOf<'_>,
) -> Result<(Held, Option<OutputLock>), BoxError> {
    let mut held = Held::default();
    if let Some(dir) = &o.resume {
        for &mode in modes {
            held.hold(&dir_of(dir, mode), true)?;
            Checkpoint::verify(&dir_of(dir, mode), d, cfg)?;
        }
    }
    for dir in [&o.checkpoint, &o.save].into_iter().flatten() {
        for &mode in modes {
            held.hold(&dir_of(dir, mode), false)?;
        }
    }
    // A save's size is known now (entities and relations, inverse ones at most): a disk too
    // full for it is found before training.
    if let Some(dir) = &o.save {
        let sc = cfg.step_config();
        let floats = d.entities.len() * cfg.dim + 2 * d.relations.len() * sc.relation_dim();
        for &mode in modes {
            npy::ensure_space(&dir_of(dir, mode), d, floats)?;
        }
    }
    let out_lock = o.out.as_deref().map(OutputLock::take_out).transpose()?;
    Ok((held, out_lock))
}

/// The checkpointing of `mode`'s run: `--checkpoint` and `--checkpoint-every`, and the
/// `--resume` checkpoint read (tables included) and checked against the run.
fn resumable(
    o: &KgeOpts,
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    dir_of: &DirOf<'_>,
) -> Result<Resumable, BoxError> {
    Ok(Resumable {
        checkpoint: o.checkpoint.as_ref().map(|dir| dir_of(dir, mode)),
        every: o.checkpoint_every.unwrap_or(0),
        resume: match &o.resume {
            Some(dir) => Some(Checkpoint::read(&dir_of(dir, mode), d, cfg)?),
            None => None,
        },
        stop: None,
    })
}

/// `--out`: the CSV and the plots of `results`, then `COMPLETE`.
fn write_out(
    lock: &OutputLock,
    d: &Dataset,
    cfg: &TrainConfig,
    results: &[RunResult],
) -> Result<(), BoxError> {
    let title = format!("{} · {:?} dim {}", d.name, cfg.score, cfg.dim);
    plot::write_outputs(lock.dir(), &title, results)?;
    lock.complete()?;
    Ok(())
}

fn train_with_progress(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    resumable: Resumable,
    quiet: bool,
    has_valid: bool,
) -> Result<RunResult, BoxError> {
    let style =
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} batches {elapsed}")
            .expect("valid template")
            .progress_chars("=> ");
    // One bar, reset each epoch; the engine's device stage advances it as it steps batches.
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0).with_style(style) };
    let ticks: Arc<dyn Observer> = Arc::new(Ticks(bar.clone()));
    let tune = move |c: EngineConfig| c.observe(ticks.clone());
    let mut observe = |e: Event<'_>| match e {
        Event::EpochStart { epoch, batches } => {
            bar.reset();
            bar.set_length(batches as u64);
            bar.set_prefix(format!("{} ep {epoch}", mode.name()));
        }
        Event::Batches(_) => {}
        Event::EpochEnd(s) => bar.suspend(|| print_epoch(s, has_valid)),
    };
    let r = train_resumable(
        d,
        cfg,
        mode,
        resumable,
        &mut observe,
        (!quiet).then_some(&tune as &Tune<'_>),
    );
    bar.finish_and_clear();
    Ok(r?)
}

/// What a run prints: nothing at all when `silent` (an MPI rank other than 0), no progress bar
/// when `quiet`.
#[derive(Debug, Clone, Copy)]
struct Output {
    quiet: bool,
    silent: bool,
}

/// `--pm`: train over the in-process AdaPM cluster, or (`on_mpi`) as this rank's node of the MPI
/// job; print the `pm:` line and the test metrics unless `out.silent`.
fn run_pm(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    out: Output,
    on_mpi: bool,
) -> Result<(), BoxError> {
    if !out.silent {
        println!(
            "pm {} · {} nodes{} · intent offset {} · {} negatives · {:?} dim {} · batch {} · {} epochs · seed {}",
            pm.mode,
            pm.nodes,
            if on_mpi { " (MPI ranks)" } else { "" },
            pm.intent_offset,
            pm.negatives.name(),
            cfg.score,
            cfg.dim,
            cfg.batch_size,
            cfg.epochs,
            cfg.seed
        );
    }
    let style =
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} batches {elapsed}")
            .expect("valid template")
            .progress_chars("=> ");
    let bar = if out.quiet || out.silent {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0).with_style(style)
    };
    bar.set_prefix(pm.mode.name());
    let r = if on_mpi {
        train_pm_on_mpi(d, cfg, pm, &bar)
    } else {
        train_pm(d, cfg, pm, &bar).map(Some)
    };
    bar.finish_and_clear();
    if let Some(r) = r? {
        print_pm_run(&r, pm, d);
    }
    Ok(())
}

/// Under mpirun: this rank's node of the MPI job (`Some` on rank 0). Without the `mpi` feature
/// [`KgeOpts::pm_config`] has refused `--pm` under mpirun before this is reached.
fn train_pm_on_mpi(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    bar: &ProgressBar,
) -> Result<Option<PmRun>, PmTrainError> {
    #[cfg(feature = "mpi")]
    return crate::kge::backends::pm::train_pm_mpi(d, cfg, pm, bar);
    #[cfg(not(feature = "mpi"))]
    train_pm(d, cfg, pm, bar).map(Some)
}

fn print_pm_run(r: &PmRun, pm: PmConfig, d: &Dataset) {
    println!(
        "trained in {:.2} s ({:.0} triples/s), mean loss {:.4}",
        r.wall_s,
        r.triples_per_s(),
        r.loss
    );
    println!("{}", r.stats_line());
    println!("test ({}): {}", pm.mode, test_metrics(d, &r.test));
}

/// Advances the progress bar as the device stamps batches.
struct Ticks(ProgressBar);

impl Observer for Ticks {
    fn stamped(&self, _: &Stamp) {
        self.0.inc(1);
    }
}

/// An epoch's line; the valid MRR column reads `-` without a validation split.
fn print_epoch(s: &EpochStats, has_valid: bool) {
    let mrr = if has_valid { format!("{:.4}", s.valid.mrr) } else { "-".to_string() };
    println!("{:>5} {:>8.2} {:>9.4} {:>10}", s.epoch, s.wall_s, s.loss, mrr);
}

/// The test metrics, or that there are none: an empty `test.txt` has no mean to print.
fn test_metrics(d: &Dataset, m: &crate::kge::eval::ranking::Metrics) -> String {
    if d.test.is_empty() {
        return "no test split (test.txt has no triple): no test metrics".to_string();
    }
    format!(
        "MRR {:.4}  Hits@1 {:.4}  Hits@3 {:.4}  Hits@10 {:.4}",
        m.mrr, m.hits1, m.hits3, m.hits10
    )
}

/// `kge --storage`: train with the entity table in a partition buffer; print each epoch's
/// validation MRR, the I/O and the test metrics, all evaluated from the storage; with `save`,
/// save the embeddings streamed from it partition by partition (the caller holds its lock).
fn run_partitioned(
    d: &Dataset,
    cfg: &TrainConfig,
    opts: &PartitionOpts,
    mode: Mode,
    save: Option<&std::path::Path>,
) -> Result<(), BoxError> {
    let sampled = if cfg.eval_sample > 0 {
        format!(", sampled ranking against {} entities", cfg.eval_sample)
    } else {
        String::new()
    };
    let mut print = |e: partitioned::Event| {
        let partitioned::Event::Epoch { epoch, batches, seconds, io_wait, valid, eval_seconds } = e;
        let valid = valid.map_or(String::new(), |m| {
            format!("; valid MRR {:.4}{sampled} ({eval_seconds:.2} s)", m.mrr)
        });
        println!(
            "epoch {epoch}: {batches} batches in {seconds:.2} s, I/O wait {:.2} s ({:.1}%){valid}",
            io_wait.as_secs_f64(),
            100.0 * io_wait.as_secs_f64() / seconds.max(1e-9)
        );
    };
    let run = partitioned::train(d, cfg, opts, mode.engine_mode(cfg), &mut print)?;
    let cost = run.cost();
    let g = run.storage.geometry();
    let part_bytes = g.file_len(0);
    let epochs = run.orders.len().max(1) as u64;
    println!(
        "storage {:?}: {} partitions, buffer {}; {} swaps per epoch (lower bound {}); read {} bytes per epoch (lower bound {}); I/O wait {:.2} s of {:.2} s",
        opts.storage,
        g.partitions,
        opts.buffer,
        cost.swaps,
        cost.lower_bound_swaps,
        run.io.bytes_read / epochs,
        cost.lower_bound_bytes(part_bytes, opts.buffer),
        run.io.wait.as_secs_f64(),
        run.train_time.as_secs_f64()
    );
    println!("test ({}{sampled}): {}", mode.name(), test_metrics(d, &run.test));
    if let Some(dir) = save {
        let entities = partitioned::StoredEntities { storage: &run.storage, dim: cfg.dim };
        let relations = (run.model.relations(), cfg.step_config().relation_dim());
        npy::save_parts(dir, d, cfg, &entities, relations)?;
        println!("saved embeddings to {} (streamed from the storage)", dir.display());
    }
    Ok(())
}

/// The time-to-accuracy summary: each mode against 95% of sync's best valid MRR.
fn print_comparison(results: &[RunResult], n_train: usize) {
    if let Some((target, rows)) = compare::compare(results, n_train) {
        print!("\n{}", compare::text(target, &rows));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kge: KgeArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, BoxError> {
        let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied())).unwrap();
        Plan::new(cli.kge, read_config, None)
    }

    /// `kge compare` alone runs the embedded WordNet profile; any flag overrides its line, and
    /// --dataset or --config replaces the profile (UMLS's defaults then, as for `kge`).
    #[test]
    fn compare_without_a_dataset_runs_the_embedded_wordnet_profile() {
        let p = plan(&["compare"]).unwrap();
        assert_eq!((p.opts.dataset(), p.cfg.dim, p.cfg.epochs), ("wordnet30", 96, 10));
        assert_eq!((p.cfg.batch_size, p.cfg.negatives, p.cfg.chunk), (256, 64, 16));
        let p = plan(&["compare", "--dim", "8"]).unwrap();
        assert_eq!((p.opts.dataset(), p.cfg.dim, p.cfg.epochs), ("wordnet30", 8, 10));
        let p = plan(&["--epochs", "3", "compare"]).unwrap();
        assert_eq!((p.opts.dataset(), p.cfg.epochs), ("wordnet30", 3), "a flag before it too");
        let p = plan(&["compare", "--dataset", "umls"]).unwrap();
        let single = plan(&[]).unwrap();
        assert_eq!((p.opts.dataset(), p.cfg.dim), ("umls", single.cfg.dim));
        assert_eq!(single.opts.dataset(), "umls", "`kge` alone keeps UMLS");
    }

    #[test]
    fn bad_storage_flags_are_refused_before_anything_is_read_or_written() {
        let dir = std::env::temp_dir().join(format!("ordo-kge-cli-storage-{}", std::process::id()));
        let d = dir.to_str().unwrap();
        let err =
            plan(&["--storage", "disk", "--storage-dir", d, "--partitions", "4", "--buffer", "5"]);
        let err = err.err().expect("a buffer larger than the partitions");
        assert!(err.to_string().contains("--buffer"), "{err}");
        assert!(!dir.exists(), "nothing written");
        let err = plan(&["--storage", "disk"]).err().expect("no folder");
        assert!(err.to_string().contains("--storage-dir"), "{err}");
        let err = plan(&["--buffer", "2"]).err().expect("no storage");
        assert!(err.to_string().contains("need --storage"), "{err}");
        let err = plan(&["--storage", "memory", "--pm", "adapm"]).err().expect("with --pm");
        assert!(err.to_string().contains("--pm"), "{err}");
        let err = plan(&["--storage", "memory", "--load", d]).err().expect("with --load");
        assert!(err.to_string().contains("--load"), "{err}");
        // --save streams the embeddings from the storage: accepted.
        let saving = plan(&["--storage", "memory", "--save", d]).unwrap();
        assert!(saving.opts.partition_opts(false).unwrap().is_some());
        let ok =
            plan(&["--storage", "disk", "--storage-dir", d, "--partitions", "8", "--buffer", "2"])
                .unwrap();
        let p = ok.opts.partition_opts(false).unwrap().unwrap();
        assert_eq!((p.partitions, p.buffer, p.storage), (8, 2, StorageKind::Disk));
        assert!(!dir.exists(), "planning writes nothing");
    }

    /// A negative sampling a run would not do is refused before the dataset is read: the runs
    /// that draw their own negatives (the partition buffer; the PM's local negatives, its
    /// default) take only uniform ones, and distinct negatives lay a batch's rows out
    /// unsorted, which the PM and the GPU's cache do not take.
    #[test]
    fn negative_samplings_are_refused_where_they_cannot_run() {
        for with in [&["--storage", "memory"][..], &["--pm", "adapm"]] {
            let args = [&["--neg-sampling", "batch"][..], with].concat();
            let err = plan(&args).err().expect("refused");
            assert!(err.to_string().starts_with("--neg-sampling batch: does not go with"), "{err}");
        }
        let global = ["--neg-sampling", "batch", "--pm", "adapm", "--pm-negatives", "global"];
        assert_eq!(plan(&global).unwrap().cfg.neg_sampling, NegSampling::Batch);
        for (with, named) in [
            (&["--pm", "adapm"][..], "--pm"),
            (&["--storage", "memory"], "--storage"),
            (&["--device", "cuda"], "--device cuda"),
        ] {
            let args = [&["--neg-sampling", "distinct"][..], with].concat();
            let err = plan(&args).err().expect("refused");
            assert!(err.to_string().contains(&format!("does not go with {named}")), "{err}");
        }
        let p = plan(&["--neg-sampling", "distinct"]).unwrap();
        assert_eq!(p.cfg.neg_sampling, NegSampling::Distinct);
    }

    fn pm(args: &[&str], launch: Option<(usize, usize)>) -> Result<Option<PmConfig>, ConfigError> {
        let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied())).unwrap();
        cli.kge.opts.resolve(read_config)?.pm_config(false, launch)
    }

    #[test]
    fn plan_run_takes_the_cli_flags_and_refuses_what_one_run_cannot_do() {
        let plan = plan_run(["--dim", "20", "--mode", "sync", "--save", "x"]).unwrap();
        assert_eq!((plan.config.dim, plan.mode, plan.dataset.as_str()), (20, Mode::Sync, "umls"));
        assert_eq!(plan.save, Some(PathBuf::from("x")));
        let clap = |r: Result<RunPlan, BoxError>| r.unwrap_err().downcast::<clap::Error>().is_ok();
        assert!(clap(plan_run(["--dimm", "20"])), "a misspelt flag is clap's error");
        assert!(plan_run(["--dim", "0"]).is_err(), "checked as the CLI checks it");
        let kept = plan_run(["--checkpoint", "c", "--resume", "r", "--out", "o"]).unwrap();
        let o = &kept.opts;
        assert_eq!(
            (o.checkpoint.as_deref(), o.resume.as_deref()),
            (Some("c".as_ref()), Some("r".as_ref()))
        );
        assert_eq!(o.out.as_deref(), Some("o".as_ref()), "--out is the plan's, written by finish");
        let disk = ["--storage", "disk", "--storage-dir", "x"];
        for refused in [&["compare"][..], &["--load", "x"], &["--pm", "adapm"], &disk] {
            let e = plan_run(refused.iter().copied()).unwrap_err();
            assert!(
                matches!(e.downcast_ref(), Some(ConfigError::Unsupported(_))),
                "{refused:?}: {e}"
            );
        }
    }

    #[test]
    fn the_intent_offset_defaults_to_2_and_a_given_one_is_kept() {
        let one = pm(&["--pm", "adapm", "--pm-nodes", "4"], None).unwrap().unwrap();
        assert_eq!(one.intent_offset, INTENT_OFFSET);
        let given = pm(&["--pm", "adapm", "--intent-offset", "5"], None).unwrap().unwrap();
        assert_eq!(given.intent_offset, 5);
        let ranks = pm(&["--pm", "adapm"], Some((0, 4)));
        if cfg!(feature = "mpi") {
            let ranks = ranks.unwrap().unwrap();
            assert_eq!((ranks.nodes, ranks.intent_offset), (4, INTENT_OFFSET));
        } else {
            assert!(matches!(ranks, Err(ConfigError::Unsupported(_))), "mpirun needs the feature");
        }
    }

    /// What a plan runs, as `name=value` entries: the command, the dataset, every field of
    /// the training configuration, the modes, the PM and storage runs, the outputs and the
    /// remaining options. Two plans with the same entries run the same.
    fn run_of(p: &Plan) -> std::collections::BTreeMap<String, String> {
        let mut m = std::collections::BTreeMap::new();
        let command = match &p.command {
            None => "train".to_string(),
            Some(Command::Compare) => "compare".to_string(),
            Some(Command::Eval) => "eval".to_string(),
            Some(Command::Synth { entities, triples, relations, out, seed }) => {
                format!("synth {entities} {triples} {relations} {} {seed}", out.display())
            }
        };
        m.insert("command".to_string(), command);
        let cfg = format!("{:?}", p.cfg);
        let fields = cfg.strip_prefix("TrainConfig { ").and_then(|c| c.strip_suffix(" }"));
        for field in fields.expect("TrainConfig's Debug").split(", ") {
            let (k, v) = field.split_once(": ").expect("name: value");
            m.insert(format!("cfg.{k}"), v.to_string());
        }
        let o = &p.opts;
        let partition = o.partition_opts(p.command.is_some()).map_err(|e| e.to_string());
        for (k, v) in [
            ("dataset", o.dataset().to_string()),
            ("modes", format!("{:?}", p.modes())),
            ("pm", format!("{:?}", p.pm)),
            ("storage", format!("{partition:?}")),
            ("out", format!("{:?}", o.out)),
            ("save", format!("{:?}", o.save)),
            ("load", format!("{:?}", o.load)),
            ("checkpoint", format!("{:?}", o.checkpoint)),
            ("checkpoint_every", format!("{:?}", o.checkpoint_every.unwrap_or(0))),
            ("resume", format!("{:?}", o.resume)),
            ("memory_limit", format!("{:?}", o.memory_limit)),
            ("repeats", o.repeats().to_string()),
            ("quiet", o.quiet.to_string()),
        ] {
            m.insert(k.to_string(), v);
        }
        m
    }

    /// Argument vectors of `kge` (each with the same options as a `--config` file where they
    /// have one), whose runs `train/tests/fixtures/kge_runs.txt` records: written from the CLI before the run
    /// layer moved into the library, so a flag or key whose meaning changes fails here.
    const RUNS: &[(&[&str], Option<&str>)] = &[
        (&["--dataset", "nations"], Some("dataset = \"nations\"")),
        (&["--model", "distmult"], Some("model = \"distmult\"")),
        (&["--loss", "margin"], Some("loss = \"margin\"")),
        (&["--margin", "2.5"], Some("margin = 2.5")),
        (&["--dim", "8"], Some("dim = 8")),
        (&["--epochs", "3"], Some("epochs = 3")),
        (&["--batch-size", "64"], Some("batch-size = 64")),
        (&["--negatives", "7"], Some("negatives = 7")),
        (&["--chunk", "4"], Some("chunk = 4")),
        (&["--neg-sampling", "batch"], Some("neg-sampling = \"batch\"")),
        (&["--neg-sampling", "distinct"], Some("neg-sampling = \"distinct\"")),
        (&["--reciprocal"], Some("reciprocal = true")),
        (&["--reciprocal", "false"], Some("reciprocal = false")),
        (&["--lr", "0.05"], Some("lr = 0.05")),
        (&["--optimizer", "adam"], Some("optimizer = \"adam\"")),
        (&["--regularizer", "n3"], Some("regularizer = \"n3\"")),
        (&["--reg-weight", "0.01"], Some("reg-weight = 0.01")),
        (&["--reg", "0.01"], None),
        (&["--init", "xavier"], Some("init = \"xavier\"")),
        (&["--init-scale", "0.3"], Some("init-scale = 0.3")),
        (&["--seed", "9"], Some("seed = 9")),
        (&["--mode", "bounded"], Some("mode = \"bounded\"")),
        (&["--threads", "2"], Some("threads = 2")),
        (&["--staleness", "6"], Some("staleness = 6")),
        (&["--eval-limit", "50"], Some("eval-limit = 50")),
        (&["--eval-sample", "20"], Some("eval-sample = 20")),
        (&["--out", "o"], Some("out = \"o\"")),
        (&["--save", "s"], Some("save = \"s\"")),
        (&["--device", "cuda"], Some("device = \"cuda\"")),
        (&["--checkpoint", "c"], Some("checkpoint = \"c\"")),
        (&["--checkpoint-every", "2"], Some("checkpoint-every = 2")),
        (&["--resume", "r"], Some("resume = \"r\"")),
        (
            &[
                "--pm",
                "adapm",
                "--pm-nodes",
                "3",
                "--intent-offset",
                "5",
                "--pm-negatives",
                "global",
            ],
            Some("pm = \"adapm\"\npm-nodes = 3\nintent-offset = 5\npm-negatives = \"global\""),
        ),
        (&["--pm", "static"], Some("pm = \"static\"")),
        (&["--memory-limit", "1G"], Some("memory-limit = 1073741824")),
        (
            &["--storage", "disk", "--storage-dir", "d", "--partitions", "8", "--buffer", "2"],
            Some("storage = \"disk\"\nstorage-dir = \"d\"\npartitions = 8\nbuffer = 2"),
        ),
        (&["--storage", "memory"], Some("storage = \"memory\"")),
        (&["--quiet"], None),
        (&["--dim", "8", "--config", "@"], Some("dim = 16\nepochs = 2")),
        (&["compare"], None),
        (&["compare", "--dim", "8"], None),
        (&["--epochs", "3", "compare"], None),
        (
            &["compare", "--dataset", "umls", "--repeat", "3"],
            Some("dataset = \"umls\"\nrepeat = 3"),
        ),
        (&["compare", "--save", "s"], Some("save = \"s\"")),
        (&["eval", "--load", "l"], Some("load = \"l\"")),
        (
            &["eval", "--load", "l", "--model", "transe-l1"],
            Some("load = \"l\"\nmodel = \"transe-l1\""),
        ),
        (&["synth", "--out", "g", "--entities", "5", "--triples", "7", "--relations", "3"], None),
        (&["--seed", "4", "--out", "g", "synth"], None),
        (&["--synth-missing"], None),
        // Refused.
        (&["--dim", "0"], Some("dim = 0")),
        (&["--dim", "7"], Some("dim = 7")),
        (&["--lr", "-1"], Some("lr = -1")),
        (&["--margin", "0"], Some("margin = 0")),
        (&["--threads", "100000"], Some("threads = 100000")),
        (&["--pm-nodes", "3"], Some("pm-nodes = 3")),
        (&["--pm", "adapm", "--mode", "sync"], Some("pm = \"adapm\"\nmode = \"sync\"")),
        (&["--pm", "adapm", "--save", "s"], Some("pm = \"adapm\"\nsave = \"s\"")),
        (&["--pm", "adapm", "--pm-nodes", "0"], Some("pm = \"adapm\"\npm-nodes = 0")),
        (&["--pm", "adapm", "--neg-sampling", "batch"], None),
        (&["--pm", "adapm", "--neg-sampling", "distinct", "--pm-negatives", "global"], None),
        (&["--storage", "memory", "--neg-sampling", "batch"], None),
        (&["--device", "cuda", "--neg-sampling", "distinct"], None),
        (&["--storage", "disk"], Some("storage = \"disk\"")),
        (&["--storage", "memory", "--storage-dir", "d"], None),
        (&["--storage", "memory", "--pm", "adapm"], None),
        (&["--storage", "memory", "--resume", "r"], None),
        (&["--buffer", "2"], Some("buffer = 2")),
        (&["--storage", "disk", "--storage-dir", "d", "--partitions", "4", "--buffer", "5"], None),
        (&["--repeat", "2"], Some("repeat = 2")),
        (&["compare", "--repeat", "0"], None),
        (&["compare", "--repeat", "2", "--out", "o"], None),
        (&["compare", "--repeat", "1001"], None),
        (&["eval"], None),
        (&["--load", "l"], Some("load = \"l\"")),
        (&["--intent-offset", "2000000", "--pm", "adapm"], None),
        (&["--memory-limit", "0"], None),
        (&["--epochs", "3", "synth", "--out", "g"], None),
        (&["synth"], None),
        (&["synth", "--out", "g", "--triples", "0"], None),
        (&["compare", "--pm", "adapm"], None),
        (&[], Some("dimm = 8")),
        (&[], Some("dim = \"eight\"")),
    ];

    /// Every row of [`RUNS`] as the CLI plans it (or refuses it), flags and then the same
    /// options from a config file, as `train/tests/fixtures/kge_runs.txt` records them: each row's entries that
    /// differ from `kge` alone's, which come first in full.
    #[test]
    fn every_flag_and_config_key_parses_to_the_same_run() {
        use std::fmt::Write;
        let dir = std::env::temp_dir().join(format!("ordo-kge-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = run_of(&plan(&[]).unwrap());
        let mut text = String::from("# kge\n");
        for (k, v) in &base {
            writeln!(text, "{k} = {v}").unwrap();
        }
        let file = dir.join("run.toml");
        let path = file.to_str().unwrap();
        let mut describe = |label: String, args: &[&str]| {
            writeln!(text, "\n# {label}").unwrap();
            let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied()));
            let planned = cli
                .map_err(|e| e.kind().to_string().into())
                .and_then(|cli| Plan::new(cli.kge, read_config, None));
            match planned {
                Err(e) => {
                    writeln!(text, "refused: {}", e.to_string().replace(path, "FILE")).unwrap()
                }
                Ok(p) => {
                    for (k, v) in run_of(&p) {
                        if base.get(&k) != Some(&v) {
                            writeln!(text, "{k} = {v}").unwrap();
                        }
                    }
                }
            }
        };
        for (flags, key) in RUNS {
            let flags: Vec<&str> = flags.iter().map(|f| if *f == "@" { path } else { f }).collect();
            if let Some(key) = key {
                std::fs::write(&file, key).unwrap();
            }
            describe(format!("kge {}", flags.join(" ").replace(path, "FILE")), &flags);
            let Some(key) = key else { continue };
            // The same options from a config file: only the subcommand stays on the command line.
            let sub: Vec<&str> =
                flags.iter().take_while(|f| !f.starts_with("--")).copied().collect();
            let args = [&sub[..], &["--config", path]].concat();
            let label = [&sub[..], &["--config FILE:"]].concat().join(" ");
            describe(format!("kge {label} {}", key.replace('\n', "; ")), &args);
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let want = include_str!("../../tests/fixtures/kge_runs.txt");
        if text != want {
            let at = std::env::temp_dir().join("kge_runs.txt");
            std::fs::write(&at, &text).unwrap();
            panic!("the runs differ from kge_runs.txt: see {} (diff the two)", at.display());
        }
        // Every flag clap knows, on `kge` and on each subcommand, has a row.
        let covered: std::collections::BTreeSet<&str> =
            RUNS.iter().flat_map(|(flags, _)| flags.iter().copied()).collect();
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut missing = Vec::new();
        for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
            for a in c.get_arguments() {
                let names = a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default());
                for long in names.map(|l| format!("--{l}")) {
                    if long != "--help" && !covered.contains(long.as_str()) {
                        missing.push(long);
                    }
                }
            }
        }
        missing.extend(cmd.get_subcommands().map(|c| c.get_name().to_string()));
        missing.retain(|f| !covered.contains(f.as_str()));
        assert!(missing.is_empty(), "flags without a row in RUNS: {missing:?}");
    }
}
