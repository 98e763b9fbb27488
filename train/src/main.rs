/// mimalloc instead of glibc's malloc: the KGE step allocates and frees its GEMM packing
/// buffers on every call, now on two threads, and under glibc 8 % of an oac run's samples were
/// page faults; on mimalloc the trainer's oac runs 1.08× faster (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use ordo_train::{amp, kge, sgd};

/// ordo's reference trainers: asynchronous training with the result of synchronous training.
#[derive(Debug, Parser)]
#[command(name = "ordo-train", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Knowledge-graph embeddings (link prediction) in sync, async, bounded and OAC modes.
    Kge(Box<kge::cli::KgeArgs>),
    /// AMPNet: asynchronous model-parallel training (mnist, list-reduction).
    Amp(amp::cli::AmpArgs),
    /// Dense SGD on Fashion-MNIST with Interval-Asynchrony dispatchers.
    Sgd(sgd::cli::SgdArgs),
}

/// `sgd` and `amp`: 2 for a refused option or unreadable data (bad input), 1 otherwise.
fn option_exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    let bad_input = e.is::<ordo_train::options::OptionError>() || e.is::<sgd::idx::IdxError>();
    if bad_input { 2 } else { 1 }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // Bad input exits with 2 (kge::cli::exit_code), other failures with 1.
        Command::Kge(args) => kge::cli::run(*args).map_err(|e| (kge::cli::exit_code(&*e), e)),
        Command::Sgd(args) => sgd::cli::run(args).map_err(|e| (option_exit_code(&*e), e)),
        Command::Amp(args) => amp::cli::run(args).map_err(|e| (option_exit_code(&*e), e)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err((code, e)) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(code)
        }
    }
}
