//! CPU time per model update of paper 001's runtime (async and interval dispatchers) against
//! paper 003's ASSM, on the same MLP, in the same run: the measure of issue 38's dense store.
//!
//! `cargo run --release -p ordo-train --bin dense_store_bench -- --updates 6000 --threads 2`
//!
//! Each method runs `--updates` updates from the same initial θ with evaluation off; the table
//! gives wall seconds, process CPU seconds, CPU µs per update and that per-update CPU as a ratio
//! to ASSM's. Methods run one after another, `--repeats` times each, interleaved, so a change in
//! the machine's load hits all of them alike; the ratio uses each method's median.

use clap::Parser;
use ordo::dispatcher::{Async, Dispatcher, Fixed, IntervalDispatcher};
use ordo::sgd::{
    BlockSchedule, Control, Every, RunReport, SgdConfig, Snapshot, Stop, run_async_subgradient,
    run_dispatched,
};
use ordo_train::sgd::idx::FashionMnist;
use ordo_train::sgd::mlp::Mlp;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
struct Args {
    /// Fashion-MNIST folder.
    #[arg(long, default_value = "../shared/datasets/fashion_mnist")]
    data: PathBuf,
    /// Model updates per run.
    #[arg(long, default_value_t = 6000)]
    updates: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Runs per method (interleaved).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Minibatch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Hidden units of the MLP 784-H-10.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
}

/// This process's CPU time (all threads) in seconds.
fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    Async,
    Interval,
    Assm,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::Async => "async (paper 001)",
            Method::Interval => "interval y=16 (paper 001)",
            Method::Assm => "assm (paper 003)",
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let data = FashionMnist::load(&args.data)?;
    let mlp = Mlp::new(&data.train, args.hidden, args.batch, 1)?;
    let init = mlp.init_params(1);
    let (lr, momentum) = (0.05f32, 0.9f32);
    let cfg = SgdConfig {
        lr: (1.0 - momentum) * lr,
        momentum,
        stop: Stop { max_updates: Some(args.updates), max_time: Some(Duration::from_secs(600)) },
        every: Every::Never,
    };
    let c = args.threads;
    let per_epoch = (data.train.n / args.batch) as u64;
    let methods = [Method::Async, Method::Interval, Method::Assm];
    // (wall s, cpu s) per method per repeat.
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); methods.len()];
    for _ in 0..args.repeats {
        for (k, &method) in methods.iter().enumerate() {
            let mut monitor = |_: &Snapshot<'_>| Control::Continue;
            let go = |d: &dyn Dispatcher, monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control| {
                run_dispatched(&mlp, d, c, &init, &cfg, monitor, None)
            };
            let cpu0 = cpu_seconds();
            let report: RunReport = match method {
                Method::Async => go(&Async::new(c)?, &mut monitor)?,
                Method::Interval => go(&IntervalDispatcher::new(c, 16, Fixed)?, &mut monitor)?,
                Method::Assm => {
                    let s = BlockSchedule::assm(SgdConfig { lr, ..cfg }, per_epoch);
                    run_async_subgradient(&mlp, c, &init, &s, &mut monitor)?.run
                }
            };
            let cpu = cpu_seconds() - cpu0;
            if report.updates < args.updates {
                return Err(format!(
                    "{}: {} updates of {}",
                    method.label(),
                    report.updates,
                    args.updates
                )
                .into());
            }
            runs[k].push((report.wall.as_secs_f64(), cpu));
        }
    }
    let median = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(f).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let assm_cpu = median(&runs[2], |r| r.1);
    println!(
        "MLP 784-{}-10, batch {}, {} threads, {} updates per run, median of {}",
        args.hidden, args.batch, c, args.updates, args.repeats
    );
    println!("| method | wall s | CPU s | CPU µs / update | × ASSM |");
    println!("|---|---|---|---|---|");
    for (k, &method) in methods.iter().enumerate() {
        let (wall, cpu) = (median(&runs[k], |r| r.0), median(&runs[k], |r| r.1));
        println!(
            "| {} | {wall:.2} | {cpu:.2} | {:.0} | {:.2} |",
            method.label(),
            cpu / args.updates as f64 * 1e6,
            cpu / assm_cpu
        );
    }
    Ok(())
}
