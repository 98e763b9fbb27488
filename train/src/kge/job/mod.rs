//! The `kge` run layer: what `ordo-train kge`, the Python package and the bench binaries call.
//!
//! A caller gathers [`Options`] (the command line's flags, which are also a `--config` file's
//! keys) and a [`Request`] (train, compare, eval or synth); [`Job::new`] merges them over
//! `--config` and checks every option on its own; [`run`] reads the data, checks the run's
//! memory and does the job, printing as it goes. [`OneRun`] is one training run for a caller that
//! drives the training itself (the Python package); [`check`] is everything before work starts,
//! on inputs in memory (the fuzz target's); [`exit_code`] is the exit status of any error.
//!
//! - [`options`]: [`Options`] and [`Synth`], and how a file's options merge under the flags;
//!   `checks`, each option on its own, and `memory`, the estimate against the budget.
//! - [`plan`]: [`Request`], [`Job`] and [`check`].
//! - `launch`: [`run`] and the output directories; `pm_run` and `partitioned_run`, the runs of
//!   `--pm` and `--storage`; `report`, what a run prints.
//! - [`one_run`]: [`OneRun`], [`Prepared`] and [`PreparedParts`].
//! - [`error`]: [`ConfigError`] and [`exit_code`].
//!
//! The top room: may import every other room of [`kge`](super).

mod checks;
pub mod error;
mod launch;
mod memory;
pub mod one_run;
pub mod options;
mod partitioned_run;
pub mod plan;
mod pm_run;
mod report;
#[cfg(test)]
mod tests;

pub use crate::kge::backends::pm::mpi_launch;
pub use error::{BoxError, ConfigError, exit_code};
pub use launch::run;
pub use one_run::{OneRun, Prepared, PreparedParts};
pub use options::{Options, Synth};
pub use partitioned_run::save_partitioned;
pub use plan::{Inputs, Job, Request, check};
