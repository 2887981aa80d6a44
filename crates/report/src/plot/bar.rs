//! Bar charts of labelled values (Fig. 6 of the two-tower paper: how many words fall in how many
//! ICA clusters).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::line::{pad, DEFAULT_SIZE};
use super::{
    abbreviate, axis_style, check_range, label_style, max_text_width, plot_err, render,
    series_colour, ticker, title_style, Figure, PlotOptions,
};
use crate::{ReportError, Result};

/// The y range of bars from 0 to each value, padded on the sides that have bars; all zero
/// values get [0, 1] (an empty range would draw nothing).
fn auto_range(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(0.0, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    let (plo, phi) = pad(super::widen(lo, hi));
    match (lo < 0.0, hi > 0.0) {
        (false, false) => (0.0, 1.0),
        (neg, pos) => (if neg { plo } else { 0.0 }, if pos { phi } else { 0.0 }),
    }
}

/// Draw one bar per `(label, value)` to `path` (PNG or SVG); bars start at 0, labels are
/// rotated when they do not fit under their bar. `opts.x_range` is ignored.
pub fn bar_chart(path: &Path, labels: &[String], values: &[f64], opts: &PlotOptions) -> Result<()> {
    if values.is_empty() {
        return Err(ReportError::invalid("bar_chart needs at least one value"));
    }
    if labels.len() != values.len() {
        return Err(ReportError::invalid(format!(
            "bar_chart has {} labels for {} values",
            labels.len(),
            values.len()
        )));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err(ReportError::invalid("bar_chart values must be finite"));
    }
    let y_range = match opts.y_range {
        Some(r) => check_range(r, "y_range")?,
        None => auto_range(values),
    };
    render(
        path,
        &Bars {
            labels: labels.iter().map(|l| abbreviate(l, 30)).collect(),
            values,
            opts,
            y_range,
        },
    )
}

struct Bars<'a> {
    labels: Vec<String>,
    values: &'a [f64],
    opts: &'a PlotOptions,
    y_range: (f64, f64),
}

impl Bars<'_> {
    /// Pixel width available to each bar's label at the default plot width.
    fn slot(&self) -> u32 {
        let (w, _) = self.size();
        (w.saturating_sub(100)) / self.values.len() as u32
    }
    fn rotate(&self) -> bool {
        max_text_width(&self.labels, &label_style()) + 4 > self.slot()
    }
    fn x_area(&self) -> u32 {
        let desc = if self.opts.x_label.is_empty() { 0 } else { 30 };
        let labels = if self.rotate() {
            max_text_width(&self.labels, &label_style()) + 12
        } else {
            24
        };
        labels + desc
    }
}

impl Figure for Bars<'_> {
    fn size(&self) -> (u32, u32) {
        self.opts.size.unwrap_or(DEFAULT_SIZE)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let n = self.values.len() as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(self.opts.title.as_str(), title_style())
            .margin(14)
            .x_label_area_size(self.x_area())
            .y_label_area_size(72)
            .build_cartesian_2d(-0.5..n - 0.5, self.y_range.0..self.y_range.1)
            .map_err(plot_err)?;
        // Category labels are drawn by hand under each bar, so the mesh draws none on x.
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .light_line_style(RGBColor(240, 240, 240))
            .bold_line_style(RGBColor(220, 220, 220))
            .label_style(label_style())
            .y_label_formatter(&ticker(self.y_range.1 - self.y_range.0))
            .x_desc(self.opts.x_label.as_str())
            .y_desc(self.opts.y_label.as_str())
            .axis_desc_style(axis_style())
            .draw()
            .map_err(plot_err)?;
        let colour = series_colour(0);
        chart
            .draw_series(self.values.iter().enumerate().map(|(i, &v)| {
                let x = i as f64;
                Rectangle::new([(x - 0.4, 0.0), (x + 0.4, v)], colour.filled())
            }))
            .map_err(plot_err)?;
        let style = if self.rotate() {
            label_style()
                .transform(FontTransform::Rotate90)
                .pos(Pos::new(HPos::Left, VPos::Center))
        } else {
            label_style().pos(Pos::new(HPos::Center, VPos::Top))
        };
        for (i, l) in self.labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, self.y_range.0));
            root.draw(&Text::new(l.as_str(), (x, y + 6), style.clone()))
                .map_err(plot_err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_zero_bars_get_a_range_that_can_draw_them() {
        assert_eq!(auto_range(&[0.0, 0.0]), (0.0, 1.0));
        let (lo, hi) = auto_range(&[1.0, 2.0]);
        assert!(lo == 0.0 && hi > 2.0, "{lo} {hi}");
        let (lo, hi) = auto_range(&[-1.0, 0.0]);
        assert!(lo < -1.0 && hi == 0.0, "{lo} {hi}");
    }
}
