//! Streaming throughput of the engine on the KGE workload: `oac` through the session API
//! (`Engine::session`, batches submitted with back-pressure, one session for all epochs) against
//! the whole-epoch API (`Engine::run` per epoch, threads restarted every epoch), same model,
//! data and seed, interleaved in one process so both see the same machine load. Prints the
//! batches/s of each and their ratio per repetition, and the median ratio.
//!
//! ```text
//! cargo run --release -p ordo-train --bin kge_stream_bench -- [--dataset umls] [--epochs 10] [--reps 5]
//! ```
//!
//! `--owned` runs only the owned session instead (`Engine::start`: its own device thread, fed
//! over a channel, as the Python binding uses it), `reps × epochs` epochs, and prints its
//! batches: the process's CPU time (`/usr/bin/time -f "%U %S %e"`) over them is its CPU per
//! batch.

/// mimalloc instead of glibc's malloc: `matrixmultiply` allocates and frees its GEMM packing
/// buffers on every call (the KGE step's products until issue 34, the evaluation's still), and
/// under glibc 8 % of an oac run's samples were page faults; on mimalloc the trainer's oac ran
/// 1.08× faster (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ordo::engine::{CpuDevice, Engine, EngineConfig, EngineError, Mode};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::step::NonFiniteLoss;
use ordo_train::kge::training::train::TrainConfig;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(about = "oac via the session API vs the whole-epoch API on the KGE workload")]
struct Args {
    /// Embedded dataset (umls, kinships, nations, wordnet30).
    #[arg(long, default_value = "umls")]
    dataset: String,
    /// Epochs per measured run.
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Repetitions (each runs both APIs, in alternating order).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Engine reader and writer threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Embedding dimension.
    #[arg(long, default_value_t = 100)]
    dim: usize,
    /// Run only the owned session (`Engine::start`), `reps × epochs` epochs.
    #[arg(long)]
    owned: bool,
}

/// Batches run through an owned session ([`Engine::start`]) over `cfg.epochs` epochs.
fn run_owned(d: &Dataset, cfg: &TrainConfig) -> Result<usize, Box<dyn std::error::Error>> {
    let (model, store) = cfg.init(d)?;
    let sampling = cfg.sampling(d);
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(cfg.threads, cfg.threads))?;
    let mut session = engine.start(CpuDevice::new(), model, std::sync::Arc::new(store))?;
    let mut batches = 0;
    for epoch in 0..cfg.epochs {
        let epoch_batches = sampling.epoch_batches(&d.train, epoch);
        batches += epoch_batches.len();
        session.submit_all(epoch_batches)?;
        session.finish()?;
    }
    session.close().report?;
    Ok(batches)
}

/// Batches per second of engine time over `epochs` epochs, via the whole-epoch API or the
/// session API. Batch generation is outside the timed spans in both.
fn measure(
    d: &Dataset,
    cfg: &TrainConfig,
    session: bool,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (mut model, store) = cfg.init(d)?;
    let sampling = cfg.sampling(d);
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(cfg.threads, cfg.threads))?;
    let (mut busy, mut batches) = (Duration::ZERO, 0usize);
    if session {
        engine.session(&mut CpuDevice::new(), &mut model, &store, |s| {
            for epoch in 0..cfg.epochs {
                let epoch_batches = sampling.epoch_batches(&d.train, epoch);
                batches += epoch_batches.len();
                let start = Instant::now();
                s.submit_all(epoch_batches)?;
                s.finish()?;
                busy += start.elapsed();
            }
            Ok::<(), EngineError<NonFiniteLoss>>(())
        })?;
    } else {
        for epoch in 0..cfg.epochs {
            let epoch_batches = sampling.epoch_batches(&d.train, epoch);
            batches += epoch_batches.len();
            let start = Instant::now();
            engine.run(&mut model, &store, epoch_batches)?;
            busy += start.elapsed();
        }
    }
    Ok(batches as f64 / busy.as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The step runs on this thread, as ordo-train's does (`ordo_train::pool`).
    ordo_train::pool::init_global();
    let args = Args::parse();
    let d = Dataset::load(&args.dataset)?;
    let cfg = TrainConfig {
        dim: args.dim,
        epochs: args.epochs,
        threads: args.threads,
        ..TrainConfig::default()
    };
    if args.owned {
        let cfg = TrainConfig { epochs: args.reps * args.epochs, ..cfg };
        let start = Instant::now();
        let batches = run_owned(&d, &cfg)?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "owned session: {batches} batches in {secs:.2} s ({:.0} batches/s)",
            batches as f64 / secs
        );
        return Ok(());
    }
    println!(
        "{} · oac · dim {} · {} epochs · {} reader(s) + {} writer(s) · {} logical CPUs (shared)",
        d.name,
        cfg.dim,
        cfg.epochs,
        cfg.threads,
        cfg.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| rep | whole-epoch batches/s | session batches/s | session / whole |");
    println!("|---|---|---|---|");
    let mut ratios = Vec::new();
    for rep in 0..args.reps {
        // Alternate which API runs first, so a drift in machine load favours neither.
        let (whole, session) = if rep % 2 == 0 {
            let w = measure(&d, &cfg, false)?;
            (w, measure(&d, &cfg, true)?)
        } else {
            let s = measure(&d, &cfg, true)?;
            (measure(&d, &cfg, false)?, s)
        };
        ratios.push(session / whole);
        println!("| {} | {whole:.0} | {session:.0} | {:.3} |", rep + 1, session / whole);
    }
    ratios.sort_by(f64::total_cmp);
    println!("\nmedian session / whole-epoch: {:.3}", ratios[ratios.len() / 2]);
    Ok(())
}
