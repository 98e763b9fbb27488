//! The CSV and PNG outputs of `--out DIR`: valid MRR against training wall time and against
//! epoch, one line per mode (the OAC paper's Figures 2 and 3 for our data).
//!
//! The figures are drawn by the crate's one chart module, [`crate::plot`]; this file only picks
//! the points, the axes (from zero) and the style (900×600, dots, earlier modes wider).

use crate::kge::run::results::{EpochStats, RunResult};
pub use crate::plot::PlotError;
use crate::plot::{Chart, LineStyle, Series, line_chart_styled};
use std::path::Path;

/// The horizontal axis of a plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Training wall time in seconds (Figure 2).
    WallTime,
    /// Epoch number (Figure 3).
    Epoch,
}

/// One row per (mode, epoch): `mode,epoch,wall_s,epoch_s,loss,mrr,hits1,hits3,hits10,split`
/// with split `valid`, then one `test` row per mode (its last epoch, no epoch time or loss).
/// Written beside `path` and renamed over it ([`crate::atomic_fs::replace_file`]): a reader, a crash
/// or a full disk never leaves half a file in place of the last one.
pub fn write_csv(path: &Path, results: &[RunResult]) -> Result<(), PlotError> {
    crate::atomic_fs::replace_file(path, |tmp| write_csv_at(tmp, results))
}

fn write_csv_at(path: &Path, results: &[RunResult]) -> Result<(), PlotError> {
    let err = |source| PlotError::Io { path: path.display().to_string(), source };
    let mut w = csv::Writer::from_path(path).map_err(|e| err(e.into()))?;
    let mut row = |cells: [String; 10]| w.write_record(cells).map_err(|e| err(e.into()));
    row([
        "mode", "epoch", "wall_s", "epoch_s", "loss", "mrr", "hits1", "hits3", "hits10", "split",
    ]
    .map(String::from))?;
    for r in results {
        let m = |v: f64| format!("{v:.6}");
        for e in &r.epochs {
            row([
                r.mode.name().into(),
                e.epoch.to_string(),
                format!("{:.4}", e.wall_s),
                format!("{:.4}", e.epoch_s),
                m(e.loss),
                m(e.valid.mrr),
                m(e.valid.hits1),
                m(e.valid.hits3),
                m(e.valid.hits10),
                "valid".into(),
            ])?;
        }
        let last = r.epochs.last();
        row([
            r.mode.name().into(),
            last.map_or(0, |e| e.epoch).to_string(),
            format!("{:.4}", last.map_or(0.0, |e| e.wall_s)),
            String::new(),
            String::new(),
            m(r.test.mrr),
            m(r.test.hits1),
            m(r.test.hits3),
            m(r.test.hits10),
            "test".into(),
        ])?;
    }
    w.flush().map_err(err)
}

/// Write `metrics.csv` ([`write_csv`]), `mrr_vs_time.png` and `mrr_vs_epoch.png`
/// ([`plot_mrr`]) into the existing directory `dir`.
pub fn write_outputs(dir: &Path, title: &str, results: &[RunResult]) -> Result<(), PlotError> {
    write_csv(&dir.join("metrics.csv"), results)?;
    plot_mrr(&dir.join("mrr_vs_time.png"), title, results, XAxis::WallTime)?;
    plot_mrr(&dir.join("mrr_vs_epoch.png"), title, results, XAxis::Epoch)
}

/// Line colors of the modes, in run order (sync, async, bounded, oac).
const COLORS: [(u8, u8, u8); 4] = [(200, 30, 30), (240, 140, 0), (120, 60, 180), (20, 90, 200)];

/// Plot valid MRR of every run against `x`, as a 900×600 PNG at `path`.
pub fn plot_mrr(
    path: &Path,
    title: &str,
    results: &[RunResult],
    x: XAxis,
) -> Result<(), PlotError> {
    let xval = |e: &EpochStats| match x {
        XAxis::WallTime => e.wall_s,
        XAxis::Epoch => e.epoch as f64,
    };
    let xmax = results.iter().flat_map(|r| r.epochs.iter().map(xval)).fold(1e-9, f64::max);
    let ymax =
        results.iter().flat_map(|r| r.epochs.iter().map(|e| e.valid.mrr)).fold(0.05, f64::max);
    let xlabel = match x {
        XAxis::WallTime => "training wall time (s)",
        XAxis::Epoch => "epoch",
    };
    let series: Vec<Series> = results
        .iter()
        .map(|r| Series {
            label: r.mode.name().to_string(),
            points: r.epochs.iter().map(|e| (xval(e), e.valid.mrr)).collect(),
        })
        .collect();
    let caption = format!("valid MRR vs {xlabel} — {title}");
    let chart =
        Chart { title: &caption, x_label: xlabel, y_label: "filtered valid MRR", log2_x: false };
    let style = LineStyle {
        size: (900, 600),
        x_range: Some((0.0, xmax * 1.03)),
        y_range: Some((0.0, (ymax * 1.08).min(1.0))),
        markers: true,
        widen_earlier: true,
        legend_lower_right: true,
        palette: &COLORS,
    };
    line_chart_styled(path, &chart, &style, &series)
}
