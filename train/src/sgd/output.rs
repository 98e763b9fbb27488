//! `--out DIR`: the run as CSV files and PNG plots.

use super::train::TrainOutcome;
use crate::plot::{Chart, Series, bar_chart, line_chart};
use std::fmt::Write as _;
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
    let mut curve =
        String::from("updates,started,wall_s,test_loss,test_acc,accept_rate,mean_tau\n");
    for p in &outcome.curve {
        writeln!(
            curve,
            "{},{},{:.4},{:.6},{:.6},{:.6},{:.4}",
            p.updates, p.started, p.wall_s, p.test_loss, p.test_acc, p.accept_rate, p.mean_tau
        )?;
    }
    std::fs::write(dir.join("curve.csv"), curve)?;
    let mut steps = String::from("index,worker,accepted,tau,loss,end_s\n");
    for s in &outcome.report.steps {
        let tau = s.tau.map(|t| t.to_string()).unwrap_or_default();
        let end = s.end.as_secs_f64();
        writeln!(steps, "{},{},{},{tau},{},{end:.6}", s.index, s.worker, s.accepted(), s.loss)?;
    }
    std::fs::write(dir.join("steps.csv"), steps)?;
    if !outcome.workers.is_empty() {
        let mut w = format!("worker,{}\n", WORKER_COLUMNS.join(","));
        for (k, t) in outcome.workers.iter().enumerate() {
            writeln!(w, "{k},{}", worker_cells(t).join(","))?;
        }
        std::fs::write(dir.join("workers.csv"), w)?;
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
