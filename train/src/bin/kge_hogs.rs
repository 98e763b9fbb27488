//! sync against oac beside one busy-loop process per core (issue 34, item 3): the loaded-machine
//! comparison as one command, so that its figure is a median over many alternated pairs and not
//! a hand-timed handful.
//!
//! * **Hogs.** `--hogs N` (default: one per core) child processes of this binary, each a busy
//!   loop, started before the first pair and stopped after the last; a hog whose parent is gone
//!   (this process killed) stops by itself. `--hogs 0` measures the same pairs on an idle
//!   machine.
//! * **Pairs.** Each pair trains sync and oac once each on the same batches, in alternating order
//!   (sync first in odd pairs), in this process: the dataset is loaded once.
//! * **What is measured, per run:** over the training epochs only (from each epoch's start to the
//!   end of its last step, so the evaluations are left out), the triples per second, the process
//!   CPU time per positive (every thread of this process, from its CPU clock: not the hogs') and
//!   the cores received (CPU time over wall time). Beside the hogs the scheduler's share varies
//!   from run to run as much as between the modes; the CPU time per positive says how much work
//!   each mode did for its triples, whatever share it got.
//! * **How sure:** after the table, the median oac/sync of triples/s and of CPU time per
//!   positive over all pairs, each with its distribution-free 95 % interval
//!   ([`median_interval`]): beside the hogs one run's median of 6 pairs has ranged from 0.75
//!   to 1.07, so a claim about the median needs dozens of pairs and says how tight it is.
//! * **Setting:** the README's main job (`train/configs/compare-wordnet30.toml`: ComplEx dim 96,
//!   batches of 256, 64 negatives per side shared by chunks of 16, Adagrad) on the embedded
//!   WordNet 3.0, with one-triple evaluations.
//!
//! ```text
//! cargo run --release -p ordo-train --bin kge_hogs -- [--pairs 10] [--epochs 3] [--hogs 2]
//! ```

/// The trainer's allocator (see `kge_roofline`), so the runs are the trainer's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ordo_train::cpu_clock::{add_cpu_since, process_cpu_s};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::io::compare::{Spread, median_interval};
use ordo_train::kge::training::train::{Event, TrainConfig, TrainMode, train};
use std::process::{Child, Command, ExitCode};
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(about = "sync against oac beside one busy loop per core, over alternated pairs")]
struct Args {
    /// Dataset name (embedded) or directory.
    #[arg(long, default_value = "wordnet30")]
    dataset: String,
    /// Embedding floats per entity (ComplEx: dim/2 complex numbers).
    #[arg(long, default_value_t = 96, value_parser = clap::value_parser!(u32).range(1..))]
    dim: u32,
    /// Positives per batch.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// Negatives per chunk and side.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    negatives: u32,
    /// Positives sharing one set of negatives.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    chunk: u32,
    /// Training epochs per run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    epochs: u32,
    /// Pairs of runs (sync and oac each).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pairs: u32,
    /// Busy-loop processes beside the runs (default: one per core; 0: an idle machine).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1024))]
    hogs: Option<u32>,
    /// Run as a hog: loop until the parent process is gone (what `--hogs` starts).
    #[arg(long, hide = true)]
    hog: bool,
}

/// One run's figures over its training epochs.
#[derive(Debug, Clone, Copy)]
struct Measured {
    triples_per_s: f64,
    /// Process CPU microseconds per positive; `None` where the CPU clock is unknown.
    cpu_us: Option<f64>,
    /// CPU time over wall time.
    cores: Option<f64>,
}

/// The busy loops, stopped (killed and reaped) when dropped: on return, on an error, on a panic.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(n: u32) -> std::io::Result<Hogs> {
        let exe = std::env::current_exe()?;
        let mut hogs = Hogs(Vec::new());
        for _ in 0..n {
            hogs.0.push(Command::new(&exe).arg("--hog").spawn()?);
        }
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // A hog that already stopped is fine: both calls only report it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A busy loop that checks every few milliseconds whether its parent is still there (on unix;
/// elsewhere it runs until killed).
fn hog() {
    #[cfg(unix)]
    let parent = std::os::unix::process::parent_id();
    loop {
        for i in 0..1u64 << 22 {
            std::hint::black_box(i);
        }
        #[cfg(unix)]
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Train `mode` once and measure its training epochs.
fn measure(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: TrainMode,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let (mut wall, mut cpu) = (0.0f64, Some(0.0f64));
    let mut since: Option<(Instant, Option<f64>)> = None;
    let run = train(
        d,
        cfg,
        mode,
        &mut |e| match e {
            Event::EpochStart { .. } => since = Some((Instant::now(), process_cpu_s())),
            Event::Batches(_) => {
                if let Some((t, c)) = since.take() {
                    wall += t.elapsed().as_secs_f64();
                    cpu = add_cpu_since(cpu, c);
                }
            }
            _ => {}
        },
        None,
    )?;
    let positives = (d.train.len() * run.epochs.len()) as f64;
    Ok(Measured {
        triples_per_s: positives / wall.max(1e-9),
        cpu_us: cpu.map(|c| c * 1e6 / positives),
        cores: cpu.map(|c| c / wall.max(1e-9)),
    })
}

/// The median of `v` (`Spread`'s, the one `kge compare --repeat` reports); NaN when empty.
fn median(v: Vec<f64>) -> f64 {
    Spread::of(v).map_or(f64::NAN, |s| s.median)
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.hog {
        hog();
        return ExitCode::SUCCESS;
    }
    // The step runs on this thread, as ordo-train's does (`ordo_train::pool`).
    ordo_train::pool::init_global();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kge_hogs: {e}");
            ExitCode::from(ordo_train::kge::job::exit_code(&*e))
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let d = Dataset::load(&args.dataset)?;
    let cfg = TrainConfig {
        dim: args.dim as usize,
        batch_size: args.batch_size as usize,
        negatives: args.negatives as usize,
        chunk: args.chunk as usize,
        epochs: args.epochs as usize,
        eval_limit: 1,
        ..TrainConfig::default()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hogs = args.hogs.unwrap_or(cores as u32);
    println!(
        "{} · {} · {} epochs per run · {} pairs beside {hogs} busy loops on {cores} cores",
        d.name,
        cfg.shaping(),
        cfg.epochs,
        args.pairs
    );
    let _hogs = Hogs::start(hogs)?;
    println!(
        "| pair | sync triples/s | oac triples/s | oac/sync | sync CPU µs/positive | oac CPU \
         µs/positive | sync cores | oac cores |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut rows: Vec<(Measured, Measured)> = Vec::new();
    for pair in 1..=args.pairs {
        let (sync, oac) = if pair % 2 == 1 {
            let s = measure(&d, &cfg, TrainMode::Sync)?;
            (s, measure(&d, &cfg, TrainMode::Oac)?)
        } else {
            let o = measure(&d, &cfg, TrainMode::Oac)?;
            (measure(&d, &cfg, TrainMode::Sync)?, o)
        };
        println!(
            "| {pair} | {:.0} | {:.0} | {:.3} | {} | {} | {} | {} |",
            sync.triples_per_s,
            oac.triples_per_s,
            oac.triples_per_s / sync.triples_per_s,
            opt(sync.cpu_us, 2),
            opt(oac.cpu_us, 2),
            opt(sync.cores, 2),
            opt(oac.cores, 2)
        );
        rows.push((sync, oac));
    }
    let col = |f: &dyn Fn(&(Measured, Measured)) -> Option<f64>| {
        let v: Option<Vec<f64>> = rows.iter().map(f).collect();
        v.map(median)
    };
    println!(
        "| median | {:.0} | {:.0} | **{:.3}** | {} | {} | {} | {} |",
        median(rows.iter().map(|r| r.0.triples_per_s).collect()),
        median(rows.iter().map(|r| r.1.triples_per_s).collect()),
        median(rows.iter().map(|r| r.1.triples_per_s / r.0.triples_per_s).collect()),
        opt(col(&|r| r.0.cpu_us), 2),
        opt(col(&|r| r.1.cpu_us), 2),
        opt(col(&|r| r.0.cores), 2),
        opt(col(&|r| r.1.cores), 2)
    );
    // The pairs' own spread says how far their median may be from the machine's: one run of
    // 5 or 6 pairs beside the hogs has swung from 0.75 to 1.07 (BENCHMARKS.md, issue 34).
    let interval = |v: Vec<f64>| match median_interval(&v, 0.95) {
        Some((lo, hi)) => format!("{:.3}, 95 % interval {lo:.3}–{hi:.3}", median(v)),
        None => format!("{:.3} (too few pairs for a 95 % interval: at least 6)", median(v)),
    };
    println!(
        "\noac/sync over {} pairs: triples/s {}",
        rows.len(),
        interval(rows.iter().map(|r| r.1.triples_per_s / r.0.triples_per_s).collect())
    );
    let cpu: Option<Vec<f64>> = rows.iter().map(|r| Some(r.1.cpu_us? / r.0.cpu_us?)).collect();
    if let Some(cpu) = cpu {
        println!("oac/sync CPU time per positive: {}", interval(cpu));
    }
    Ok(())
}
