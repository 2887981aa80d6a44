//! Plots written as PNG or SVG (chosen by the file extension), sharing one style.

mod bar;
mod colour;
mod grid;
mod heatmap;
mod histogram;
mod interval_grid;
mod intervals;
mod line;
mod matrix;
mod words;

pub use bar::bar_chart;
pub use heatmap::{heatmap, HeatmapOptions};
pub use histogram::{histogram_grid, HistogramOptions};
pub use interval_grid::{interval_grid, IntervalPanel};
pub use intervals::{category_interval_plot, interval_plot, IntervalGroup, IntervalPoint};
pub use line::{line_plot, scatter, PlotOptions, Series};
pub use matrix::{matrix_image, MatrixOptions};
pub use words::{word_grid, WordPanel};

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{ReportError, Result};

/// Font family every plot uses; registered from the embedded DejaVu Sans bytes.
pub(crate) const FONT: &str = "sans-serif";
/// Title font size in pixels.
pub(crate) const TITLE_SIZE: u32 = 22;
/// Axis description font size in pixels.
pub(crate) const AXIS_SIZE: u32 = 17;
/// Tick label font size in pixels.
pub(crate) const LABEL_SIZE: u32 = 14;

static FONTS: Once = Once::new();

/// Register DejaVu Sans (regular, bold, oblique) as plotters' "sans-serif" family, once (later
/// calls do nothing). Every plot of this crate calls it; call it yourself before drawing with
/// plotters directly in a binary that links this crate (e.g. criterion's plots in a bench):
/// plotters is built with `ab_glyph`, which never loads system fonts, so without it text
/// fails with `FontUnavailable`.
pub fn register_fonts() {
    ensure_fonts();
}

/// See [`register_fonts`].
pub(crate) fn ensure_fonts() {
    FONTS.call_once(|| {
        // The embedded fonts are valid TrueType files; a failure here would be a packaging bug
        // that shows up as a font error from the first draw call.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
        let _ = plotters::style::register_font(FONT, FontStyle::Oblique, dejavu::sans::oblique());
        let _ = plotters::style::register_font(FONT, FontStyle::Italic, dejavu::sans::oblique());
    });
}

/// Output format, from the path's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Png,
    Svg,
}

pub(crate) fn format_of(path: &Path) -> Result<Format> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        _ => Err(ReportError::invalid(format!(
            "plot path {} must end in .png or .svg",
            path.display()
        ))),
    }
}

/// Turn any plotters error into [`ReportError::Plot`].
pub(crate) fn plot_err<E: std::fmt::Display>(e: E) -> ReportError {
    ReportError::Plot(e.to_string())
}

/// A figure that can draw itself on any plotters backend.
pub(crate) trait Figure {
    /// Pixel size (width, height) of the whole figure.
    fn size(&self) -> (u32, u32);
    /// Draw on `root` (already filled white).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

/// Render `fig` to `path` as PNG or SVG (by extension), creating the parent directory. The
/// figure is drawn in memory and the file replaced whole ([`files::write_atomic`]): a drawing
/// that fails, or a process killed while writing, leaves the previous figure as it was.
pub(crate) fn render(path: &Path, fig: &impl Figure) -> Result<()> {
    let format = format_of(path)?;
    ensure_fonts();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
    }
    let size = fig.size();
    let bytes = match format {
        Format::Png => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                root.fill(&WHITE).map_err(plot_err)?;
                fig.draw(&root)?;
                root.present().map_err(plot_err)?;
            }
            encode_png(&rgb, size)?
        }
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                root.fill(&WHITE).map_err(plot_err)?;
                fig.draw(&root)?;
                root.present().map_err(plot_err)?;
            }
            svg.into_bytes()
        }
    };
    Ok(files::write_atomic(path, &bytes)?)
}

/// An 8-bit RGB image of `size` as PNG bytes.
fn encode_png(rgb: &[u8], size: (u32, u32)) -> Result<Vec<u8>> {
    let err = |e: png::EncodingError| ReportError::Plot(format!("encoding the PNG: {e}"));
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, size.0, size.1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(err)?;
    w.write_image_data(rgb).map_err(err)?;
    w.finish().map_err(err)?;
    Ok(out)
}

/// Text style for tick labels.
pub(crate) fn label_style() -> TextStyle<'static> {
    (FONT, LABEL_SIZE).into_font().color(&BLACK)
}

/// Text style for axis descriptions.
pub(crate) fn axis_style() -> TextStyle<'static> {
    (FONT, AXIS_SIZE).into_font().color(&BLACK)
}

/// Text style for titles.
pub(crate) fn title_style() -> TextStyle<'static> {
    (FONT, TITLE_SIZE).into_font().color(&BLACK)
}

/// Width in pixels of the widest of `labels` in `style` (from the font's advances; the fonts
/// must be registered, which [`render`] does before asking a figure for its size).
pub(crate) fn max_text_width(labels: &[String], style: &TextStyle) -> u32 {
    labels
        .iter()
        .filter_map(|l| style.font.box_size(l).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0)
}

/// Shorten `s` to at most `max` characters with a trailing ellipsis.
pub(crate) fn abbreviate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let keep: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{keep}…")
    }
}

/// (min, max) of the finite values, widened when degenerate; `None` when none is finite.
pub(crate) fn finite_range(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return None;
    }
    Some(widen(lo, hi))
}

/// Widen a zero-width range so axes and colour scales stay well-defined.
pub(crate) fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi)
    } else {
        let d = if lo == 0.0 { 0.5 } else { lo.abs() * 0.05 };
        (lo - d, hi + d)
    }
}

/// Check a user-supplied value range: finite and increasing.
pub(crate) fn check_range(range: (f64, f64), what: &str) -> Result<(f64, f64)> {
    let (lo, hi) = range;
    if lo.is_finite() && hi.is_finite() && hi > lo {
        Ok(range)
    } else {
        Err(ReportError::invalid(format!(
            "{what} ({lo}, {hi}) must be finite with min < max"
        )))
    }
}

/// Series colours (the Tableau 10 palette: distinct, colour-blind friendly enough).
pub(crate) fn series_colour(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

/// Tick formatter for an axis spanning `span`: values within 1e-9 × span of 0 (rounding
/// residue of the tick arithmetic, e.g. -2.2e-16) print as 0.
pub(crate) fn ticker(span: f64) -> impl Fn(&f64) -> String {
    move |v: &f64| {
        if v.abs() <= span.abs() * 1e-9 {
            "0".to_string()
        } else {
            tick(*v)
        }
    }
}

/// Format a tick value compactly (up to 3 significant decimals, no trailing zeros).
pub(crate) fn tick(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        return format!("{v:.1e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels() {
        assert_eq!(tick(2.0), "2");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(-0.5), "-0.5");
        assert_eq!(tick(1e-5), "1.0e-5");
        assert_eq!(tick(123456.0), "1.2e5");
        assert_eq!(ticker(2.0)(&-2.2e-16), "0");
        assert_eq!(ticker(2e-12)(&1e-13), "1.0e-13");
        assert_eq!(abbreviate("abcdef", 4), "abc…");
        assert_eq!(abbreviate("abc", 4), "abc");
        assert_eq!(widen(1.0, 1.0), (0.95, 1.05));
        assert_eq!(finite_range([f64::NAN, 2.0, -1.0]), Some((-1.0, 2.0)));
        assert_eq!(finite_range([f64::NAN]), None);
    }
}
