//! A grid of interval charts (see [`super::interval_plot`]), one panel each, on one shared y
//! range with one legend: e.g. one class of pairs of runs a panel, so that the classes compare
//! by eye without their points crowding one chart.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::intervals::{
    check_groups, draw_legend, legend_width, split_off_legend, y_range, Frame, IntervalChart,
    IntervalGroup,
};
use super::{max_text_width, plot_err, render, series_colour, title_style, Figure};
use crate::{PlotOptions, ReportError, Result};

/// One panel of [`interval_grid`]: its title and its groups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IntervalPanel {
    /// Title above the panel.
    pub title: String,
    /// Its groups, drawn as in [`super::interval_plot`].
    pub groups: Vec<IntervalGroup>,
}

/// Draws one [`super::interval_plot`] per panel in a grid of `columns` panels a row (0: about the
/// square root of the number of panels) to `path` (PNG or SVG), on one y range that holds
/// every point and interval end of every panel (`opts.y_range` overrides it), so that panels
/// compare by eye, with a line at zero when the range holds it. One legend on the right names
/// each group name once, in its colour where every panel draws it in one colour, else in dark
/// grey (the panels' titles then say what the colours are). `opts.size` is one panel's size
/// (default 420 × 320).
pub fn interval_grid(
    path: &Path,
    positions: &[String],
    panels: &[IntervalPanel],
    columns: usize,
    opts: &PlotOptions,
) -> Result<()> {
    if panels.is_empty() {
        return Err(ReportError::invalid(
            "interval grid needs at least one panel",
        ));
    }
    for panel in panels {
        check_groups(positions, &panel.groups)
            .map_err(|e| ReportError::invalid(format!("panel {:?}: {e}", panel.title)))?;
    }
    let y_range = y_range(panels.iter().flat_map(|p| &p.groups), opts)?;
    let columns = match columns {
        0 => (panels.len() as f64).sqrt().ceil() as usize,
        c => c.min(panels.len()),
    };
    render(
        path,
        &IntervalGrid {
            positions,
            panels,
            columns,
            opts,
            y_range,
        },
    )
}

/// The panels of [`interval_grid`] and their one legend.
struct IntervalGrid<'a> {
    positions: &'a [String],
    panels: &'a [IntervalPanel],
    columns: usize,
    opts: &'a PlotOptions,
    y_range: (f64, f64),
}

/// Height in pixels of a grid's title strip.
const GRID_TITLE_H: u32 = 44;

impl IntervalGrid<'_> {
    fn rows(&self) -> usize {
        self.panels.len().div_ceil(self.columns)
    }

    fn title_h(&self) -> u32 {
        if self.opts.title.is_empty() {
            0
        } else {
            GRID_TITLE_H
        }
    }

    /// Each group name once (first seen), in its colour where every panel draws it in one,
    /// else dark grey.
    fn legend(&self) -> Vec<(String, RGBColor, bool)> {
        let mut out: Vec<(String, RGBColor, bool)> = Vec::new();
        for panel in self.panels {
            for (gi, g) in panel.groups.iter().enumerate() {
                let colour = series_colour(g.colour.unwrap_or(gi));
                match out.iter_mut().find(|(name, ..)| *name == g.name) {
                    Some(entry) if entry.1 != colour => entry.1 = RGBColor(64, 64, 64),
                    Some(_) => {}
                    None => out.push((g.name.clone(), colour, g.hollow)),
                }
            }
        }
        out
    }
}

impl Figure for IntervalGrid<'_> {
    fn size(&self) -> (u32, u32) {
        let (w, h) = self.opts.size.unwrap_or((420, 320));
        // Wide enough for the title over the panels (one or two panels are narrower).
        let title = max_text_width(std::slice::from_ref(&self.opts.title), &title_style()) + 40;
        (
            (w * self.columns as u32).max(title) + legend_width(&self.legend()),
            h * self.rows() as u32 + self.title_h(),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let legend = self.legend();
        let (grid, legend_area) = split_off_legend(root, &legend);
        let grid = match self.opts.title.is_empty() {
            true => grid,
            false => grid
                .titled(&self.opts.title, title_style())
                .map_err(plot_err)?,
        };
        let rows = self.rows();
        let cells = grid.split_evenly((rows, self.columns));
        for (k, (panel, cell)) in self.panels.iter().zip(&cells).enumerate() {
            let column = k % self.columns;
            // Axis descriptions once: x under the bottom panel of each column, y left of each row.
            let bottom = k + self.columns >= self.panels.len();
            let chart = IntervalChart {
                positions: self.positions,
                groups: &panel.groups,
                y_range: self.y_range,
                ordered: true,
                zero_line: true,
            };
            let frame = Frame {
                caption: &panel.title,
                caption_style: (super::FONT, super::LABEL_SIZE + 2, FontStyle::Bold)
                    .into_font()
                    .color(&BLACK),
                x_desc: if bottom { &self.opts.x_label } else { "" },
                y_desc: if column == 0 { &self.opts.y_label } else { "" },
            };
            chart.draw(cell, frame)?;
        }
        draw_legend(&legend_area, &legend, self.title_h() as i32 + 40)
    }
}
