//! Small PNG charts (plotters, bitmap backend) with an embedded font, for every trainer's
//! `--out` (the SGD curves and histograms, the KGE MRR figures in [`crate::kge::io::plot`]).
//!
//! plotters is built without its system-font feature, so text needs a font we supply: DejaVu
//! Sans Mono (`train/assets/`, Bitstream Vera / public-domain license beside it), compiled into
//! the binary and registered once as `"sans-serif"`; it is the only font in the crate.
//!
//! ```no_run
//! use ordo_train::plot::{Chart, Series, line_chart};
//! let s = Series { label: "async".into(), points: vec![(0.0, 0.1), (1.0, 0.7)] };
//! line_chart(
//!     std::path::Path::new("acc.png"),
//!     &Chart { title: "test accuracy", x_label: "s", y_label: "acc", log2_x: false },
//!     &[s],
//! )?;
//! # Ok::<(), ordo_train::plot::PlotError>(())
//! ```

use crate::atomic_fs;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;
use thiserror::Error;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "sans-serif";

/// Why a chart was not written.
#[derive(Debug, Error)]
pub enum PlotError {
    /// The embedded font was rejected.
    #[error("the embedded font could not be loaded")]
    Font,
    /// Nothing to draw (no series, or no finite points).
    #[error("chart {0:?} has no finite points to draw")]
    Empty(String),
    /// A data file beside the chart (e.g. a CSV) could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The chart could not be put in place (see [`crate::atomic_fs::replace_file`]).
    #[error(transparent)]
    Staged(#[from] crate::atomic_fs::StagedError),
    /// plotters failed (e.g. the file could not be written).
    #[error("drawing {path}: {message}")]
    Draw {
        /// The PNG being written.
        path: String,
        /// plotters' message.
        message: String,
    },
}

/// One named line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// `(x, y)` points in drawing order; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
}

/// Titles and axis kind of a chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chart<'a> {
    /// Caption.
    pub title: &'a str,
    /// x-axis description.
    pub x_label: &'a str,
    /// y-axis description.
    pub y_label: &'a str,
    /// Plot x on a log₂ scale (x must be > 0; ticks show the original values).
    pub log2_x: bool,
}

/// How a line chart is drawn beyond its titles; [`LineStyle::default`] is what [`line_chart`]
/// uses (800×500, ranges fitted to the data, Palette99 colors, lines only, legend middle right).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineStyle<'a> {
    /// Image size in pixels.
    pub size: (u32, u32),
    /// Fixed x range (in plotted units); `None` fits the data with 5% padding.
    pub x_range: Option<(f64, f64)>,
    /// Fixed y range; `None` fits the data with 5% padding.
    pub y_range: Option<(f64, f64)>,
    /// Mark every point with a dot.
    pub markers: bool,
    /// Draw earlier series wider (`2 + 2·(n−1−i)` px), so a later line that equals an earlier
    /// one (e.g. OAC on top of sync) does not hide it; otherwise all lines are 2 px.
    pub widen_earlier: bool,
    /// Put the legend in the lower right instead of the middle right (plotters' default).
    pub legend_lower_right: bool,
    /// Line colors as RGB, cycled; empty = plotters' Palette99.
    pub palette: &'a [(u8, u8, u8)],
}

impl Default for LineStyle<'_> {
    fn default() -> Self {
        LineStyle {
            size: (800, 500),
            x_range: None,
            y_range: None,
            markers: false,
            widen_earlier: false,
            legend_lower_right: false,
            palette: &[],
        }
    }
}

fn font() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

fn draw_err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> PlotError + '_ {
    move |e| PlotError::Draw { path: path.display().to_string(), message: e.to_string() }
}

/// Padded `[lo, hi]` of some values (a unit range around a single value).
fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) =
        values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
    if !lo.is_finite() {
        return None;
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { 0.5 };
    Some((lo - pad, hi + pad))
}

/// Draw `series` as lines with a legend into the PNG `path` (800×500).
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> Result<(), PlotError> {
    line_chart_styled(path, chart, &LineStyle::default(), series)
}

/// [`line_chart`] with a [`LineStyle`].
pub fn line_chart_styled(
    path: &Path,
    chart: &Chart<'_>,
    style: &LineStyle<'_>,
    series: &[Series],
) -> Result<(), PlotError> {
    // Drawn beside `path` and renamed over it: a reader (or a crash, or a full disk) never sees
    // half a chart, and one that has the old chart open keeps it whole.
    atomic_fs::replace_file(path, |tmp| draw_lines(tmp, chart, style, series))
}

fn draw_lines(
    path: &Path,
    chart: &Chart<'_>,
    style: &LineStyle<'_>,
    series: &[Series],
) -> Result<(), PlotError> {
    font()?;
    let tx = |x: f64| if chart.log2_x { x.log2() } else { x };
    let pts: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .map(|&(x, y)| (tx(x), y))
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect()
        })
        .collect();
    let all = || pts.iter().flatten();
    let empty = || PlotError::Empty(chart.title.to_string());
    if all().next().is_none() {
        return Err(empty());
    }
    let (x0, x1) = style.x_range.or_else(|| bounds(all().map(|p| p.0))).ok_or_else(empty)?;
    let (y0, y1) = style.y_range.or_else(|| bounds(all().map(|p| p.1))).ok_or_else(empty)?;
    let err = draw_err(path);
    let root = BitMapBackend::new(path, style.size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let log2 = chart.log2_x;
    let fmt_x = move |x: &f64| {
        if log2 {
            // Ticks only at powers of two.
            if (x - x.round()).abs() < 0.02 {
                format!("{}", x.round().exp2())
            } else {
                String::new()
            }
        } else {
            format!("{x:.3}").trim_end_matches('0').trim_end_matches('.').to_string()
        }
    };
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&fmt_x)
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|e| err(&e))?;
    let n = series.len();
    for (i, (s, p)) in series.iter().zip(&pts).enumerate() {
        let color = match style.palette {
            [] => Palette99::pick(i).to_rgba(),
            pal => {
                let (r, g, b) = pal[i % pal.len()];
                RGBColor(r, g, b).to_rgba()
            }
        };
        let width = if style.widen_earlier { 2 + 2 * (n - 1 - i) as u32 } else { 2 };
        ctx.draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(width)))
            .map_err(|e| err(&e))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        if style.markers {
            ctx.draw_series(p.iter().map(|&q| Circle::new(q, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    let position = if style.legend_lower_right {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::MiddleRight
    };
    ctx.configure_series_labels()
        .position(position)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Draw bars: `bars[i] = (category, value)` as a bar chart into the PNG `path` (800×500),
/// replacing it as [`line_chart_styled`] does.
pub fn bar_chart(path: &Path, chart: &Chart<'_>, bars: &[(String, f64)]) -> Result<(), PlotError> {
    atomic_fs::replace_file(path, |tmp| draw_bars(tmp, chart, bars))
}

fn draw_bars(path: &Path, chart: &Chart<'_>, bars: &[(String, f64)]) -> Result<(), PlotError> {
    font()?;
    let empty = || PlotError::Empty(chart.title.to_string());
    let (_, y1) = bounds(bars.iter().map(|b| b.1).filter(|v| v.is_finite()).chain([0.0]))
        .ok_or_else(empty)?;
    if bars.is_empty() {
        return Err(empty());
    }
    let err = draw_err(path);
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = bars.len();
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..y1)
        .map_err(|e| err(&e))?;
    let label = |x: &f64| {
        let i = x.floor() as usize;
        if (x - i as f64 - 0.5).abs() < 0.26 {
            bars.get(i).map(|b| b.0.clone()).unwrap_or_default()
        } else {
            String::new()
        }
    };
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&label)
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|e| err(&e))?;
    let color = Palette99::pick(0).to_rgba();
    ctx.draw_series(bars.iter().enumerate().filter(|(_, b)| b.1.is_finite()).map(|(i, b)| {
        Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.9, b.1)], color.filled())
    }))
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("ordo-plot-{}-{name}", std::process::id()))
    }

    #[test]
    fn writes_png_files() {
        let s =
            Series { label: "a".into(), points: vec![(1.0, 0.5), (4.0, 0.7), (16.0, f64::NAN)] };
        for log2_x in [false, true] {
            let p = tmp(&format!("line{log2_x}.png"));
            let chart = Chart { title: "t", x_label: "x", y_label: "y", log2_x };
            line_chart(&p, &chart, std::slice::from_ref(&s)).unwrap();
            assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        }
        let p = tmp("styled.png");
        let style = LineStyle {
            size: (900, 600),
            x_range: Some((0.0, 20.0)),
            y_range: Some((0.0, 1.0)),
            markers: true,
            widen_earlier: true,
            legend_lower_right: true,
            palette: &[(200, 30, 30)],
        };
        let chart = Chart { title: "s", x_label: "x", y_label: "y", log2_x: false };
        line_chart_styled(&p, &chart, &style, &[s.clone(), s]).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        let p = tmp("bar.png");
        let chart = Chart { title: "b", x_label: "x", y_label: "y", log2_x: false };
        bar_chart(&p, &chart, &[("one".into(), 1.0), ("two".into(), 3.0)]).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
    }

    /// A chart is replaced, not rewritten: a reader holding the old file (here a second link
    /// to it) still has the whole old chart, and no temporary is left beside the new one.
    #[test]
    fn a_chart_is_replaced_whole_not_written_in_place() {
        let dir = tmp("replace");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (p, held) = (dir.join("c.png"), dir.join("held.png"));
        let chart = Chart { title: "t", x_label: "x", y_label: "y", log2_x: false };
        let line = |y: f64| vec![Series { label: "a".into(), points: vec![(0.0, 0.0), (1.0, y)] }];
        line_chart(&p, &chart, &line(1.0)).unwrap();
        let old = std::fs::read(&p).unwrap();
        std::fs::hard_link(&p, &held).unwrap();
        line_chart(&p, &chart, &line(-1.0)).unwrap();
        let new = std::fs::read(&p).unwrap();
        assert_ne!(new, old, "the chart was not redrawn");
        assert_eq!(std::fs::read(&held).unwrap(), old, "the old chart was overwritten in place");
        // Bars too: drawing over `held` (now one link of the old chart) leaves `p` alone.
        std::fs::remove_file(&held).unwrap();
        std::fs::hard_link(&p, &held).unwrap();
        bar_chart(&held, &chart, &[("one".into(), 1.0)]).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), new, "the bars were drawn into the line chart");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["c.png", "held.png"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let chart = Chart { title: "e", x_label: "x", y_label: "y", log2_x: false };
        let s = Series { label: "a".into(), points: vec![(f64::NAN, 1.0)] };
        assert!(matches!(line_chart(&tmp("e.png"), &chart, &[s]), Err(PlotError::Empty(_))));
        assert!(matches!(bar_chart(&tmp("e2.png"), &chart, &[]), Err(PlotError::Empty(_))));
    }
}
