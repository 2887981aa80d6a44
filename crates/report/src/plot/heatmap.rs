//! Labelled heatmaps (e.g. pairwise R² between models, rows = target, columns = basis).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::colour::{text_on, Scale, NAN_FILL, NAN_MARK};
use super::grid::{GridFrame, BAR_WIDTH, MARGIN};
use super::{
    abbreviate, check_range, finite_range, label_style, max_text_width, plot_err, render, Figure,
    FONT,
};
use crate::{ReportError, Result};

/// Longest label drawn in full; longer ones are shortened with an ellipsis.
const MAX_LABEL_CHARS: usize = 30;

/// Options of [`heatmap`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeatmapOptions {
    /// Title drawn above the plot (empty: none).
    pub title: String,
    /// Description of the x axis (columns), e.g. "basis".
    pub x_label: String,
    /// Description of the y axis (rows), e.g. "target".
    pub y_label: String,
    /// Colour scale range; `None`: the finite values' min and max. Values outside are clamped.
    pub value_range: Option<(f64, f64)>,
    /// Print each cell's value (2 decimals) in the cell.
    pub annotate: bool,
}

/// Draw a heatmap of the row-major `values` (`n_rows × n_cols`) to `path` (PNG or SVG by
/// extension), row 0 at the top, with `row_labels` on the y axis, `col_labels` (rotated) on the
/// x axis, a viridis colour bar, and non-finite cells drawn grey with a diagonal mark (the
/// colour bar's swatch says `NaN`, `±inf` or both; annotated ±∞ cells say `+inf`/`-inf`).
pub fn heatmap(
    path: &Path,
    values: &[f64],
    n_rows: usize,
    n_cols: usize,
    row_labels: &[String],
    col_labels: &[String],
    opts: &HeatmapOptions,
) -> Result<()> {
    if n_rows == 0 || n_cols == 0 {
        return Err(ReportError::invalid(
            "heatmap needs at least one row and one column",
        ));
    }
    if values.len() != n_rows * n_cols {
        return Err(ReportError::invalid(format!(
            "heatmap values have length {}, expected {n_rows} x {n_cols} = {}",
            values.len(),
            n_rows * n_cols
        )));
    }
    if row_labels.len() != n_rows || col_labels.len() != n_cols {
        return Err(ReportError::invalid(format!(
            "heatmap has {n_rows} x {n_cols} cells but {} row labels and {} column labels",
            row_labels.len(),
            col_labels.len()
        )));
    }
    let (lo, hi) = match opts.value_range {
        Some(r) => check_range(r, "heatmap value_range")?,
        None => finite_range(values.iter().copied()).unwrap_or((0.0, 1.0)),
    };
    super::format_of(path)?;
    super::ensure_fonts();
    let fig = Heatmap {
        values,
        n_rows,
        n_cols,
        rows: row_labels
            .iter()
            .map(|l| abbreviate(l, MAX_LABEL_CHARS))
            .collect(),
        cols: col_labels
            .iter()
            .map(|l| abbreviate(l, MAX_LABEL_CHARS))
            .collect(),
        opts,
        lo,
        hi,
        cell: (640 / n_rows.max(n_cols)).clamp(14, 64) as u32,
    };
    render(path, &fig)
}

struct Heatmap<'a> {
    values: &'a [f64],
    n_rows: usize,
    n_cols: usize,
    rows: Vec<String>,
    cols: Vec<String>,
    opts: &'a HeatmapOptions,
    lo: f64,
    hi: f64,
    cell: u32,
}

impl Heatmap<'_> {
    fn title_h(&self) -> u32 {
        if self.opts.title.is_empty() {
            10
        } else {
            TITLE_BAND
        }
    }
    fn desc_w(label: &str) -> u32 {
        if label.is_empty() {
            0
        } else {
            28
        }
    }
    fn y_area(&self) -> u32 {
        max_text_width(&self.rows, &label_style()) + 14 + Self::desc_w(&self.opts.y_label)
    }
    fn x_area(&self) -> u32 {
        max_text_width(&self.cols, &label_style()) + 14 + Self::desc_w(&self.opts.x_label)
    }
}

const TITLE_BAND: u32 = 44;

impl Figure for Heatmap<'_> {
    fn size(&self) -> (u32, u32) {
        let w = self.y_area() + self.n_cols as u32 * self.cell + 2 * MARGIN + BAR_WIDTH;
        let h = self.title_h() + self.n_rows as u32 * self.cell + self.x_area() + 2 * MARGIN;
        let title = super::grid::min_width(&self.opts.title, &self.opts.x_label);
        (w.max(360).max(title), h.max(260))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let frame = self.frame();
        frame.draw_title(root)?;
        for r in 0..self.n_rows {
            for c in 0..self.n_cols {
                self.draw_cell(root, r, c)?;
            }
        }
        self.draw_labels(root)?;
        frame.draw_frame(root)
    }
}

impl Heatmap<'_> {
    /// The grid's top-left corner in pixels.
    fn origin(&self) -> (i32, i32) {
        let left = (MARGIN + self.y_area()) as i32;
        let top = (self.title_h() + MARGIN) as i32;
        (left, top)
    }

    /// The pixel corner of cell (`r`, `c`).
    fn corner(&self, r: usize, c: usize) -> (i32, i32) {
        let (left, top) = self.origin();
        let cell = self.cell as i32;
        (left + c as i32 * cell, top + r as i32 * cell)
    }

    /// Title, axis descriptions, border and colour bar around the grid.
    fn frame(&self) -> GridFrame<'_> {
        let cell = self.cell as i32;
        let (left, top) = self.origin();
        let (gw, gh) = (cell * self.n_cols as i32, cell * self.n_rows as i32);
        GridFrame {
            title: &self.opts.title,
            x_label: (
                &self.opts.x_label,
                top + gh + self.x_area() as i32,
                VPos::Bottom,
            ),
            y_label: &self.opts.y_label,
            left,
            top,
            width: gw,
            height: gh,
            border_inset: 0,
            scale: Scale::Viridis,
            range: (self.lo, self.hi),
            missing: super::grid::missing_label(self.values),
        }
    }

    /// Cell (`r`, `c`): its colour (grey with a diagonal mark when not finite) and, when
    /// annotated, its value.
    fn draw_cell<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        r: usize,
        c: usize,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let cell = self.cell as i32;
        let v = self.values[r * self.n_cols + c];
        let (x, y) = self.corner(r, c);
        let fill = match v.is_finite() {
            true => Scale::Viridis.colour(v, self.lo, self.hi),
            false => NAN_FILL,
        };
        root.draw(&Rectangle::new(
            [(x, y), (x + cell, y + cell)],
            fill.filled(),
        ))
        .map_err(plot_err)?;
        // Grey and crossed, as the colour bar's swatch: not a value on the scale.
        if !v.is_finite() {
            root.draw(&PathElement::new(
                vec![(x, y + cell), (x + cell, y)],
                NAN_MARK.stroke_width(1),
            ))
            .map_err(plot_err)?;
        }
        if self.opts.annotate {
            let text = cell_label(v);
            let annot_size = (self.cell as f64 * 0.3).clamp(8.0, 14.0);
            let style = TextStyle::from((FONT, annot_size).into_font())
                .color(text_on(fill))
                .pos(Pos::new(HPos::Center, VPos::Center));
            root.draw(&Text::new(text, (x + cell / 2, y + cell / 2), style))
                .map_err(plot_err)?;
        }
        Ok(())
    }

    /// Row labels right-aligned left of the grid; column labels rotated, hanging below it.
    fn draw_labels<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let cell = self.cell as i32;
        let (left, top) = self.origin();
        let row_style = label_style().pos(Pos::new(HPos::Right, VPos::Center));
        for (r, l) in self.rows.iter().enumerate() {
            let (_, y) = self.corner(r, 0);
            root.draw(&Text::new(
                l.as_str(),
                (left - 6, y + cell / 2),
                row_style.clone(),
            ))
            .map_err(plot_err)?;
        }
        let col_style = label_style()
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        let below = top + cell * self.n_rows as i32 + 6;
        for (c, l) in self.cols.iter().enumerate() {
            let (x, _) = self.corner(0, c);
            root.draw(&Text::new(
                l.as_str(),
                (x + cell / 2, below),
                col_style.clone(),
            ))
            .map_err(plot_err)?;
        }
        Ok(())
    }
}

/// A cell's annotation: two decimals, or what a non-finite value is (an infinite correlation
/// or z-score is not a missing one).
fn cell_label(v: f64) -> String {
    match v {
        v if v.is_finite() => format!("{v:.2}"),
        v if v == f64::INFINITY => "+inf".to_string(),
        v if v == f64::NEG_INFINITY => "-inf".to_string(),
        _ => "NaN".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::cell_label;

    #[test]
    fn non_finite_cells_say_which_they_are() {
        assert_eq!(cell_label(0.456), "0.46");
        assert_eq!(cell_label(f64::INFINITY), "+inf");
        assert_eq!(cell_label(f64::NEG_INFINITY), "-inf");
        assert_eq!(cell_label(f64::NAN), "NaN");
    }
}
