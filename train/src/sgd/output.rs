//! `--out DIR`: the run as CSV files and PNG plots.

use super::train::TrainOutcome;
use crate::atomic_fs::replace_file;
use crate::plot::{Chart, Series, bar_chart, line_chart};
use std::path::Path;

/// Write `curve.csv` (one row per evaluation), `steps.csv` (one row per step), `workers.csv`
/// (ASSM / PASSM / PASSM+ only: per-worker steps, restriction savings, lock wait and time split),
/// `accuracy.png`, `loss.png` (test metrics over wall time) and `tau.png` (histogram of τ).
pub fn write_outputs(
    dir: &Path,
    label: &str,
    outcome: &TrainOutcome,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    // Each file is written beside its name and renamed over it (`atomic_fs::replace_file`): a
    // reader, a crash or a full disk never leaves half a file in place of the last one.
    replace_file(&dir.join("curve.csv"), |tmp| write_curve(tmp, outcome))?;
    replace_file(&dir.join("steps.csv"), |tmp| write_steps(tmp, outcome))?;
    if !outcome.workers.is_empty() {
        replace_file(&dir.join("workers.csv"), |tmp| write_workers(tmp, outcome))?;
    }
    let series = |f: fn(&super::train::EvalPoint) -> f64| {
        vec![Series {
            label: label.to_string(),
            points: outcome.curve.iter().map(|p| (p.wall_s, f(p))).collect(),
        }]
    };
    let chart = |title, y_label| Chart { title, x_label: "wall time (s)", y_label, log2_x: false };
    line_chart(
        &dir.join("accuracy.png"),
        &chart("test accuracy", "accuracy"),
        &series(|p| p.test_acc),
    )?;
    line_chart(
        &dir.join("loss.png"),
        &chart("test loss", "cross-entropy"),
        &series(|p| p.test_loss),
    )?;
    // τ histogram, the tail beyond 31 in one last bar.
    const CAP: usize = 32;
    let top = (outcome.report.max_tau() as usize).min(CAP);
    let mut hist = vec![0u64; top + 1];
    outcome
        .report
        .steps
        .iter()
        .filter_map(|s| s.tau)
        .for_each(|t| hist[(t as usize).min(CAP)] += 1);
    let name = |t: usize| if t == CAP { format!("{CAP}+") } else { t.to_string() };
    let bars: Vec<(String, f64)> =
        hist.iter().enumerate().map(|(t, &c)| (name(t), c as f64)).collect();
    let c = Chart {
        title: "staleness of accepted steps",
        x_label: "τ",
        y_label: "steps",
        log2_x: false,
    };
    bar_chart(&dir.join("tau.png"), &c, &bars)?;
    Ok(())
}

type Written = Result<(), Box<dyn std::error::Error>>;

fn write_curve(path: &Path, outcome: &TrainOutcome) -> Written {
    let mut curve = csv::Writer::from_path(path)?;
    curve.write_record([
        "updates",
        "started",
        "wall_s",
        "test_loss",
        "test_acc",
        "accept_rate",
        "mean_tau",
    ])?;
    for p in &outcome.curve {
        curve.write_record([
            p.updates.to_string(),
            p.started.to_string(),
            format!("{:.4}", p.wall_s),
            format!("{:.6}", p.test_loss),
            format!("{:.6}", p.test_acc),
            format!("{:.6}", p.accept_rate),
            format!("{:.4}", p.mean_tau),
        ])?;
    }
    Ok(curve.flush()?)
}

fn write_steps(path: &Path, outcome: &TrainOutcome) -> Written {
    let mut steps = csv::Writer::from_path(path)?;
    steps.write_record(["index", "worker", "accepted", "tau", "loss", "end_s"])?;
    for s in &outcome.report.steps {
        steps.write_record([
            s.index.to_string(),
            s.worker.to_string(),
            s.accepted().to_string(),
            s.tau.map(|t| t.to_string()).unwrap_or_default(),
            s.loss.to_string(),
            format!("{:.6}", s.end.as_secs_f64()),
        ])?;
    }
    Ok(steps.flush()?)
}

fn write_workers(path: &Path, outcome: &TrainOutcome) -> Written {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record(std::iter::once("worker").chain(WORKER_COLUMNS))?;
    for (k, t) in outcome.workers.iter().enumerate() {
        w.write_record(std::iter::once(k.to_string()).chain(worker_cells(t)))?;
    }
    Ok(w.flush()?)
}

/// The columns of a worker's ASSM / PASSM / PASSM+ telemetry (`workers.csv`, the CLI's table).
pub const WORKER_COLUMNS: [&str; 8] = [
    "steps",
    "passm_steps",
    "layers_skipped",
    "params_skipped",
    "lock_wait_s",
    "read_s",
    "compute_s",
    "write_s",
];

/// One worker's telemetry as the cells of [`WORKER_COLUMNS`].
pub fn worker_cells(t: &ordo::sgd::WorkerTelemetry) -> [String; 8] {
    let s = |d: std::time::Duration| format!("{:.6}", d.as_secs_f64());
    [
        t.steps.to_string(),
        t.passm_steps.to_string(),
        t.layers_skipped.to_string(),
        t.params_skipped.to_string(),
        s(t.lock_wait),
        s(t.read),
        s(t.compute),
        s(t.write),
    ]
}
