//! The checks of [`Options`] on their own, before anything is read: each value in its range,
//! and the flags of `--repeat`, `--pm` and `--storage` only where they go together.

use super::error::{BoxError, ConfigError};
use super::options::{INTENT_OFFSET, MAX_INTENT_OFFSET, MAX_REPEAT, Options};
use crate::kge::backends::partitioned::{PartitionOpts, StorageKind};
use crate::kge::backends::pm::PmConfig;
use crate::kge::model::device::Device;
use crate::kge::model::precision::Precision;
use crate::kge::run::config::TrainConfig;
use crate::option_error::{MAX_THREADS, OptionError, count, non_negative, positive};

impl Options {
    /// `--repeat`: only with `compare` (`compare` says whether this is it), at least 1, and
    /// above 1 without the options that write a run's results, which each run would overwrite.
    pub(super) fn check_repeat(&self, compare: bool) -> Result<(), BoxError> {
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
    pub(super) fn pm_config(
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
    pub(super) fn partition_opts(
        &self,
        subcommand: bool,
    ) -> Result<Option<PartitionOpts>, BoxError> {
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
            (self.out.is_some(), "--out (a partitioned run writes no metrics or plots)"),
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

    /// `--precision bf16`: only where the rows live in the engine's store in memory and the
    /// CPU step writes them. `--device cuda`'s kernels, `--pm`'s nodes and `--storage`'s
    /// partition files hold `f32` rows: each is refused with bf16 before anything runs.
    pub(super) fn check_precision(&self, cfg: &TrainConfig) -> Result<(), ConfigError> {
        if cfg.precision == Precision::F32 {
            return Ok(());
        }
        let others = [
            (cfg.device != Device::Cpu, "--device cuda (its kernels step f32 rows)"),
            (self.pm.is_some(), "--pm (its nodes hold f32 rows)"),
            (self.storage.is_some(), "--storage (its partitions hold f32 rows)"),
        ];
        match others.into_iter().find(|(given, _)| *given) {
            Some((_, what)) => Err(ConfigError::PrecisionIncompatible(what)),
            None => Ok(()),
        }
    }

    /// Every training option on its own, before anything is read or written: the one place
    /// `kge` refuses a value. Those that need the data are [`check_memory`](Self::check_memory)'s.
    pub(super) fn validate(&self, cfg: &TrainConfig) -> Result<(), OptionError> {
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
}
