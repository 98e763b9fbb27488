//! `ordo-verify`: ordo's protocol models on stateright, their Explorer, and the mutation table.
//!
//! ```text
//! cargo run --release -p ordo-verify -- check [--bound k,p] [--interval m,steps,y0]
//! cargo run --release -p ordo-verify -- check --mutant evict-ste-plus-one   # print its trace
//! cargo run --release -p ordo-verify -- explore --model oac --mutant evict-ste-plus-one [--port 3000]
//! cargo run --release -p ordo-verify -- mutants [--quick] [--checkers model,proptest,loom,shuttle,fuzz]
//! cargo run --release -p ordo-verify -- mutants --long [SECONDS]   # + fuzz >= 10 min, not in CI
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use ordo::mutation::Mutant;
use ordo_verify::model::{Outcome, Search};
use ordo_verify::mutants::{self, Checker, Options, Row};
use ordo_verify::suite::{Bound, check_correct, check_mutant};

#[derive(Parser)]
#[command(name = "ordo-verify", about = "Model-check ordo's protocols and run the mutation table")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Clone)]
struct BoundArgs {
    /// OAC bound `k,p`: k batches over p rows (batch b touches rows b mod p and (b+1) mod p).
    #[arg(long, value_parser = pair, default_value = "5,3")]
    bound: (usize, usize),
    /// OAC reader and writer pool sizes `readers,writers`.
    #[arg(long, value_parser = pair, default_value = "2,2")]
    threads: (usize, usize),
    /// Dispatcher bound `m,steps,y0`: m workers, steps started in total, initial interval y0.
    #[arg(long, value_parser = triple, default_value = "3,8,3")]
    interval: (usize, usize, usize),
    /// OAC row sets instead of the standard ones, one batch per `;`, rows by `,`
    /// (e.g. `0,1;1;0,1`); rows must be below p of `--bound`.
    #[arg(long, value_parser = sets)]
    sets: Option<RowSets>,
    /// Give up after this many distinct states per model.
    #[arg(long, default_value_t = 50_000_000)]
    max_states: usize,
    /// stateright checker threads for the correct protocols (default: the available cores);
    /// a mutant's search runs on one thread, breadth-first, for a shortest counterexample.
    #[arg(long)]
    checker_threads: Option<usize>,
}

impl BoundArgs {
    fn bound(&self) -> Bound {
        Bound {
            batches: self.bound.0,
            rows: self.bound.1,
            readers: self.threads.0,
            writers: self.threads.1,
            workers: self.interval.0,
            steps: self.interval.1,
            y0: self.interval.2,
            sets: self.sets.clone().map(|s| s.0),
        }
    }

    fn search(&self, threads: usize) -> Search {
        Search { threads, max_states: self.max_states, ..Search::default() }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
}

#[derive(Subcommand)]
enum Cmd {
    /// Check the correct protocols exhaustively at a bound (or one mutant with --mutant).
    Check {
        #[command(flatten)]
        bound: BoundArgs,
        /// Check this mutant's protocol instead, and print its shortest counterexample.
        #[arg(long, value_parser = mutant)]
        mutant: Option<Mutant>,
    },
    /// Serve stateright's Explorer web UI for a protocol model (with a mutant on, its
    /// counterexample is listed under the property `safe`) until interrupted.
    Explore {
        #[command(flatten)]
        bound: BoundArgs,
        /// The model: oac (STE at the device) or interval (single-word dispatcher).
        #[arg(long, value_parser = ["oac", "interval"])]
        model: String,
        /// Turn this protocol mutant on.
        #[arg(long, value_parser = mutant)]
        mutant: Option<Mutant>,
        /// Port on localhost.
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
    /// Run every checker against every mutant and print the table.
    Mutants {
        #[command(flatten)]
        bound: BoundArgs,
        /// Checkers to run, comma-separated, from model, proptest, loom, shuttle, fuzz.
        #[arg(long, value_delimiter = ',', value_parser = checker, default_value = "model,proptest,loom,shuttle,fuzz")]
        checkers: Vec<Checker>,
        /// CI mode: the model checker and proptest only.
        #[arg(long)]
        quick: bool,
        /// Seconds per fuzz target per mutant.
        #[arg(long, default_value_t = 20)]
        fuzz_seconds: u64,
        /// Wall-clock limit of one test function's run with a mutant, seconds: 10 x its baseline
        /// + 30 s, at least this; a hang past it counts as a kill.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Test functions run at once (default: the available cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Also fuzz every target on the correct code for this many seconds (default 600 when
        /// given without a value), growing and then minimizing the committed corpus (not in CI).
        #[arg(long, num_args = 0..=1, default_missing_value = "600")]
        long: Option<u64>,
        /// Only these mutants (comma-separated names); default all.
        #[arg(long, value_delimiter = ',', value_parser = row)]
        only: Vec<Row>,
        /// The workspace root (default: the parent of this crate's directory).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Target dir (default: $CARGO_TARGET_DIR or <root>/target); the loom and shuttle
        /// configurations build in its `loom/` and `shuttle/` subdirectories.
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
}

fn pair(s: &str) -> Result<(usize, usize), String> {
    match s.split(',').map(str::trim).map(str::parse).collect::<Result<Vec<usize>, _>>() {
        Ok(v) if v.len() == 2 => Ok((v[0], v[1])),
        _ => Err(format!("expected two numbers `a,b`, got `{s}`")),
    }
}

fn triple(s: &str) -> Result<(usize, usize, usize), String> {
    match s.split(',').map(str::trim).map(str::parse).collect::<Result<Vec<usize>, _>>() {
        Ok(v) if v.len() == 3 => Ok((v[0], v[1], v[2])),
        _ => Err(format!("expected three numbers `a,b,c`, got `{s}`")),
    }
}

/// Row sets given on the command line (a newtype, so clap takes it as one value).
#[derive(Debug, Clone)]
struct RowSets(Vec<Vec<usize>>);

fn sets(s: &str) -> Result<RowSets, String> {
    s.split(';')
        .map(|b| {
            b.split(',')
                .map(|r| r.trim().parse::<usize>().map_err(|e| format!("`{s}`: {e}")))
                .collect()
        })
        .collect::<Result<_, _>>()
        .map(RowSets)
}

fn mutant(s: &str) -> Result<Mutant, String> {
    Mutant::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutant `{s}`; one of {}", names.join(", "))
    })
}

/// A mutant of any crate's catalog, for the table's `--only`.
fn row(s: &str) -> Result<Row, String> {
    mutants::row(s).ok_or_else(|| {
        let names: Vec<&str> = mutants::all_rows().iter().map(|r| r.entry.name).collect();
        format!("unknown mutant `{s}`; one of {}", names.join(", "))
    })
}

fn checker(s: &str) -> Result<Checker, String> {
    Checker::from_name(s).ok_or_else(|| {
        format!("unknown checker `{s}`; one of model, proptest, loom, shuttle, fuzz")
    })
}

/// Progress of the mutation table: a bar on a terminal, one line per finished job either way.
#[derive(Default)]
struct Bar(std::sync::Mutex<Option<indicatif::ProgressBar>>);

impl mutants::Progress for Bar {
    fn phase(&self, name: &str, total: usize) {
        eprintln!("[mutants] {name}");
        if let Ok(mut bar) = self.0.lock() {
            if let Some(old) = bar.take() {
                old.finish_and_clear();
            }
            if total > 0 {
                let b = indicatif::ProgressBar::new(total as u64);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{msg} [{bar:30}] {pos}/{len} {elapsed}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                b.set_message(name.to_string());
                *bar = Some(b);
            }
        }
    }

    fn done(&self, line: &str) {
        match self.0.lock().ok().as_ref().and_then(|b| b.as_ref()) {
            Some(b) => {
                b.suspend(|| eprintln!("[mutants] {line}"));
                b.inc(1);
            }
            None => eprintln!("[mutants] {line}"),
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Explore { bound, model, mutant, port } => {
            match ordo_verify::explore::serve(&bound.bound(), &model, mutant, port) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Check { bound, mutant: Some(m) } => {
            match check_mutant(&bound.bound(), m, bound.search(1)) {
                None => {
                    eprintln!("mutant {} changes no modelled protocol", m.name());
                    ExitCode::FAILURE
                }
                Some(Err(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
                Some(Ok(r)) => {
                    println!("mutant {}: {}", m.name(), r.stats);
                    match r.outcome {
                        Outcome::Proved => {
                            match m.equivalent_because() {
                                Some(why) => {
                                    println!("no counterexample (equivalent mutant: {why})")
                                }
                                None => println!("no counterexample at this bound"),
                            }
                            ExitCode::SUCCESS
                        }
                        Outcome::Violated(cex) => {
                            println!("{cex}");
                            ExitCode::SUCCESS
                        }
                    }
                }
            }
        }
        Cmd::Check { bound, mutant: None } => {
            let threads = bound.checker_threads.unwrap_or_else(cores);
            match check_correct(&bound.bound(), bound.search(threads)) {
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
                Ok(runs) => {
                    let mut ok = true;
                    for run in runs {
                        println!("{}\n  {}", run.name, run.report.stats);
                        match run.report.outcome {
                            Outcome::Proved => {
                                println!("  proved: every property holds in every reachable state")
                            }
                            Outcome::Violated(cex) => {
                                ok = false;
                                println!("  VIOLATED\n{cex}");
                            }
                        }
                    }
                    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
                }
            }
        }
        Cmd::Mutants {
            bound,
            checkers,
            quick,
            fuzz_seconds,
            timeout,
            jobs,
            long,
            only,
            root,
            target_dir,
        } => {
            let root = root.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
            let target_dir = target_dir
                .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
                .unwrap_or_else(|| root.join("target"));
            let target_dir = std::path::absolute(&target_dir).unwrap_or(target_dir);
            let checkers = if quick { vec![Checker::Model, Checker::Proptest] } else { checkers };
            let opts = Options {
                root,
                checkers,
                bound: bound.bound(),
                fuzz_seconds,
                timeout: Duration::from_secs(timeout),
                target_dir,
                jobs: jobs.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
                }),
                mutants: if only.is_empty() { mutants::all_rows() } else { only },
            };
            let bar = Bar::default();
            let table = mutants::run(&opts, &bar);
            print!("{}", table.render());
            let mut fuzz_ok = true;
            if let Some(seconds) = long {
                for r in mutants::long_fuzz(&opts.root, seconds, &bar) {
                    println!(
                        "long fuzz {}: {} inputs in {:.0?}, corpus {} files after cmin, {}",
                        r.target,
                        r.runs,
                        r.elapsed,
                        r.corpus,
                        r.failure.as_deref().unwrap_or("no failure")
                    );
                    fuzz_ok &= r.failure.is_none();
                }
            }
            if table.passes(quick) && fuzz_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}
