//! `ordo-train kge`: train link prediction in one mode, or `kge compare` to run every mode on the
//! same data, seeds and hyper-parameters (the OAC paper's Figures 2 and 3 for our data).
//!
//! ```text
//! ordo-train kge [OPTIONS]             # one mode (--mode, default oac)
//! ordo-train kge compare [OPTIONS]     # sync, async, bounded, oac
//! ordo-train kge eval --load DIR       # test metrics of saved embeddings
//! ```
//!
//! Parsing only: the options are [`job::Options`], and [`job::run`] does the job.

use crate::kge::job::{self, BoxError, Job, Options, Request, Synth};
use crate::memory::Budget;

/// Arguments of `ordo-train kge`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct KgeArgs {
    #[command(subcommand)]
    command: Option<KgeCommand>,
    #[command(flatten)]
    opts: Options,
}

#[derive(Debug, clap::Subcommand)]
enum KgeCommand {
    /// Run every mode (sync, async, bounded, oac) on the same data, seed and hyper-parameters,
    /// then compare time-to-accuracy. Without --dataset or --config: the embedded WordNet 3.0
    /// with train/configs/compare-wordnet30.toml's options (each flag overrides its line).
    Compare(Box<Options>),
    /// Print the filtered test metrics of embeddings saved with --save (give --load).
    Eval(Box<Options>),
    /// Write a synthetic graph with power-law degrees to --out DIR (train/valid/test.txt).
    Synth(Synth),
}

impl KgeArgs {
    /// The top level's options and what the subcommand asks for.
    pub fn request(self) -> (Options, Request) {
        let request = match self.command {
            None => Request::Train,
            Some(KgeCommand::Compare(sub)) => Request::Compare(*sub),
            Some(KgeCommand::Eval(sub)) => Request::Eval(*sub),
            Some(KgeCommand::Synth(s)) => Request::Synth(s),
        };
        (self.opts, request)
    }
}

/// [`job::check`] of these arguments: everything `run` does before work starts, on inputs in
/// memory.
pub fn check(args: KgeArgs, inputs: &job::Inputs<'_>, budget: Budget) -> Result<(), BoxError> {
    let (opts, request) = args.request();
    job::check(opts, request, inputs, budget)
}

/// Run `ordo-train kge`.
pub fn run(args: KgeArgs) -> Result<(), BoxError> {
    let (opts, request) = args.request();
    job::run(Job::new(opts, request, job::mpi_launch())?)
}
