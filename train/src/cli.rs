//! `ordo-train`'s command line as a library: [`Cli`] is what the binary parses, and [`check`]
//! takes any command line through parsing and every validation of its subcommand, with the
//! files it would read given in memory, and stops where work would start.

use crate::memory::Budget;
use crate::option_error::OptionError;
use crate::{amp, kge, sgd};
use clap::{Parser, Subcommand};

/// ordo's reference trainers: asynchronous training with the result of synchronous training.
#[derive(Debug, Parser)]
#[command(name = "ordo-train", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `ordo-train`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Knowledge-graph embeddings (link prediction) in sync, async, bounded and OAC modes.
    Kge(Box<kge::cli::KgeArgs>),
    /// AMPNet: asynchronous model-parallel training (mnist, list-reduction).
    Amp(amp::cli::AmpArgs),
    /// Dense SGD on Fashion-MNIST with Interval-Asynchrony dispatchers.
    Sgd(sgd::cli::SgdArgs),
}

/// The files a command line would read, in memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    /// `kge --config`'s file.
    pub config: &'a str,
    /// `kge --dataset`'s `train.txt`, `valid.txt` and `test.txt`.
    pub dataset: [&'a str; 3],
    /// `amp --graph`'s file.
    pub graph: &'a str,
}

/// Training examples `check` assumes for `sgd` (Fashion-MNIST's training split).
const SGD_TRAIN_EXAMPLES: usize = 60_000;

/// Parse `argv` (without the program name) and validate it as `ordo-train` would, reading
/// `inputs` instead of files and checking memory against `budget`: `Ok` where the binary would
/// start work, the error it would print otherwise. No file is read or written, no thread is
/// started for training, and nothing is printed.
///
/// ```
/// use ordo_train::{cli::{Inputs, check}, memory::Budget};
/// let budget = Budget { bytes: 1 << 30, source: "--memory-limit" };
/// let data = Inputs { dataset: ["a\tr\tb\n", "a\tr\tb\n", ""], ..Inputs::default() };
/// assert!(check(&["kge", "--dim", "8"], &data, budget).is_ok());
/// let e = check(&["amp", "--task", "mnist", "--batch", "0"], &data, budget).unwrap_err();
/// assert_eq!(e.to_string(), "--batch 0: must be at least 1");
/// ```
pub fn check(
    argv: &[&str],
    inputs: &Inputs<'_>,
    budget: Budget,
) -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::try_parse_from(std::iter::once("ordo-train").chain(argv.iter().copied()))?;
    match cli.command {
        Command::Kge(args) => {
            let kge_inputs = kge::job::Inputs { config: inputs.config, dataset: inputs.dataset };
            kge::cli::check(*args, &kge_inputs, budget)
        }
        Command::Sgd(args) => {
            args.validate()?;
            sgd::dispatchers::build(&args.spec())?;
            args.options()?;
            args.validate_for(SGD_TRAIN_EXAMPLES, budget)?;
            Ok(())
        }
        Command::Amp(args) => {
            args.validate()?;
            let used = args.check_memory(budget)?;
            if args.graph.is_some() {
                let (opt, mui) = (args.optimizer_for_check(), (args.mui, args.workers));
                let left = budget.bytes.saturating_sub(used);
                amp::tasks::parse_graph("graph", inputs.graph, opt, mui, args.seed, left)?;
            }
            Ok(())
        }
    }
}

/// Whether `e`, an error of [`check`] or of a subcommand's run, is bad input (exit status 2).
pub fn is_bad_input(e: &(dyn std::error::Error + 'static)) -> bool {
    e.is::<OptionError>() || e.is::<sgd::idx::IdxError>() || kge::job::exit_code(e) == 2
}

/// The fuzz target `cli_validate`'s harness: `data` split at NUL bytes into the command line
/// (one argument per line), the config file, `train.txt`, `valid.txt`, `test.txt` and the
/// graph file, then [`check`] under a 64 MiB budget. Any outcome but a panic is a pass; a
/// unit test replays the inputs kept in `fuzz/regressions/cli_validate/`.
pub fn fuzz_check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let mut next = || parts.next().unwrap_or("");
    let args = next();
    let argv: Vec<&str> = args.lines().collect();
    let config = next();
    let dataset = [next(), next(), next()];
    let inputs = Inputs { config, dataset, graph: next() };
    let budget = Budget { bytes: 64 << 20, source: "the fuzz target's budget" };
    let _ = check(&argv, &inputs, budget);
}
