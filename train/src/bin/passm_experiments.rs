//! Paper 003's Figure 1 on our data: ASSM, PASSM and PASSM+ against sequential SGD, 2-thread
//! synchronous data-parallel SGD and the Async / Interval dispatchers, on Fashion-MNIST with the
//! MLP, `c` workers, the same step size, momentum and minibatch, several seeds.
//!
//! `cargo run --release -p ordo-train --bin passm_experiments -- --epochs 6 --out docs/figures`
//! prints Markdown tables (for BENCHMARKS.md) and writes `passm_fig1_acc_vs_time.png` and
//! `passm_fig1_acc_vs_epoch.png` into `--out`.
//!
//! Every algorithm runs `--epochs` passes over the training split (sync SGD: half as many
//! updates, each averaging two minibatches). θ is snapshotted once per epoch during the run and
//! evaluated on the whole test split after it, so evaluation does not steal CPU from the run
//! being timed. The step is the same everywhere: paper 003's `x ← x − (1 − m)·γ·u` with
//! `u ← m·u + g` is the runtime's `θ ← θ − η·v` with `η = (1 − m)·γ`.

use clap::Parser;
use ordo::dispatcher::{Async, Dispatcher, Fixed, IntervalDispatcher, Sequential};
use ordo::sgd::{
    Control, Every, SgdConfig, Snapshot, Stop, WorkerTelemetry, run_async_subgradient,
    run_dispatched, run_sync,
};
use ordo_train::plot::{Chart, Series, line_chart};
use ordo_train::sgd::dispatchers::Kind;
use ordo_train::sgd::idx::FashionMnist;
use ordo_train::sgd::mlp::Mlp;
use ordo_train::sgd::net::Classifier;
use ordo_train::sgd::train::{TrainOptions, schedule};
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
struct Args {
    /// Fashion-MNIST folder.
    #[arg(long, default_value = "../shared/datasets/fashion_mnist")]
    data: PathBuf,
    /// Where the PNGs go.
    #[arg(long, default_value = "docs/figures")]
    out: PathBuf,
    /// Epochs per run.
    #[arg(long, default_value_t = 6)]
    epochs: u64,
    /// Seeds (shuffle and initial weights).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Workers c of the parallel algorithms.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// γ (paper 003); every algorithm steps by η = (1 − m)·γ.
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    /// Momentum m.
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    /// Minibatch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Hidden units of the MLP.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// PASSM+ switch epochs (default: 25 % and 75 % of the run).
    #[arg(long, value_delimiter = ',')]
    switch_at: Vec<u64>,
    /// Dampening epochs of γ for ASSM/PASSM/PASSM+ (default: none).
    #[arg(long, value_delimiter = ',')]
    lr_drops: Vec<u64>,
    /// Only these algorithms (labels as printed); default all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// The contenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algo {
    Sequential,
    Sync,
    Async,
    Interval,
    Sub(Kind),
}

impl Algo {
    fn label(self) -> String {
        match self {
            Algo::Sequential => "sgd (sequential)".into(),
            Algo::Sync => "sync (data-parallel)".into(),
            Algo::Async => "async".into(),
            Algo::Interval => "interval(y=16)".into(),
            Algo::Sub(Kind::PassmPlus) => "passm-plus".into(),
            Algo::Sub(k) => format!("{k:?}").to_lowercase(),
        }
    }
}

/// One run.
struct Run {
    /// (epoch, wall s, test accuracy) per epoch snapshot, the final model last.
    curve: Vec<(f64, f64, f64)>,
    wall: f64,
    workers: Vec<WorkerTelemetry>,
}

impl Run {
    fn final_acc(&self) -> f64 {
        self.curve.last().map_or(0.0, |c| c.2)
    }
}

fn run_one(
    data: &FashionMnist,
    args: &Args,
    algo: Algo,
    seed: u64,
) -> Result<Run, Box<dyn std::error::Error>> {
    let mlp = Mlp::new(&data.train, args.hidden, args.batch, seed)?;
    let init = mlp.init_params(seed);
    let per_epoch = (data.train.n / args.batch) as u64;
    let c = args.threads;
    // Sync SGD takes c minibatches per update.
    let updates_per_epoch = if algo == Algo::Sync { per_epoch / c as u64 } else { per_epoch };
    let eta = (1.0 - args.momentum) * args.lr;
    let cfg = SgdConfig {
        lr: eta,
        momentum: args.momentum,
        stop: Stop {
            max_updates: Some(args.epochs * updates_per_epoch),
            max_time: Some(Duration::from_secs(600)),
        },
        every: Every::Updates(updates_per_epoch),
    };
    let mut snaps: Vec<(f64, f64, Vec<f32>)> = Vec::new();
    let mut monitor = |s: &Snapshot<'_>| {
        let epoch = s.updates as f64 / updates_per_epoch as f64;
        snaps.push((epoch, s.wall.as_secs_f64(), s.params.to_vec()));
        Control::Continue
    };
    let go = |d: &dyn Dispatcher, threads, monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control| {
        run_dispatched(&mlp, d, threads, &init, &cfg, monitor, None)
    };
    let (report, workers) = match algo {
        Algo::Sequential => (go(&Sequential::new(1)?, 1, &mut monitor)?, Vec::new()),
        Algo::Sync => (run_sync(&mlp, c, &init, &cfg, &mut monitor)?, Vec::new()),
        Algo::Async => (go(&Async::new(c)?, c, &mut monitor)?, Vec::new()),
        Algo::Interval => {
            (go(&IntervalDispatcher::new(c, 16, Fixed)?, c, &mut monitor)?, Vec::new())
        }
        Algo::Sub(kind) => {
            let opts = TrainOptions {
                threads: c,
                batch: args.batch,
                switch_at: args.switch_at.clone(),
                lr_drops: args.lr_drops.clone(),
                ..TrainOptions::default()
            };
            let s = schedule(kind, SgdConfig { lr: args.lr, ..cfg }, &opts, data.train.n);
            let r = run_async_subgradient(&mlp, c, &init, &s, &mut monitor)?;
            (r.run, r.workers)
        }
    };
    let epochs = report.updates as f64 / updates_per_epoch as f64;
    snaps.push((epochs, report.wall.as_secs_f64(), report.params.clone()));
    snaps.dedup_by(|a, b| a.0 == b.0);
    let curve = snaps
        .par_iter()
        .map(|(e, wall, p)| (*e, *wall, mlp.evaluate(p, &data.test, None).1))
        .collect();
    Ok(Run { curve, wall: report.wall.as_secs_f64(), workers })
}

/// Mean and sample standard deviation.
fn stats(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = Args::parse();
    if args.switch_at.is_empty() {
        // ASSM for the first quarter, PASSM, ASSM again for the last quarter (paper 003 §4:
        // ~25 % ASSM first, ASSM around the end where the LR is dampened).
        let e = args.epochs as f64;
        args.switch_at = vec![(0.25 * e).round() as u64, (0.75 * e).round() as u64];
    }
    let data = FashionMnist::load(&args.data)?;
    std::fs::create_dir_all(&args.out)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let algos = [
        Algo::Sequential,
        Algo::Sync,
        Algo::Async,
        Algo::Interval,
        Algo::Sub(Kind::Assm),
        Algo::Sub(Kind::Passm),
        Algo::Sub(Kind::PassmPlus),
    ];
    let algos: Vec<Algo> = algos
        .into_iter()
        .filter(|a| args.only.is_empty() || args.only.contains(&a.label()))
        .collect();
    println!(
        "machine: {cores} cores; MLP 784-{}-10, batch {}, γ = {}, m = {} (η = (1 − m)γ = {}), c = {}, {} epochs, PASSM+ switches at {:?}, γ drops at {:?}, seeds {:?}",
        args.hidden,
        args.batch,
        args.lr,
        args.momentum,
        (1.0 - args.momentum) * args.lr,
        args.threads,
        args.epochs,
        args.switch_at,
        args.lr_drops,
        args.seeds
    );
    let bar = indicatif::ProgressBar::new((algos.len() * args.seeds.len()) as u64);
    let mut results: Vec<(Algo, Vec<Run>)> = Vec::new();
    // Seeds outermost, so a change in the machine's load spreads over every algorithm.
    let mut by_algo: Vec<Vec<Run>> = algos.iter().map(|_| Vec::new()).collect();
    for &seed in &args.seeds {
        for (k, &a) in algos.iter().enumerate() {
            bar.set_message(format!("{} seed {seed}", a.label()));
            let r = run_one(&data, &args, a, seed)?;
            bar.println(format!(
                "{} seed {seed}: {:.1} s, final accuracy {:.4}",
                a.label(),
                r.wall,
                r.final_acc()
            ));
            by_algo[k].push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    for (a, runs) in algos.iter().zip(by_algo) {
        results.push((*a, runs));
    }
    let mean_wall = |label: &str| {
        results
            .iter()
            .find(|(a, _)| a.label() == label)
            .map(|(_, r)| stats(&r.iter().map(|r| r.wall).collect::<Vec<_>>()).0)
    };
    let (sync_wall, assm_wall) = (mean_wall("sync (data-parallel)"), mean_wall("assm"));
    println!(
        "\n| algorithm | final test acc (%) | wall (s) | epoch time (s) | ÷ sync wall | ÷ ASSM epoch time |"
    );
    println!("|---|---|---|---|---|---|");
    for (a, runs) in &results {
        let (acc, acc_sd) = stats(&runs.iter().map(|r| 100.0 * r.final_acc()).collect::<Vec<_>>());
        let (wall, wall_sd) = stats(&runs.iter().map(|r| r.wall).collect::<Vec<_>>());
        let ratio = |d: Option<f64>| d.map_or("—".into(), |d| format!("{:.3}", wall / d));
        println!(
            "| {} | {acc:.2} ± {acc_sd:.2} | {wall:.1} ± {wall_sd:.1} | {:.2} | {} | {} |",
            a.label(),
            wall / args.epochs as f64,
            ratio(sync_wall),
            ratio(assm_wall)
        );
    }
    println!("\n(mean ± sample standard deviation over {} seeds)", args.seeds.len());
    println!(
        "\n| algorithm | worker | steps | PASSM steps | layers skipped / PASSM step | params skipped / PASSM step | lock wait (s) | read (s) | compute (s) | write (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (a, runs) in &results {
        for w in 0..runs[0].workers.len() {
            let t: Vec<&WorkerTelemetry> = runs.iter().map(|r| &r.workers[w]).collect();
            let n = t.len() as f64;
            let avg = |f: &dyn Fn(&WorkerTelemetry) -> f64| t.iter().map(|x| f(x)).sum::<f64>() / n;
            let per = |x: u64, d: u64| if d == 0 { 0.0 } else { x as f64 / d as f64 };
            println!(
                "| {} | {w} | {:.0} | {:.0} | {:.2} | {:.0} | {:.3} | {:.2} | {:.2} | {:.2} |",
                a.label(),
                avg(&|x| x.steps as f64),
                avg(&|x| x.passm_steps as f64),
                avg(&|x| per(x.layers_skipped, x.passm_steps)),
                avg(&|x| per(x.params_skipped, x.passm_steps)),
                avg(&|x| x.lock_wait.as_secs_f64()),
                avg(&|x| x.read.as_secs_f64()),
                avg(&|x| x.compute.as_secs_f64()),
                avg(&|x| x.write.as_secs_f64()),
            );
        }
    }
    // Figure 1-style curves: the seed-mean accuracy at each epoch snapshot, against the
    // seed-mean wall time of that snapshot (and against epochs).
    let mean_curve = |runs: &[Run], x: fn(&(f64, f64, f64)) -> f64| -> Vec<(f64, f64)> {
        let len = runs.iter().map(|r| r.curve.len()).min().unwrap_or(0);
        (0..len)
            .map(|i| {
                let n = runs.len() as f64;
                let xs = runs.iter().map(|r| x(&r.curve[i])).sum::<f64>() / n;
                let ys = runs.iter().map(|r| r.curve[i].2).sum::<f64>() / n;
                (xs, ys)
            })
            .collect()
    };
    let series = |x: fn(&(f64, f64, f64)) -> f64| -> Vec<Series> {
        results
            .iter()
            .map(|(a, runs)| Series { label: a.label(), points: mean_curve(runs, x) })
            .collect()
    };
    let chart = |title, x_label| Chart { title, x_label, y_label: "test accuracy", log2_x: false };
    line_chart(
        &args.out.join("passm_fig1_acc_vs_time.png"),
        &chart("MLP on Fashion-MNIST: test accuracy vs wall time (mean of seeds)", "wall time (s)"),
        &series(|c| c.1),
    )?;
    line_chart(
        &args.out.join("passm_fig1_acc_vs_epoch.png"),
        &chart("MLP on Fashion-MNIST: test accuracy vs epochs (mean of seeds)", "epoch"),
        &series(|c| c.0),
    )?;
    Ok(())
}
