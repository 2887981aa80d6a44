//! A grid of histograms, one panel per group, on a shared x range (Fig. 4 of the two-tower
//! paper: preference-score histograms per POS tag).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{
    axis_style, check_range, finite_range, label_style, plot_err, render, series_colour, ticker,
    title_style, Figure,
};
use crate::{ReportError, Result};

/// Bins used when [`HistogramOptions::bins`] is 0.
const DEFAULT_BINS: usize = 30;

/// Options of [`histogram_grid`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramOptions {
    /// Title above the grid (empty: none).
    pub title: String,
    /// Description of every panel's x axis.
    pub x_label: String,
    /// Number of equal-width bins (0: 30).
    pub bins: usize,
    /// Shared x range; `None`: the finite values' min and max over all groups.
    pub range: Option<(f64, f64)>,
    /// Panels per row (0: about the square root of the number of groups).
    pub columns: usize,
    /// Draw a vertical line at x = 0 (scores: left = second tower, right = primary tower).
    pub mark_zero: bool,
}

/// Draw one histogram per `(name, values)` group to `path` (PNG or SVG), panels titled with the
/// name and the number of values; non-finite values are left out and counted in the panel title.
pub fn histogram_grid<S: AsRef<str>, V: AsRef<[f64]>>(
    path: &Path,
    groups: &[(S, V)],
    opts: &HistogramOptions,
) -> Result<()> {
    if groups.is_empty() {
        return Err(ReportError::invalid(
            "histogram_grid needs at least one group",
        ));
    }
    let range = match opts.range {
        Some(r) => check_range(r, "histogram range")?,
        None => finite_range(groups.iter().flat_map(|(_, v)| v.as_ref().iter().copied()))
            .ok_or_else(|| ReportError::invalid("histogram_grid: no finite values in any group"))?,
    };
    let bins = if opts.bins == 0 {
        DEFAULT_BINS
    } else {
        opts.bins
    };
    let panels = groups
        .iter()
        .map(|(name, values)| Panel::new(name.as_ref(), values.as_ref(), range, bins))
        .collect();
    let columns = if opts.columns == 0 {
        (groups.len() as f64).sqrt().ceil() as usize
    } else {
        opts.columns.min(groups.len())
    };
    render(
        path,
        &Grid {
            panels,
            columns,
            range,
            opts,
        },
    )
}

/// One group's bin counts.
struct Panel {
    name: String,
    counts: Vec<u64>,
    n: usize,
    dropped: usize,
}

impl Panel {
    fn new(name: &str, values: &[f64], (lo, hi): (f64, f64), bins: usize) -> Self {
        let mut counts = vec![0u64; bins];
        let mut dropped = 0;
        let mut n = 0;
        for &v in values {
            if !v.is_finite() {
                dropped += 1;
                continue;
            }
            n += 1;
            // Values outside a user range go to the edge bins so nothing is lost silently.
            let t = ((v - lo) / (hi - lo) * bins as f64).floor();
            let b = (t.max(0.0) as usize).min(bins - 1);
            counts[b] += 1;
        }
        Panel {
            name: name.to_string(),
            counts,
            n,
            dropped,
        }
    }

    fn title(&self) -> String {
        if self.dropped > 0 {
            format!("{} (n={}, {} non-finite)", self.name, self.n, self.dropped)
        } else {
            format!("{} (n={})", self.name, self.n)
        }
    }
}

struct Grid<'a> {
    panels: Vec<Panel>,
    columns: usize,
    range: (f64, f64),
    opts: &'a HistogramOptions,
}

const PANEL_W: u32 = 340;
const PANEL_H: u32 = 250;

impl Grid<'_> {
    fn rows(&self) -> usize {
        self.panels.len().div_ceil(self.columns)
    }
    fn title_h(&self) -> u32 {
        if self.opts.title.is_empty() {
            0
        } else {
            44
        }
    }
}

impl Figure for Grid<'_> {
    fn size(&self) -> (u32, u32) {
        (
            PANEL_W * self.columns as u32,
            PANEL_H * self.rows() as u32 + self.title_h(),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let area = if self.opts.title.is_empty() {
            root.clone()
        } else {
            root.titled(&self.opts.title, title_style())
                .map_err(plot_err)?
        };
        let cells = area.split_evenly((self.rows(), self.columns));
        let (lo, hi) = self.range;
        let bins = self.panels[0].counts.len();
        let width = (hi - lo) / bins as f64;
        for (k, (panel, cell)) in self.panels.iter().zip(&cells).enumerate() {
            let top = panel.counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.08;
            let mut chart = ChartBuilder::on(cell)
                .caption(
                    panel.title(),
                    (super::FONT, super::LABEL_SIZE + 1, FontStyle::Bold),
                )
                .margin(8)
                .x_label_area_size(if self.opts.x_label.is_empty() { 24 } else { 44 })
                .y_label_area_size(48)
                .build_cartesian_2d(lo..hi, 0f64..top)
                .map_err(plot_err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(RGBColor(240, 240, 240))
                .bold_line_style(RGBColor(220, 220, 220))
                .x_labels(5)
                .y_labels(4)
                .label_style(label_style())
                .x_label_formatter(&ticker(hi - lo))
                .y_label_formatter(&ticker(top))
                .x_desc(self.opts.x_label.as_str())
                .axis_desc_style(axis_style())
                .draw()
                .map_err(plot_err)?;
            let colour = series_colour(k);
            chart
                .draw_series(panel.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(
                    |(b, &c)| {
                        let x0 = lo + width * b as f64;
                        Rectangle::new([(x0, 0.0), (x0 + width, c as f64)], colour.filled())
                    },
                ))
                .map_err(plot_err)?;
            if self.opts.mark_zero && lo < 0.0 && hi > 0.0 {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(0.0, 0.0), (0.0, top)],
                        BLACK.stroke_width(1),
                    )))
                    .map_err(plot_err)?;
            }
        }
        Ok(())
    }
}
