//! The CSV and PNG outputs of `--out DIR`: valid MRR against training wall time and against
//! epoch, one line per mode (the OAC paper's Figures 2 and 3 for our data).
//!
//! Text is drawn with DejaVu Sans (`train/assets/`, its license beside it), registered from
//! bytes compiled into the binary, so plots need no system fonts.

use super::train::RunResult;
use plotters::prelude::*;
use std::io::Write;
use std::path::Path;
use std::sync::Once;

/// The font family name the plots use.
const FONT: &str = "ordo-dejavu-sans";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Why an output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// File-system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The drawing backend failed.
    #[error("{path}: cannot draw the plot: {msg}")]
    Draw {
        /// The file.
        path: String,
        /// The backend's message.
        msg: String,
    },
}

/// The horizontal axis of a plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Training wall time in seconds (Figure 2).
    WallTime,
    /// Epoch number (Figure 3).
    Epoch,
}

/// One row per (mode, epoch): `mode,epoch,wall_s,epoch_s,loss,valid_mrr,valid_hits1,
/// valid_hits3,valid_hits10`, then one `test` row per mode with epoch = -1.
pub fn write_csv(path: &Path, results: &[RunResult]) -> Result<(), PlotError> {
    let err = |source| PlotError::Io { path: path.display().to_string(), source };
    let mut s = String::from("mode,epoch,wall_s,epoch_s,loss,mrr,hits1,hits3,hits10,split\n");
    for r in results {
        for e in &r.epochs {
            s += &format!(
                "{},{},{:.4},{:.4},{:.6},{:.6},{:.6},{:.6},{:.6},valid\n",
                r.mode.name(),
                e.epoch,
                e.wall_s,
                e.epoch_s,
                e.loss,
                e.valid.mrr,
                e.valid.hits1,
                e.valid.hits3,
                e.valid.hits10
            );
        }
        let last = r.epochs.last();
        s += &format!(
            "{},{},{:.4},,,{:.6},{:.6},{:.6},{:.6},test\n",
            r.mode.name(),
            last.map_or(0, |e| e.epoch),
            last.map_or(0.0, |e| e.wall_s),
            r.test.mrr,
            r.test.hits1,
            r.test.hits3,
            r.test.hits10
        );
    }
    let tmp = path.with_extension("csv.tmp");
    std::fs::File::create(&tmp).and_then(|mut f| f.write_all(s.as_bytes())).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TrueType font compiled in; failure would only lose the text.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES);
    });
}

const COLORS: [RGBColor; 4] =
    [RGBColor(200, 30, 30), RGBColor(240, 140, 0), RGBColor(120, 60, 180), RGBColor(20, 90, 200)];

/// Plot valid MRR of every run against `x`, as a 900×600 PNG at `path`.
pub fn plot_mrr(
    path: &Path,
    title: &str,
    results: &[RunResult],
    x: XAxis,
) -> Result<(), PlotError> {
    register_font();
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let xval = |e: &super::train::EpochStats| match x {
        XAxis::WallTime => e.wall_s,
        XAxis::Epoch => e.epoch as f64,
    };
    let xmax = results.iter().flat_map(|r| r.epochs.iter().map(xval)).fold(1e-9, f64::max);
    let ymax =
        results.iter().flat_map(|r| r.epochs.iter().map(|e| e.valid.mrr)).fold(0.05, f64::max);
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let xlabel = match x {
        XAxis::WallTime => "training wall time (s)",
        XAxis::Epoch => "epoch",
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("valid MRR vs {xlabel} — {title}"), (FONT, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax * 1.03, 0.0..(ymax * 1.08).min(1.0))
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc("filtered valid MRR")
        .label_style((FONT, 15))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, r) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Earlier series are drawn wider, so a mode whose curve equals sync's (OAC) does not
        // hide it.
        let width = 2 + 2 * (results.len() - 1 - i) as u32;
        let pts: Vec<(f64, f64)> = r.epochs.iter().map(|e| (xval(e), e.valid.mrr)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
            .map_err(|e| draw(&e))?
            .label(r.mode.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| draw(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))
}
