//! What the grid figures (`heatmap`, `matrix_image`) draw around their cells, once: the title
//! above the grid, the grid's border, the axis descriptions and the colour bar on the right.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::colour::{colour_bar, Scale};
use super::{axis_style, plot_err, title_style};
use crate::Result;

/// Width in pixels of the colour bar's strip at the right edge.
pub(crate) const BAR_WIDTH: u32 = 120;
/// Margin in pixels around the figure.
pub(crate) const MARGIN: u32 = 12;

/// The layout and decoration of a grid of cells.
pub(crate) struct GridFrame<'a> {
    /// Title (empty: none).
    pub title: &'a str,
    /// Description below the grid (empty: none), with the y of its anchor and the vertical
    /// side it hangs from.
    pub x_label: (&'a str, i32, VPos),
    /// Description left of the grid, rotated (empty: none).
    pub y_label: &'a str,
    /// The grid's top-left corner and its size in pixels.
    pub left: i32,
    /// See `left`.
    pub top: i32,
    /// See `left`.
    pub width: i32,
    /// See `left`.
    pub height: i32,
    /// Pixels the border stands outside the grid at its top-left (0 or 1).
    pub border_inset: i32,
    /// The colour bar's scale and range, and the label of its swatch for non-finite cells
    /// (none when every cell is finite).
    pub scale: Scale,
    /// See `scale`.
    pub range: (f64, f64),
    /// See `scale` ([`missing_label`]).
    pub missing: Option<&'static str>,
}

/// The colour bar's label for the grey, crossed cells of `values`: `NaN`, `±inf`, or both;
/// none when every value is finite.
pub(crate) fn missing_label(values: &[f64]) -> Option<&'static str> {
    let nan = values.iter().any(|v| v.is_nan());
    let inf = values.iter().any(|v| v.is_infinite());
    match (nan, inf) {
        (true, true) => Some("NaN, ±inf"),
        (true, false) => Some("NaN"),
        (false, true) => Some("±inf"),
        (false, false) => None,
    }
}

impl GridFrame<'_> {
    /// The title, centred over the grid (kept inside the figure).
    pub(crate) fn draw_title<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        if self.title.is_empty() {
            return Ok(());
        }
        let (w, _) = root.dim_in_pixel();
        let style = title_style().pos(Pos::new(HPos::Center, VPos::Center));
        let centre = (self.left + self.width / 2).min((w / 2) as i32);
        let x = inside(centre, text_width(self.title, &title_style()), w);
        root.draw(&Text::new(self.title, (x, 22), style))
            .map_err(plot_err)
    }

    /// The border, the axis descriptions and the colour bar (after the cells).
    pub(crate) fn draw_frame<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (left, top, i) = (self.left, self.top, self.border_inset);
        let (right, bottom) = (left + self.width, top + self.height);
        root.draw(&Rectangle::new(
            [(left - i, top - i), (right, bottom)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?;
        let (x_label, x_y, x_side) = self.x_label;
        if !x_label.is_empty() {
            let style = axis_style().pos(Pos::new(HPos::Center, x_side));
            let (w, _) = root.dim_in_pixel();
            let x = inside(left + self.width / 2, text_width(x_label, &axis_style()), w);
            root.draw(&Text::new(x_label, (x, x_y), style))
                .map_err(plot_err)?;
        }
        if !self.y_label.is_empty() {
            let style = axis_style()
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Top));
            root.draw(&Text::new(
                self.y_label,
                (MARGIN as i32, top + self.height / 2),
                style,
            ))
            .map_err(plot_err)?;
        }
        let (w, h) = root.dim_in_pixel();
        let (_, bar) = root.split_horizontally(w - BAR_WIDTH);
        let (lo, hi) = self.range;
        colour_bar(
            &bar,
            self.scale,
            lo,
            hi,
            self.missing,
            top as u32,
            h.saturating_sub(bottom as u32),
        )
    }
}

/// The width a grid figure needs so that its title and x description are not cut off.
pub(crate) fn min_width(title: &str, x_label: &str) -> u32 {
    let t = text_width(title, &title_style());
    let x = text_width(x_label, &axis_style());
    t.max(x) + 2 * MARGIN + 12
}

fn text_width(text: &str, style: &TextStyle) -> u32 {
    super::max_text_width(&[text.to_string()], style)
}

/// A centred text's x: `centre` where the whole text fits in `w` pixels, else moved in so that
/// no end is cut off.
fn inside(centre: i32, text_w: u32, w: u32) -> i32 {
    let half = (text_w / 2 + 6) as i32;
    centre.min(w as i32 - half).max(half)
}

#[cfg(test)]
mod tests {
    use super::missing_label;

    #[test]
    fn the_colour_bar_names_the_kinds_of_non_finite_cells_there_are() {
        assert_eq!(missing_label(&[0.1, 0.2]), None);
        assert_eq!(missing_label(&[0.1, f64::NAN]), Some("NaN"));
        assert_eq!(missing_label(&[f64::NEG_INFINITY, 0.2]), Some("±inf"));
        assert_eq!(missing_label(&[f64::INFINITY, f64::NAN]), Some("NaN, ±inf"));
    }
}
