//! Paper 001's experiments on our data (Fashion-MNIST, an MLP instead of CIFAR + LeNet):
//! acceptance rate vs y (Fig. 2), τ distribution and E(τ) vs y against Async (Fig. 3), and a
//! Table-1-style comparison of Sync, Async, ElAsync and Interval (fixed / decay / probe) over
//! thread counts (with Fig. 4/5-style plots).
//!
//! `cargo run --release -p ordo-train --bin interval_experiments -- --data DIR --out docs/figures`
//! prints Markdown tables (for BENCHMARKS.md) and writes PNGs into `--out`.
//!
//! Accuracy is evaluated *after* each run on snapshots of θ taken every `--snapshot-every` seconds during it, so
//! evaluation does not steal CPU from the workers being timed.

use clap::Parser;
use ordo::dispatcher::ProbeConfig;
use ordo::sgd::{Control, Every, SgdConfig, Stop, run_dispatched, run_sync};
use ordo_train::plot::{Chart, Series, line_chart};
use ordo_train::sgd::dispatchers::Algorithm;
use ordo_train::sgd::dispatchers::{Built, Kind, Spec, YPolicy, build};
use ordo_train::sgd::idx::FashionMnist;
use ordo_train::sgd::mlp::Mlp;
use ordo_train::sgd::net::Classifier;
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
    /// Seconds per Table-1 run.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// Seconds per Fig. 2/3 run.
    #[arg(long, default_value_t = 1.5)]
    fig_seconds: f64,
    /// Thread counts of the Table-1 runs.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    threads: Vec<usize>,
    /// Threads of the Fig. 2/3 runs.
    #[arg(long, default_value_t = 16)]
    fig_threads: usize,
    /// Seconds between snapshots of θ in Table-1 runs.
    #[arg(long, default_value_t = 0.5)]
    snapshot_every: f64,
    /// Test examples used for accuracy (the first N).
    #[arg(long, default_value_t = 5000)]
    eval_limit: usize,
}

/// One run's record.
struct Run {
    label: String,
    threads: usize,
    /// (wall s, test accuracy, test loss, steps started) per snapshot, the final model last.
    curve: Vec<(f64, f64, f64, u64)>,
    accept_rate: f64,
    mean_tau: f64,
    taus: Vec<u64>,
    updates: u64,
}

fn run_one(
    data: &FashionMnist,
    spec: &Spec,
    batch: usize,
    seconds: f64,
    snapshots: Option<f64>,
    eval_limit: usize,
) -> Result<Run, Box<dyn std::error::Error>> {
    let mlp = Mlp::new(&data.train, 128, batch, 1)?;
    let init = mlp.init_params(1);
    let cfg = SgdConfig {
        lr: 0.005,
        momentum: 0.5,
        stop: Stop::time(Duration::from_secs_f64(seconds)),
        every: snapshots.map_or(Every::Never, |s| Every::Time(Duration::from_secs_f64(s))),
    };
    let mut snaps: Vec<(f64, u64, Vec<f32>)> = Vec::new();
    let mut monitor = |s: &ordo::sgd::Snapshot<'_>| {
        snaps.push((s.wall.as_secs_f64(), s.started, s.params.to_vec()));
        Control::Continue
    };
    let Built { algo, feed } = build(spec)?;
    let report = match &algo {
        Algorithm::Sync => run_sync(&mlp, spec.threads, &init, &cfg, &mut monitor)?,
        Algorithm::Dispatched(d) => run_dispatched(
            &mlp,
            d.as_ref(),
            spec.threads,
            &init,
            &cfg,
            &mut monitor,
            feed.as_deref().map(|f| f as _),
        )?,
        Algorithm::Subgradient(k) => {
            return Err(format!("{k:?} is paper 003's (passm_experiments), not paper 001's").into());
        }
    };
    if snapshots.is_some() {
        snaps.push((report.wall.as_secs_f64(), report.started() as u64, report.params.clone()));
    }
    let curve = snaps
        .par_iter()
        .map(|(wall, started, p)| {
            let (loss, acc) = mlp.evaluate(p, &data.test, Some(eval_limit));
            (*wall, acc, loss, *started)
        })
        .collect();
    Ok(Run {
        label: spec.label(),
        threads: spec.threads,
        curve,
        accept_rate: report.accept_rate(),
        mean_tau: report.mean_tau(),
        taus: report.steps.iter().filter_map(|s| s.tau).collect(),
        updates: report.updates,
    })
}

/// Accept rate, E(τ), max τ and updates per second of a Fig. 2/3 run, as table cells.
fn fig_cells(r: &Run, seconds: f64) -> String {
    let max_tau = r.taus.iter().max().unwrap_or(&0);
    let rate = r.updates as f64 / seconds;
    format!("{:.3} | {:.2} | {max_tau} | {rate:.0}", r.accept_rate, r.mean_tau)
}

fn best(r: &Run) -> f64 {
    r.curve.iter().map(|c| c.1).fold(0.0, f64::max)
}

fn time_to(r: &Run, acc: f64) -> Option<f64> {
    r.curve.iter().find(|c| c.1 >= acc).map(|c| c.0)
}

/// Gradients computed (steps started, accepted or not) until the first snapshot at `acc`: the
/// work to the target, which unlike wall time does not depend on the machine's other load.
fn work_to(r: &Run, acc: f64) -> Option<u64> {
    r.curve.iter().find(|c| c.1 >= acc).map(|c| c.3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let data = FashionMnist::load(&args.data)?;
    std::fs::create_dir_all(&args.out)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("machine: {cores} cores; MLP 784-128-10, η = 0.005, μ = 0.5");

    // ---- Fig. 2 and 3: acceptance and staleness vs y at m = fig_threads.
    let m = args.fig_threads;
    let ys = [1u32, 2, 4, 8, 16, 32, 64, 128, 256];
    let mut fig2: Vec<Series> = Vec::new();
    let mut fig3_runs: Vec<(u32, Run)> = Vec::new();
    println!(
        "\n### Acceptance rate and staleness vs y (m = {m} threads, {}s per run)\n",
        args.fig_seconds
    );
    println!("| batch | y | accept rate | E[τ] | max τ | updates/s |");
    println!("|---|---|---|---|---|---|");
    for batch in [16usize, 64] {
        let mut points = Vec::new();
        for &y in &ys {
            let spec = Spec { y, ..Spec::paper(Kind::Interval, m) };
            let r = run_one(&data, &spec, batch, args.fig_seconds, None, 0)?;
            println!("| {batch} | {y} | {} |", fig_cells(&r, args.fig_seconds));
            points.push((f64::from(y), r.accept_rate));
            if batch == 16 {
                fig3_runs.push((y, r));
            }
        }
        fig2.push(Series { label: format!("batch {batch}"), points });
    }
    let async_ref = run_one(&data, &Spec::paper(Kind::Async, m), 16, args.fig_seconds, None, 0)?;
    println!("| 16 | async | {} |", fig_cells(&async_ref, args.fig_seconds));
    let chart = |title, x_label, y_label, log2_x| Chart { title, x_label, y_label, log2_x };
    line_chart(
        &args.out.join("interval_fig2_accept_vs_y.png"),
        &chart("acceptance rate vs y", "y", "accepted / started", true),
        &fig2,
    )?;
    let etau = vec![
        Series {
            label: "interval".into(),
            points: fig3_runs.iter().map(|(y, r)| (f64::from(*y), r.mean_tau)).collect(),
        },
        Series {
            label: "async".into(),
            points: ys.iter().map(|&y| (f64::from(y), async_ref.mean_tau)).collect(),
        },
    ];
    line_chart(
        &args.out.join("interval_fig3a_mean_tau_vs_y.png"),
        &chart("E[τ] vs y", "y", "mean τ", true),
        &etau,
    )?;
    let dist = |label: String, taus: &[u64]| {
        let n = taus.len().max(1) as f64;
        let mut h = vec![0u64; 65];
        taus.iter().for_each(|&t| h[(t as usize).min(64)] += 1);
        Series {
            label,
            points: h.iter().enumerate().map(|(t, &c)| (t as f64, c as f64 / n)).collect(),
        }
    };
    let mut dists: Vec<Series> = fig3_runs
        .iter()
        .filter(|(y, _)| [4, 16, 64].contains(y))
        .map(|(y, r)| dist(format!("y = {y}"), &r.taus))
        .collect();
    dists.push(dist("async".into(), &async_ref.taus));
    line_chart(
        &args.out.join("interval_fig3b_tau_distribution.png"),
        &chart(
            "distribution of τ (τ ≥ 64 in the last point)",
            "τ",
            "fraction of accepted steps",
            false,
        ),
        &dists,
    )?;

    // ---- Table 1 and Fig. 4/5: algorithms × thread counts.
    let algos: Vec<Box<dyn Fn(usize) -> Spec>> = vec![
        Box::new(|m| Spec::paper(Kind::Sync, m)),
        Box::new(|m| Spec::paper(Kind::Async, m)),
        Box::new(|m| Spec {
            // Shorter phases than the paper's (w 12, p 1024, x 8192): our runs are ~10k steps.
            m_probe: ProbeConfig { window: 4, spacing: 1, probe_steps: 256, exec_steps: 2048 },
            ..Spec::paper(Kind::Elasync, m)
        }),
        Box::new(|m| Spec { y: 16, ..Spec::paper(Kind::Interval, m) }),
        Box::new(|m| Spec {
            y: 16,
            policy: YPolicy::Decay,
            decay_every: 1024,
            ..Spec::paper(Kind::Interval, m)
        }),
        Box::new(|m| Spec {
            y: 16,
            policy: YPolicy::Probe,
            y_probe: ProbeConfig { window: 4, spacing: 4, probe_steps: 256, exec_steps: 2048 },
            ..Spec::paper(Kind::Interval, m)
        }),
    ];
    let mut runs: Vec<Vec<Run>> = Vec::new();
    println!(
        "\n### Runs ({} s each, accuracy on the first {} test images)\n",
        args.seconds, args.eval_limit
    );
    println!("| algorithm | m | updates | accept rate | E[τ] | best acc | final acc |");
    println!("|---|---|---|---|---|---|---|");
    for make in &algos {
        let mut row = Vec::new();
        for &m in &args.threads {
            let r = run_one(
                &data,
                &make(m),
                16,
                args.seconds,
                Some(args.snapshot_every),
                args.eval_limit,
            )?;
            println!(
                "| {} | {m} | {} | {:.3} | {:.2} | {:.4} | {:.4} |",
                r.label,
                r.updates,
                r.accept_rate,
                r.mean_tau,
                best(&r),
                r.curve.last().map_or(0.0, |c| c.1)
            );
            row.push(r);
        }
        runs.push(row);
    }
    // The common target: the highest accuracy every algorithm reached (paper's Table 1).
    let best_of = |row: &[Run]| row.iter().map(best).fold(0.0, f64::max);
    let target = runs.iter().map(|r| best_of(r)).fold(f64::INFINITY, f64::min);
    let async_row = &runs[1];
    let async_best_t =
        async_row.iter().filter_map(|r| time_to(r, target)).fold(f64::INFINITY, f64::min);
    println!("\n### Table 1 (target = {:.4}, the best accuracy every algorithm reached)\n", target);
    let async_best_w =
        async_row.iter().filter_map(|r| work_to(r, target)).min().unwrap_or(u64::MAX);
    println!(
        "| algorithm | best acc | avg acc over m | best time to target (s) | ÷ Async | avg time to target (s) | m of best time | fewest gradients to target | ÷ Async |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in &runs {
        let accs: Vec<f64> = row.iter().map(best).collect();
        let avg = accs.iter().sum::<f64>() / accs.len() as f64;
        let times: Vec<Option<f64>> = row.iter().map(|r| time_to(r, target)).collect();
        let (bt, bm) = times
            .iter()
            .zip(row)
            .filter_map(|(t, r)| t.map(|t| (t, r.threads)))
            .fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a });
        let avg_t = if times.iter().all(Option::is_some) {
            format!("{:.1}", times.iter().flatten().sum::<f64>() / times.len() as f64)
        } else {
            "*".into()
        };
        let bw = row.iter().filter_map(|r| work_to(r, target)).min();
        let (bw, bw_ratio) = match bw {
            Some(w) => (w.to_string(), format!("{:.2}", w as f64 / async_best_w as f64)),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {:.4} | {:.4} | {:.1} | {:.2} | {avg_t} | {bm} | {bw} | {bw_ratio} |",
            row[0].label,
            best_of(row),
            avg,
            bt,
            bt / async_best_t
        );
    }
    println!("\n(*: the target was not reached at some m)");
    println!("\n### Gradients computed to the target, per m\n");
    let header: String = args.threads.iter().map(|m| format!(" m={m} |")).collect();
    println!("| algorithm |{header}");
    println!("|---|{}", "---|".repeat(args.threads.len()));
    for row in &runs {
        let cells: String = row
            .iter()
            .map(|r| work_to(r, target).map_or(" — |".to_string(), |w| format!(" {w} |")))
            .collect();
        println!("| {} |{cells}", row[0].label);
    }
    // Fig. 4: best accuracy vs m; Fig. 5: accuracy over time at the largest m.
    let per_algo = |f: &dyn Fn(&Run) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|row| Series {
                label: row[0].label.clone(),
                points: row.iter().map(|r| (r.threads as f64, f(r))).collect(),
            })
            .collect()
    };
    line_chart(
        &args.out.join("interval_fig4_best_acc_vs_threads.png"),
        &chart("best test accuracy vs threads", "threads m", "accuracy", true),
        &per_algo(&best),
    )?;
    line_chart(
        &args.out.join("interval_fig4_time_to_target_vs_threads.png"),
        &chart("time to the common target vs threads", "threads m", "seconds", true),
        &per_algo(&|r| time_to(r, target).unwrap_or(f64::NAN)),
    )?;
    let biggest = args.threads.len() - 1;
    let curves: Vec<Series> = runs
        .iter()
        .map(|row| Series {
            label: row[biggest].label.clone(),
            points: row[biggest].curve.iter().map(|c| (c.0, c.1)).collect(),
        })
        .collect();
    line_chart(
        &args.out.join("interval_fig5_acc_over_time.png"),
        &chart("test accuracy over time, largest m", "wall time (s)", "accuracy", false),
        &curves,
    )?;
    Ok(())
}
