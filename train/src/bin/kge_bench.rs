//! KGE time-to-accuracy benchmark: every mode on UMLS, Kinships and (if found) WordNet 3.0, with
//! DistMult and ComplEx at dim 100, same data, seed and hyper-parameters per table. Prints
//! Markdown tables (ratios to sync measured in the same run) for BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p ordo-train --bin kge_bench -- [--epochs 25] [--wordnet DIR] [--out DIR]
//! ```

/// mimalloc instead of glibc's malloc: `matrixmultiply` allocates and frees its GEMM packing
/// buffers on every call (the KGE step's products until issue 34, the evaluation's still), and
/// under glibc 8 % of an oac run's samples were page faults; on mimalloc the trainer's oac ran
/// 1.08× faster (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::io::compare::{compare, markdown};
use ordo_train::kge::io::plot;
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::training::train::{TrainConfig, TrainMode, train};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(about = "Time-to-accuracy of sync/async/bounded/oac on real knowledge graphs")]
struct Args {
    /// Epochs on UMLS and Kinships.
    #[arg(long, default_value_t = 25)]
    epochs: usize,
    /// Epochs on WordNet 3.0.
    #[arg(long, default_value_t = 3)]
    wordnet_epochs: usize,
    /// WordNet 3.0 directory (default: $ORDO_DATASETS/wordnet30 or ../shared/datasets/wordnet30).
    #[arg(long)]
    wordnet: Option<PathBuf>,
    /// Evaluate WordNet on the first this many valid and test triples.
    #[arg(long, default_value_t = 1000)]
    wordnet_eval: usize,
    /// Only these datasets (umls, kinships, wordnet); default all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Engine reader and writer threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Write each table's metrics.csv and plots under `DIR/<dataset>-<model>/`, then `DIR/COMPLETE`
    /// once all are written; locked for the run, as `ordo-train kge --out` is.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn wordnet_dir(arg: &Option<PathBuf>) -> Option<PathBuf> {
    let candidates = [
        arg.clone(),
        std::env::var_os("ORDO_DATASETS").map(|d| PathBuf::from(d).join("wordnet30")),
        Some(PathBuf::from("../shared/datasets/wordnet30")),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets/wordnet30")),
    ];
    candidates.into_iter().flatten().find(|p| p.join("train.txt").is_file())
}

fn main() -> std::process::ExitCode {
    // Printed as ordo-train prints its errors: the message, not the value's debug form.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The step runs on this thread, as ordo-train's does (`ordo_train::pool`).
    ordo_train::pool::init_global();
    let args = Args::parse();
    // Locked (and checked writable) before any work; marked complete after the last table.
    let out = args.out.as_deref().map(ordo_train::outdir::OutputLock::take_out).transpose()?;
    let small = TrainConfig {
        dim: 100,
        epochs: args.epochs,
        threads: args.threads,
        ..TrainConfig::default()
    };
    let mut sets: Vec<(Dataset, TrainConfig)> = Vec::new();
    let wanted = |n: &str| args.only.is_empty() || args.only.iter().any(|o| o == n);
    for name in ["umls", "kinships"] {
        if wanted(name) {
            sets.push((Dataset::load(name)?, small));
        }
    }
    if wanted("wordnet") {
        match wordnet_dir(&args.wordnet) {
            Some(dir) => {
                let d = Dataset::from_dir(&dir)?;
                let cfg = TrainConfig {
                    epochs: args.wordnet_epochs,
                    batch_size: 1000,
                    chunk: 50,
                    eval_limit: args.wordnet_eval,
                    ..small
                };
                sets.push((d, cfg));
            }
            None => {
                eprintln!("skipped WordNet 3.0: no wordnet30 directory found (give --wordnet DIR)")
            }
        }
    }
    println!(
        "machine: {} logical CPUs (shared); engine threads: {} reader(s) + {} writer(s)\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.threads,
        args.threads
    );
    for (d, base) in &sets {
        for score in [ScoreFn::DistMult, ScoreFn::ComplEx] {
            let cfg = TrainConfig { score, ..*base };
            eprintln!("running {} {score:?} ...", d.name);
            let mut results = Vec::new();
            for mode in TrainMode::ALL {
                results.push(train(d, &cfg, mode, &mut |_| {}, None)?);
            }
            let (target, rows) = compare(&results, d.train.len()).expect("sync ran");
            println!(
                "### {} · {score:?} dim {} · {} epochs · batch {} · {} negatives/side (chunks of {}) · lr {} · seed {}{}\n",
                d.name,
                cfg.dim,
                cfg.epochs,
                cfg.batch_size,
                cfg.negatives,
                cfg.chunk,
                cfg.lr,
                cfg.seed,
                if cfg.eval_limit > 0 {
                    format!(" · metrics on the first {} valid/test triples", cfg.eval_limit)
                } else {
                    String::new()
                }
            );
            println!("target = 95% of sync's best valid MRR = {target:.4}\n");
            println!("{}", markdown(&rows));
            if let Some(out) = &out {
                let dir = out.dir().join(format!("{}-{score:?}", d.name).to_lowercase());
                std::fs::create_dir_all(&dir)?;
                let title = format!("{} · {score:?} dim {}", d.name, cfg.dim);
                plot::write_outputs(&dir, &title, &results)?;
            }
        }
    }
    if let Some(out) = &out {
        out.complete()?;
    }
    Ok(())
}
