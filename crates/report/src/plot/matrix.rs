//! A large matrix drawn as an image (Fig. 5 of the two-tower paper: ICA loadings of the 500
//! most frequent words on 128 components), with optional, thinned row labels.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::colour::{Scale, NAN_FILL};
use super::grid::{GridFrame, BAR_WIDTH, MARGIN};
use super::{
    abbreviate, check_range, finite_range, label_style, max_text_width, plot_err, render, tick,
    Figure,
};
use crate::{ReportError, Result};

/// Row labels shown when [`MatrixOptions::max_row_labels`] is 0.
const DEFAULT_ROW_LABELS: usize = 40;

/// Options of [`matrix_image`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatrixOptions {
    /// Title above the image (empty: none).
    pub title: String,
    /// Description of the x axis (columns), e.g. "ICA component".
    pub x_label: String,
    /// Description of the y axis (rows), e.g. "word (by frequency)".
    pub y_label: String,
    /// Colour range; `None`: the finite values' range, or ±max|v| when `diverging`.
    pub value_range: Option<(f64, f64)>,
    /// Diverging blue-white-red scale (white at the middle) instead of viridis: for signed
    /// values such as loadings.
    pub diverging: bool,
    /// At most this many row labels are drawn, evenly spaced (0: 40).
    pub max_row_labels: usize,
}

/// Draw the row-major `values` (`n_rows × n_cols`) as an image to `path` (PNG or SVG), row 0 at
/// the top, each cell a small rectangle (1 to 40 pixels a side), non-finite cells grey, with a
/// colour bar, column indices on the x axis and, if given, every k-th of `row_labels`.
pub fn matrix_image(
    path: &Path,
    values: &[f64],
    n_rows: usize,
    n_cols: usize,
    row_labels: Option<&[String]>,
    opts: &MatrixOptions,
) -> Result<()> {
    if n_rows == 0 || n_cols == 0 {
        return Err(ReportError::invalid(
            "matrix_image needs at least one row and one column",
        ));
    }
    if values.len() != n_rows * n_cols {
        return Err(ReportError::invalid(format!(
            "matrix_image values have length {}, expected {n_rows} x {n_cols} = {}",
            values.len(),
            n_rows * n_cols
        )));
    }
    if let Some(l) = row_labels {
        if l.len() != n_rows {
            return Err(ReportError::invalid(format!(
                "matrix_image has {n_rows} rows but {} row labels",
                l.len()
            )));
        }
    }
    let (lo, hi) = match opts.value_range {
        Some(r) => check_range(r, "matrix value_range")?,
        None if opts.diverging => {
            let m = values
                .iter()
                .filter(|v| v.is_finite())
                .fold(0.0f64, |m, v| m.max(v.abs()));
            if m > 0.0 {
                (-m, m)
            } else {
                (-1.0, 1.0)
            }
        }
        None => finite_range(values.iter().copied()).unwrap_or((0.0, 1.0)),
    };
    let max_labels = if opts.max_row_labels == 0 {
        DEFAULT_ROW_LABELS
    } else {
        opts.max_row_labels
    };
    let shown: Vec<(usize, String)> = match row_labels {
        None => Vec::new(),
        Some(l) => {
            let step = n_rows.div_ceil(max_labels).max(1);
            (0..n_rows)
                .step_by(step)
                .map(|r| (r, abbreviate(&l[r], 24)))
                .collect()
        }
    };
    super::format_of(path)?;
    super::ensure_fonts();
    render(
        path,
        &Matrix {
            values,
            n_rows,
            n_cols,
            shown,
            opts,
            lo,
            hi,
            cell_w: (800 / n_cols).clamp(1, 40) as u32,
            cell_h: (900 / n_rows).clamp(1, 40) as u32,
        },
    )
}

struct Matrix<'a> {
    values: &'a [f64],
    n_rows: usize,
    n_cols: usize,
    shown: Vec<(usize, String)>,
    opts: &'a MatrixOptions,
    lo: f64,
    hi: f64,
    cell_w: u32,
    cell_h: u32,
}

impl Matrix<'_> {
    fn title_h(&self) -> u32 {
        if self.opts.title.is_empty() {
            10
        } else {
            44
        }
    }
    fn left(&self) -> u32 {
        let labels: Vec<String> = self.shown.iter().map(|(_, l)| l.clone()).collect();
        let desc = if self.opts.y_label.is_empty() { 0 } else { 28 };
        MARGIN + max_text_width(&labels, &label_style()) + 10 + desc
    }
    fn bottom(&self) -> u32 {
        let desc = if self.opts.x_label.is_empty() { 0 } else { 30 };
        30 + desc + MARGIN
    }
}

impl Figure for Matrix<'_> {
    fn size(&self) -> (u32, u32) {
        let w = self.left() + self.cell_w * self.n_cols as u32 + MARGIN + BAR_WIDTH;
        let h = self.title_h() + MARGIN + self.cell_h * self.n_rows as u32 + self.bottom();
        let title = super::grid::min_width(self.opts.title.as_str(), self.opts.x_label.as_str());
        (w.max(360).max(title), h.max(260))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (cw, ch) = (self.cell_w as i32, self.cell_h as i32);
        let left = self.left() as i32;
        let top = (self.title_h() + MARGIN) as i32;
        let (gw, gh) = (cw * self.n_cols as i32, ch * self.n_rows as i32);
        let scale = if self.opts.diverging {
            Scale::Diverging
        } else {
            Scale::Viridis
        };
        let frame = GridFrame {
            title: &self.opts.title,
            x_label: (&self.opts.x_label, top + gh + 32, VPos::Top),
            y_label: &self.opts.y_label,
            left,
            top,
            width: gw,
            height: gh,
            border_inset: 1,
            scale,
            range: (self.lo, self.hi),
            missing: super::grid::missing_label(self.values),
        };
        frame.draw_title(root)?;
        for r in 0..self.n_rows {
            for c in 0..self.n_cols {
                let v = self.values[r * self.n_cols + c];
                let fill = if v.is_finite() {
                    scale.colour(v, self.lo, self.hi)
                } else {
                    NAN_FILL
                };
                let (x, y) = (left + c as i32 * cw, top + r as i32 * ch);
                root.draw(&Rectangle::new([(x, y), (x + cw, y + ch)], fill.filled()))
                    .map_err(plot_err)?;
            }
        }
        let row_style = label_style().pos(Pos::new(HPos::Right, VPos::Center));
        for (r, l) in &self.shown {
            let y = top + *r as i32 * ch + ch / 2;
            root.draw(&PathElement::new(vec![(left - 5, y), (left - 1, y)], BLACK))
                .map_err(plot_err)?;
            root.draw(&Text::new(l.as_str(), (left - 8, y), row_style.clone()))
                .map_err(plot_err)?;
        }
        // Column indices at about ten evenly spaced ticks.
        let col_style = label_style().pos(Pos::new(HPos::Center, VPos::Top));
        let step = self.n_cols.div_ceil(10).max(1);
        for c in (0..self.n_cols).step_by(step) {
            let x = left + c as i32 * cw + cw / 2;
            root.draw(&PathElement::new(
                vec![(x, top + gh), (x, top + gh + 4)],
                BLACK,
            ))
            .map_err(plot_err)?;
            root.draw(&Text::new(
                tick(c as f64),
                (x, top + gh + 7),
                col_style.clone(),
            ))
            .map_err(plot_err)?;
        }
        frame.draw_frame(root)
    }
}
