//! A grid of word panels (Fig. 7 of the two-tower paper: each ICA word group's words, the larger
//! the stronger they load on the group): one panel per group with its title, its words stacked
//! from the strongest down, each in a font size proportional to its weight.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{plot_err, render, series_colour, title_style, Figure, FONT};
use crate::{ReportError, Result};

/// One panel: a title and its `(word, weight)` pairs (weights > 0, drawn strongest first).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WordPanel {
    /// Title of the panel (e.g. the group and its mean score).
    pub title: String,
    /// The words and their weights.
    pub words: Vec<(String, f64)>,
}

/// Smallest and largest word font sizes in pixels.
const SIZES: (f64, f64) = (11.0, 26.0);
/// Panel size in pixels.
const PANEL: (u32, u32) = (230, 260);

/// Draws `panels` in a grid of `columns` columns to `path` (PNG or SVG), under `title`. Within
/// a panel a word's font size grows linearly with its weight from 11 to 26 pixels (the panel's
/// largest weight the largest size); at most 10 words a panel.
pub fn word_grid(path: &Path, panels: &[WordPanel], columns: usize, title: &str) -> Result<()> {
    if panels.is_empty() || columns == 0 {
        return Err(ReportError::invalid(
            "word_grid needs a panel and at least one column",
        ));
    }
    for p in panels {
        if p.words.iter().any(|(_, w)| !(w.is_finite() && *w > 0.0)) {
            return Err(ReportError::invalid(format!(
                "panel {:?}: weights must be finite and positive",
                p.title
            )));
        }
    }
    render(
        path,
        &WordGrid {
            panels,
            columns: columns.min(panels.len()),
            title,
        },
    )
}

struct WordGrid<'a> {
    panels: &'a [WordPanel],
    columns: usize,
    title: &'a str,
}

impl WordGrid<'_> {
    fn rows(&self) -> usize {
        self.panels.len().div_ceil(self.columns)
    }
}

impl Figure for WordGrid<'_> {
    fn size(&self) -> (u32, u32) {
        (
            PANEL.0 * self.columns as u32,
            48 + PANEL.1 * self.rows() as u32,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = root.dim_in_pixel();
        let style = title_style().pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new(self.title, (w as i32 / 2, 22), style))
            .map_err(plot_err)?;
        let (_, grid) = root.split_vertically(48);
        let cells = grid.split_evenly((self.rows(), self.columns));
        for (i, (cell, panel)) in cells.iter().zip(self.panels).enumerate() {
            let colour = series_colour(i);
            let (cw, ch) = cell.dim_in_pixel();
            cell.draw(&Rectangle::new(
                [(2, 2), (cw as i32 - 3, ch as i32 - 3)],
                RGBColor(210, 210, 210).stroke_width(1),
            ))
            .map_err(plot_err)?;
            let head = TextStyle::from((FONT, 15).into_font().style(FontStyle::Bold))
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top));
            cell.draw(&Text::new(panel.title.as_str(), (cw as i32 / 2, 8), head))
                .map_err(plot_err)?;
            let max = panel.words.iter().map(|(_, w)| *w).fold(0.0, f64::max);
            let mut y = 32.0;
            for (word, weight) in panel.words.iter().take(10) {
                let size = SIZES.0 + (SIZES.1 - SIZES.0) * weight / max;
                let style = TextStyle::from((FONT, size).into_font())
                    .color(&colour)
                    .pos(Pos::new(HPos::Center, VPos::Top));
                cell.draw(&Text::new(word.as_str(), (cw as i32 / 2, y as i32), style))
                    .map_err(plot_err)?;
                y += size * 1.15;
                if y > ch as f64 - SIZES.0 {
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_are_drawn_and_bad_weights_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("w.png");
        let p = |ws: &[f64]| WordPanel {
            title: "IC3 (+0.41)".into(),
            words: ws.iter().map(|&w| (format!("w{w}"), w)).collect(),
        };
        assert!(word_grid(&f, &[], 3, "t").is_err());
        assert!(word_grid(&f, &[p(&[1.0, -2.0])], 3, "t").is_err());
        word_grid(
            &f,
            &[p(&[3.0, 2.5]), p(&[4.0]), p(&[2.6, 2.6, 2.6])],
            2,
            "Fig. 7",
        )
        .unwrap();
        assert!(std::fs::metadata(&f).unwrap().len() > 1000);
    }
}
