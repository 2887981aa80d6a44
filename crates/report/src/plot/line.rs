//! Line and scatter plots of named series over a numeric x axis (Figs. 3 and 8 of the
//! two-tower paper: scores of several runs sorted by one run; score against frequency index).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{
    axis_style, check_range, finite_range, label_style, plot_err, render, series_colour, ticker,
    title_style, Figure,
};
use crate::{ReportError, Result};

/// Default figure size in pixels.
pub(crate) const DEFAULT_SIZE: (u32, u32) = (900, 600);

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Legend entry (empty: not listed in the legend).
    pub name: String,
    /// x coordinates (same length as `y`).
    pub x: Vec<f64>,
    /// y coordinates.
    pub y: Vec<f64>,
}

impl Series {
    /// A series from explicit coordinates.
    pub fn new(name: impl Into<String>, x: Vec<f64>, y: Vec<f64>) -> Self {
        Series {
            name: name.into(),
            x,
            y,
        }
    }

    /// A series over x = 0, 1, 2, ... (e.g. tokens in a sorted order).
    pub fn from_y(name: impl Into<String>, y: Vec<f64>) -> Self {
        let x = (0..y.len()).map(|i| i as f64).collect();
        Series::new(name, x, y)
    }
}

/// Options shared by [`line_plot`], [`scatter`] and [`crate::bar_chart`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlotOptions {
    /// Title above the plot (empty: none).
    pub title: String,
    /// Description of the x axis.
    pub x_label: String,
    /// Description of the y axis.
    pub y_label: String,
    /// x range; `None`: the data's range.
    pub x_range: Option<(f64, f64)>,
    /// y range; `None`: the data's range (bar charts: from 0).
    pub y_range: Option<(f64, f64)>,
    /// Figure size in pixels; `None`: 900 × 600.
    pub size: Option<(u32, u32)>,
}

/// Draw `series` as lines (points joined in the given order) to `path` (PNG or SVG).
pub fn line_plot(path: &Path, series: &[Series], opts: &PlotOptions) -> Result<()> {
    xy_plot(path, series, opts, Mark::Line)
}

/// Draw `series` as small dots to `path` (PNG or SVG): suited to thousands of points.
pub fn scatter(path: &Path, series: &[Series], opts: &PlotOptions) -> Result<()> {
    xy_plot(path, series, opts, Mark::Dot)
}

#[derive(Clone, Copy)]
enum Mark {
    Line,
    Dot,
}

fn xy_plot(path: &Path, series: &[Series], opts: &PlotOptions, mark: Mark) -> Result<()> {
    if series.is_empty() || series.iter().all(|s| s.x.is_empty()) {
        return Err(ReportError::invalid(
            "plot needs at least one non-empty series",
        ));
    }
    for s in series {
        if s.x.len() != s.y.len() {
            return Err(ReportError::invalid(format!(
                "series {:?} has {} x values but {} y values",
                s.name,
                s.x.len(),
                s.y.len()
            )));
        }
        if s.x.iter().chain(&s.y).any(|v| !v.is_finite()) {
            return Err(ReportError::invalid(format!(
                "series {:?} has non-finite values (filter them out first)",
                s.name
            )));
        }
    }
    let x_range = match opts.x_range {
        Some(r) => check_range(r, "x_range")?,
        None => finite_range(series.iter().flat_map(|s| s.x.iter().copied()))
            .ok_or_else(|| ReportError::invalid("no finite x values"))?,
    };
    let y_range = match opts.y_range {
        Some(r) => check_range(r, "y_range")?,
        None => pad(
            finite_range(series.iter().flat_map(|s| s.y.iter().copied()))
                .ok_or_else(|| ReportError::invalid("no finite y values"))?,
        ),
    };
    render(
        path,
        &XyPlot {
            series,
            opts,
            mark,
            x_range,
            y_range,
        },
    )
}

/// Add 5% head room on both ends of a range.
pub(crate) fn pad((lo, hi): (f64, f64)) -> (f64, f64) {
    let d = (hi - lo) * 0.05;
    (lo - d, hi + d)
}

struct XyPlot<'a> {
    series: &'a [Series],
    opts: &'a PlotOptions,
    mark: Mark,
    x_range: (f64, f64),
    y_range: (f64, f64),
}

impl Figure for XyPlot<'_> {
    fn size(&self) -> (u32, u32) {
        self.opts.size.unwrap_or(DEFAULT_SIZE)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut chart = ChartBuilder::on(root)
            .caption(self.opts.title.as_str(), title_style())
            .margin(14)
            .x_label_area_size(56)
            .y_label_area_size(72)
            .build_cartesian_2d(
                self.x_range.0..self.x_range.1,
                self.y_range.0..self.y_range.1,
            )
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .light_line_style(RGBColor(235, 235, 235))
            .bold_line_style(RGBColor(215, 215, 215))
            .x_desc(self.opts.x_label.as_str())
            .y_desc(self.opts.y_label.as_str())
            .axis_desc_style(axis_style())
            .label_style(label_style())
            .x_label_formatter(&ticker(self.x_range.1 - self.x_range.0))
            .y_label_formatter(&ticker(self.y_range.1 - self.y_range.0))
            .draw()
            .map_err(plot_err)?;
        for (i, s) in self.series.iter().enumerate() {
            let colour = series_colour(i);
            let points = s.x.iter().copied().zip(s.y.iter().copied());
            let drawn = match self.mark {
                // plotters widens a thick stroke with miter joins that overshoot on the steep
                // zig-zags of a dense series: thin lines for dense series stay inside the chart.
                Mark::Line => chart
                    .draw_series(LineSeries::new(
                        points,
                        colour.stroke_width(if s.x.len() > 500 { 1 } else { 2 }),
                    ))
                    .map_err(plot_err)?,
                Mark::Dot => chart
                    .draw_series(points.map(|p| Circle::new(p, 2, colour.mix(0.6).filled())))
                    .map_err(plot_err)?,
            };
            if !s.name.is_empty() {
                drawn.label(s.name.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 4), (x + 16, y + 4)], colour.filled())
                });
            }
        }
        if self.series.iter().any(|s| !s.name.is_empty()) {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(180, 180, 180))
                .label_font(label_style())
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(plot_err)?;
        }
        Ok(())
    }
}
