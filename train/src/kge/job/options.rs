//! The options of a `kge` run: [`Options`], the one list that is both the command line's flags
//! and a `--config` file's keys, and how a file's options merge under the flags.

use super::error::ConfigError;
use crate::kge::backends::partitioned::StorageKind;
use crate::kge::backends::pm::PmNegatives;
use crate::kge::data::batch::NegSampling;
use crate::kge::model::device::Device;
use crate::kge::model::init::Init;
use crate::kge::model::optim::Optimizer;
use crate::kge::model::precision::Precision;
use crate::kge::model::score::{Loss, Regularizer, ScoreFn};
use crate::kge::run::config::TrainConfig;
use crate::kge::run::mode::TrainMode;
use ordo_pm::PmMode;
use std::path::{Path, PathBuf};

/// `--intent-offset`'s default: 2 clocks ahead keeps all but 0.07% of accesses local with
/// in-process nodes (BENCHMARKS.md, AdaPM offset sweep). Not raised under mpirun, where 8 clocks
/// are needed on WordNet: on UMLS (135 entities, every key replicated on every node) intents
/// 8 clocks long kept replicas stale enough for a 4-rank run to miss 0.97x the single-process
/// MRR (0.8819 vs 0.9160, tests/e2e_pm.rs, once in two CI runs).
pub(crate) const INTENT_OFFSET: u64 = 2;

/// The largest `--intent-offset`: a million clocks is beyond any run's batches per epoch, and
/// a clock plus the offset must not overflow.
pub(super) const MAX_INTENT_OFFSET: usize = 1_000_000;

/// The most comparisons one `kge compare --repeat` runs (a day of the main job).
pub(super) const MAX_REPEAT: usize = 1000;

/// Options shared by all `kge` commands. Every training option may also come from
/// `--config FILE` (TOML, or JSON for a `.json` file; keys are the long flag names, e.g.
/// `batch-size = 1024`); a flag given on the command line overrides the file.
///
/// Each output directory (--save, --checkpoint, --out, and --resume's) is locked for the whole
/// run through the file `.NAME.lock` beside it, before training: a second run, or an unwritable
/// path, is refused then, naming the path (and the holder's pid).
#[derive(Debug, Default, clap::Args, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Options {
    /// Dataset: umls, kinships, nations, wordnet30 (embedded) or a directory with
    /// train/valid/test.txt [default: umls; `kge compare` without --dataset or --config runs
    /// wordnet30 with the options of train/configs/compare-wordnet30.toml].
    #[arg(long)]
    pub dataset: Option<String>,
    /// Scoring function [default: complex].
    #[arg(long, value_enum)]
    pub model: Option<ScoreFn>,
    /// Loss over each positive and its negatives [default: softmax].
    #[arg(long, value_enum)]
    pub loss: Option<Loss>,
    /// γ of the margin loss [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub margin: Option<f32>,
    /// Embedding floats per entity (ComplEx, RotatE: even; dim/2 complex numbers) [default: 100].
    #[arg(long)]
    pub dim: Option<usize>,
    /// Passes over the training triples [default: 25].
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Positives per batch [default: 128].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Negatives per positive, for each of head and tail corruption [default: 64].
    #[arg(long)]
    pub negatives: Option<usize>,
    /// Positives per chunk sharing one set of negatives (1 = no sharing) [default: 16].
    #[arg(long)]
    pub chunk: Option<usize>,
    /// Where the --negatives come from [default: uniform].
    #[arg(long, value_enum)]
    pub neg_sampling: Option<NegSampling>,
    /// In-batch negatives per positive and side besides the --negatives, drawn from the
    /// batch's own positives: no extra row reads (PyTorch-BigGraph's setting: --negatives 100
    /// --batch-negatives 50) [default: 0].
    #[arg(long)]
    pub batch_negatives: Option<usize>,
    /// Inverse relations: every query is a tail query, `(?, r, t)` asked as `(t, r⁻¹, ?)`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub reciprocal: Option<bool>,
    /// Learning rate [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    /// Optimizer (its state travels with each entity row) [default: adagrad].
    #[arg(long, value_enum)]
    pub optimizer: Option<Optimizer>,
    /// Regularizer on the embeddings each positive uses [default: l2].
    #[arg(long, value_enum)]
    pub regularizer: Option<Regularizer>,
    /// Regularizer weight per use of an embedding (0 = off) [default: 0].
    #[arg(long, alias = "reg", allow_negative_numbers = true)]
    pub reg_weight: Option<f32>,
    /// Initial distribution of the embeddings [default: uniform].
    #[arg(long, value_enum)]
    pub init: Option<Init>,
    /// Its scale: uniform bound, normal standard deviation or Xavier gain [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    pub init_scale: Option<f32>,
    /// Seed of initialization, shuffles and negatives [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Mode of a single run [default: oac].
    #[arg(long, value_enum)]
    pub mode: Option<TrainMode>,
    /// Engine reader threads and writer threads (each) [default: 1].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Staleness bound of --mode bounded (batches in flight) [default: 4].
    #[arg(long)]
    pub staleness: Option<usize>,
    /// Evaluate on at most the first this many valid and test triples (0 = all; for large sets)
    /// [default: 0].
    #[arg(long)]
    pub eval_limit: Option<usize>,
    /// Rank each answer against this many sampled entities instead of all (DGL-KE/PBG's
    /// evaluation for large graphs; printed as "sampled") [default: 0 = full ranking].
    #[arg(long)]
    pub eval_sample: Option<usize>,
    /// Write metrics.csv and the plots mrr_vs_time.png / mrr_vs_epoch.png here, then COMPLETE
    /// (the run id) once all are written: a directory without COMPLETE is partial or being
    /// written.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Save the final embeddings as this directory: entities.npy, relations.npy, their names
    /// (entities.txt, relations.txt) and manifest.json (run id, model, options, dataset, CRC-32
    /// of each file), replacing any previous save all at once; with compare, one subdirectory per
    /// mode.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Embeddings directory written by --save (for `kge eval` only; a training run refuses it).
    /// Its files are checked against manifest.json, its names against the dataset's (line by
    /// line), and its model against --model (which defaults to the saved one).
    #[arg(long)]
    pub load: Option<PathBuf>,
    /// How the entity rows (embeddings and optimizer state) are stored: f32, or bf16 (half
    /// the bytes per row; computed in f32, each written row rounded stochastically, keyed by
    /// seed, row and batch, so every mode and a resume give the same bits). bf16 is for the
    /// CPU step and the in-memory store: it does not go with --device cuda, --pm or
    /// --storage. Saves and checkpoints name it; a resume must give the same [default: f32].
    #[arg(long, value_enum)]
    pub precision: Option<Precision>,
    /// Where the training step runs: cpu, or cuda (ordo-gpu's kernels and device-side
    /// validation cache; checked first, fails with the reason when CUDA is not usable).
    /// Evaluation runs on the CPU either way [default: cpu].
    #[arg(long, value_enum)]
    pub device: Option<Device>,
    /// Write a checkpoint (embeddings, optimizer state, epoch, recorded order, manifest.json)
    /// to this directory every --checkpoint-every epochs and after the last, as epoch-NNNNNN/
    /// named by the file `latest`; with compare, one per mode.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Epochs between checkpoints (0 = only after the last) [default: 0].
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Continue the run checkpointed in this directory up to --epochs. Checked first: every
    /// file against manifest.json, the model, options, dataset sizes and training triples, the
    /// saved names against the dataset's (line by line), the epoch against its directory and
    /// records, and --epochs not below it.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Train with the parameters in AdaPM (or a baseline) over in-process nodes instead of the
    /// engine: adapm, static, replicate, no-relocation, no-replication, immediate.
    #[arg(long)]
    #[serde(default, deserialize_with = "pm_mode")]
    pub pm: Option<PmMode>,
    /// Nodes of --pm (one training thread each) [default: 2].
    #[arg(long)]
    pub pm_nodes: Option<usize>,
    /// Batches (clocks) ahead that --pm nodes signal intent [default: 2]. Under mpirun on a
    /// large graph use 8: messages between processes take longer than 2 clocks (BENCHMARKS.md,
    /// AdaPM on 4 MPI ranks).
    #[arg(long)]
    pub intent_offset: Option<u64>,
    /// Where --pm nodes draw negatives: local (among the keys the node holds, paper 002) or
    /// global (as the engine's runs) [default: local].
    #[arg(long, value_enum)]
    pub pm_negatives: Option<PmNegatives>,
    /// Refuse a run whose estimated memory exceeds this many bytes (a number, or with a K, M,
    /// G or T suffix) [default: the cgroup's limit, or else the available memory].
    #[arg(long, value_parser = crate::memory::parse_bytes)]
    pub memory_limit: Option<u64>,
    /// Keep the entity table in a partition buffer: disk (files in --storage-dir, --buffer of
    /// --partitions in memory) or memory (the in-memory twin: the same partitions and bucket
    /// order without a disk). A disk folder holding this run's checkpoint resumes it.
    #[arg(long, value_enum)]
    pub storage: Option<StorageKind>,
    /// The folder of the partition files of --storage disk.
    #[arg(long)]
    pub storage_dir: Option<PathBuf>,
    /// Partitions of the entity table with --storage [default: 16].
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Partitions held in memory with --storage (at least 2, at most --partitions) [default: 4].
    #[arg(long)]
    pub buffer: Option<usize>,
    /// With compare: run the whole comparison this many times, then print each mode's median
    /// and range over the runs and how many runs matched sync to the bit (one run's lead
    /// scatters by about 10%) [default: 1].
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Read options from this TOML (or `.json`) file; flags given here override it.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    #[serde(skip)]
    pub quiet: bool,
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
pub(super) fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })
}

/// Parse a config file's `text`: JSON if `path` ends in `.json`, TOML otherwise.
pub(super) fn parse_config(path: &Path, text: &str) -> Result<Options, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let parse = |message: String| ConfigError::Parse { path: path.to_path_buf(), message };
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).map_err(|e| parse(e.to_string()))
    } else {
        toml::from_str(text).map_err(|e| parse(e.to_string()))
    }
}

/// Calls macro `$m` with every `Option` field of [`Options`] (all but `config` and `quiet`):
/// the one list that [`Options::or`] merges and [`Options::given`] reports.
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
            batch_negatives,
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
            precision,
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

impl Options {
    /// These options with every unset one taken from `file`.
    pub(super) fn or(self, file: Options) -> Options {
        macro_rules! merged {
            ($($f:ident),*) => {
                Options {
                    $($f: self.$f.or(file.$f),)*
                    config: self.config.or(file.config),
                    quiet: self.quiet || file.quiet,
                }
            };
        }
        option_fields!(merged)
    }

    /// The flags among these options that are set, as `--long-name`s.
    pub(super) fn given(&self) -> Vec<String> {
        macro_rules! given {
            ($($f:ident),*) => {
                [$((self.$f.is_some(), stringify!($f)),)* (self.config.is_some(), "config")]
            };
        }
        let all = option_fields!(given);
        all.into_iter().filter(|g| g.0).map(|(_, f)| format!("--{}", f.replace('_', "-"))).collect()
    }

    /// The command-line options over those of `--config`, whose text `config` returns.
    pub(super) fn resolve(
        self,
        config: impl FnOnce(&Path) -> Result<String, ConfigError>,
    ) -> Result<Options, ConfigError> {
        match &self.config {
            Some(path) => {
                let file = parse_config(path, &config(path)?)?;
                Ok(self.or(file))
            }
            None => Ok(self),
        }
    }

    /// `--dataset`, or its default.
    pub fn dataset(&self) -> &str {
        self.dataset.as_deref().unwrap_or("umls")
    }

    /// How many times `kge compare` runs its comparison (`--repeat`, 1 unless given).
    pub fn repeats(&self) -> usize {
        self.repeat.unwrap_or(1)
    }

    /// `--mode`, or its default.
    pub fn mode(&self) -> TrainMode {
        self.mode.unwrap_or(TrainMode::Oac)
    }

    /// The training configuration these options give, each unset one at its default.
    pub fn config(&self) -> TrainConfig {
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
            batch_negatives: self.batch_negatives.unwrap_or(d.batch_negatives),
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
            precision: self.precision.unwrap_or(d.precision),
        }
    }
}

/// Options of `ordo-train kge synth` (it takes none of the training options).
#[derive(Debug, clap::Args)]
pub struct Synth {
    /// Entities.
    #[arg(long, default_value_t = 1_000_000)]
    pub entities: u32,
    /// Triples: one train triple per entity first, then 98% train, 1% valid, 1% test (at least
    /// --entities + 2, at most 10^10).
    #[arg(long, default_value_t = 20_000_000)]
    pub triples: u64,
    /// Relations.
    #[arg(long, default_value_t = 100)]
    pub relations: u32,
    /// Hidden communities (at most --entities): each relation maps a head's community to its
    /// tail's, so a model can learn the graph. 0: none, every tail unrelated to its head and
    /// relation (the graph of earlier versions, byte for byte).
    #[arg(long, default_value_t = 0)]
    pub communities: u32,
    /// The directory to write train.txt, valid.txt and test.txt to.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the graph [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
}
