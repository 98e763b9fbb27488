/// mimalloc instead of glibc's malloc: `matrixmultiply` allocates and frees its GEMM packing
/// buffers on every call (the KGE step's products until issue 34, the evaluation's still), and
/// under glibc 8 % of an oac run's samples were page faults; on mimalloc the trainer's oac ran
/// 1.08× faster (BENCHMARKS.md). The `system-alloc` feature keeps the system's malloc, for a
/// heap profiler that hooks malloc (heaptrack, valgrind's massif).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ordo_train::cli::{Cli, Command};
use ordo_train::{amp, kge, sgd};

fn exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    if ordo_train::cli::is_bad_input(e) { 2 } else { 1 }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The device stage runs on this thread: as the pool's thread 0, its steps split work with
    // rayon's other thread without handing each step over (`ordo_train::pool`).
    ordo_train::pool::init_global();
    let result = match cli.command {
        // Bad input exits with 2 (kge::job::exit_code), other failures with 1.
        Command::Kge(args) => kge::cli::run(*args).map_err(|e| (kge::job::exit_code(&*e), e)),
        // sgd and amp: 2 for a refused option or unreadable data, 1 otherwise.
        Command::Sgd(args) => sgd::cli::run(args).map_err(|e| (exit_code(&*e), e)),
        Command::Amp(args) => amp::cli::run(args).map_err(|e| (exit_code(&*e), e)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err((code, e)) => {
            eprintln!("error: {e}");
            // Each error names its own part; what caused it is its source (printed once each).
            let mut source = e.source();
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            std::process::ExitCode::from(code)
        }
    }
}
