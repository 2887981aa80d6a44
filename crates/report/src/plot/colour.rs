//! Colour scales and the colour bar shared by the heatmap and the matrix image.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{label_style, plot_err, ticker};
use crate::Result;

/// Fill of NaN (and other non-finite) cells: a mid grey absent from both scales.
pub(crate) const NAN_FILL: RGBColor = RGBColor(200, 200, 200);
/// Cross drawn over NaN and ±∞ cells so they read as off the scale, not as a value.
pub(crate) const NAN_MARK: RGBColor = RGBColor(110, 110, 110);

/// A continuous colour scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Sequential (matplotlib's viridis): low = dark purple, high = yellow.
    Viridis,
    /// Diverging blue - white - red, white at the middle of the range.
    Diverging,
}

impl Scale {
    /// Colour of `v` on the range `[lo, hi]` (clamped).
    pub(crate) fn colour(self, v: f64, lo: f64, hi: f64) -> RGBColor {
        let t = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        match self {
            Scale::Viridis => ViridisRGB::get_color(t as f32),
            Scale::Diverging => {
                const STOPS: [(f64, f64, f64); 3] = [
                    (33.0, 102.0, 172.0),
                    (247.0, 247.0, 247.0),
                    (178.0, 24.0, 43.0),
                ];
                let (a, b, u) = if t < 0.5 {
                    (STOPS[0], STOPS[1], t * 2.0)
                } else {
                    (STOPS[1], STOPS[2], (t - 0.5) * 2.0)
                };
                let mix = |x: f64, y: f64| (x + (y - x) * u).round() as u8;
                RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
            }
        }
    }
}

/// Black or white, whichever reads better on `bg` (by relative luminance).
pub(crate) fn text_on(bg: RGBColor) -> &'static RGBColor {
    let l = 0.2126 * bg.0 as f64 + 0.7152 * bg.1 as f64 + 0.0722 * bg.2 as f64;
    if l > 140.0 {
        &BLACK
    } else {
        &WHITE
    }
}

/// Draw a vertical colour bar for `[lo, hi]` on `area`, with tick labels, and a grey crossed
/// swatch labelled `missing` underneath when there is one.
pub(crate) fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    scale: Scale,
    lo: f64,
    hi: f64,
    missing: Option<&str>,
    top: u32,
    bottom: u32,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (_, h) = area.dim_in_pixel();
    let nan_space: u32 = if missing.is_some() { 40 } else { 0 };
    let bar_area = area.margin(top, bottom + nan_space, 4, 4);
    let mut chart = ChartBuilder::on(&bar_area)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..1f64, lo..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .disable_y_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_style(label_style())
        .y_label_formatter(&ticker(hi - lo))
        .draw()
        .map_err(plot_err)?;
    const STEPS: usize = 128;
    let step = (hi - lo) / STEPS as f64;
    chart
        .draw_series((0..STEPS).map(|i| {
            let a = lo + step * i as f64;
            let c = scale.colour(a + step / 2.0, lo, hi);
            Rectangle::new([(0.0, a), (1.0, a + step)], c.filled())
        }))
        .map_err(plot_err)?;
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(0.0, lo), (1.0, hi)],
            BLACK.stroke_width(1),
        )))
        .map_err(plot_err)?;
    if let Some(label) = missing {
        let y0 = h as i32 - bottom as i32 - nan_space as i32 + 12;
        let x0 = 64;
        area.draw(&Rectangle::new(
            [(x0, y0), (x0 + 18, y0 + 18)],
            NAN_FILL.filled(),
        ))
        .map_err(plot_err)?;
        area.draw(&PathElement::new(
            vec![(x0, y0), (x0 + 18, y0 + 18)],
            NAN_MARK.stroke_width(1),
        ))
        .map_err(plot_err)?;
        area.draw(&Text::new(label, (x0 + 24, y0 + 2), label_style()))
            .map_err(plot_err)?;
    }
    Ok(())
}
