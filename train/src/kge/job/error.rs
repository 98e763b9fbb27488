//! How a `kge` run fails before it starts ([`ConfigError`]), and the exit status of any of its
//! errors ([`exit_code`]).

use crate::kge::backends::partitioned::PartitionedError;
use crate::kge::backends::pm::PmTrainError;
use crate::kge::data::dataset::DataError;
use crate::kge::io::checkpoint::CheckpointError;
use crate::kge::io::npy::NpyError;
use crate::kge::training::error::TrainError;
use crate::option_error::OptionError;
use crate::outdir::LockError;
use std::path::PathBuf;

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
    /// `--precision bf16` with an option whose rows are `f32` only.
    #[error("--precision bf16 does not go with {0}")]
    PrecisionIncompatible(&'static str),
    /// An engine-only option given with `--pm`.
    #[error("--pm does not go with {0}")]
    PmIncompatible(&'static str),
}

/// Any error of a run.
pub type BoxError = Box<dyn std::error::Error>;

/// The exit status for an error of [`run`](super::run): 2 for bad input (a malformed or unknown dataset, a
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
