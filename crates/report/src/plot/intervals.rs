//! Points with intervals at a few ordered x positions (e.g. 1/8, 1/4, 1/2 and all of training),
//! one colour per group: each point is drawn with its interval as an error bar, a group's
//! points at one position sit side by side, and a line joins the group's mean at each position.
//! For unordered categories (e.g. POS classes) [`category_interval_plot`] draws the same points
//! without the joining line and with a line at zero. The y range holds every point and interval
//! end; the legend has its own panel on the right, never on the data.
//! [`super::interval_grid`] draws several such charts as panels on one shared y range (e.g. one
//! class of pairs a panel).

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::line::pad;
use super::{
    axis_style, check_range, finite_range, label_style, max_text_width, plot_err, render,
    series_colour, ticker, title_style, Figure,
};
use crate::{PlotOptions, ReportError, Result};

/// One measured point: its x position (an index into the plot's positions), value and interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalPoint {
    /// Index of the x position.
    pub at: usize,
    /// The value.
    pub y: f64,
    /// The interval (lower, upper), if known.
    pub interval: Option<(f64, f64)>,
}

/// A named group of points drawn in one colour.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IntervalGroup {
    /// Legend entry.
    pub name: String,
    /// Its points (several may share a position).
    pub points: Vec<IntervalPoint>,
    /// Index into the palette; `None`: the group's own index. Two groups of one colour show
    /// two measures of one thing (e.g. a raw and a corrected correlation).
    pub colour: Option<usize>,
    /// Hollow markers and a thin joining line, for the secondary measure of a colour.
    pub hollow: bool,
}

/// Draws `groups` over the ordered x positions named by `positions` to `path` (PNG or SVG).
/// `opts.x_range` is ignored (the positions are evenly spaced); `opts.y_range` overrides the
/// range that holds every value and interval.
pub fn interval_plot(
    path: &Path,
    positions: &[String],
    groups: &[IntervalGroup],
    opts: &PlotOptions,
) -> Result<()> {
    draw_intervals(path, positions, groups, opts, true)
}

/// Draws `groups` over unordered categories (e.g. POS classes, one x position each) to `path`:
/// as [`interval_plot`], without a line between categories, and with a reference line at zero
/// when the y range holds it.
pub fn category_interval_plot(
    path: &Path,
    categories: &[String],
    groups: &[IntervalGroup],
    opts: &PlotOptions,
) -> Result<()> {
    draw_intervals(path, categories, groups, opts, false)
}

/// Both single plots: `ordered` joins each group's means and leaves out the zero line.
fn draw_intervals(
    path: &Path,
    positions: &[String],
    groups: &[IntervalGroup],
    opts: &PlotOptions,
    ordered: bool,
) -> Result<()> {
    check_groups(positions, groups)?;
    let y_range = y_range(groups, opts)?;
    render(
        path,
        &IntervalPlot {
            chart: IntervalChart {
                positions,
                groups,
                y_range,
                ordered,
                zero_line: !ordered,
            },
            opts,
        },
    )
}

/// Refuses no positions, no points, a point past the positions, and a value or interval that
/// is not finite or not ordered.
pub(super) fn check_groups(positions: &[String], groups: &[IntervalGroup]) -> Result<()> {
    if positions.is_empty() || groups.iter().all(|g| g.points.is_empty()) {
        return Err(ReportError::invalid(
            "interval plot needs at least one position and one point",
        ));
    }
    for g in groups {
        for p in &g.points {
            if p.at >= positions.len() {
                return Err(ReportError::invalid(format!(
                    "group {:?}: point at position {} of {}",
                    g.name,
                    p.at,
                    positions.len()
                )));
            }
            let (lo, hi) = p.interval.unwrap_or((p.y, p.y));
            if !(p.y.is_finite() && lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(ReportError::invalid(format!(
                    "group {:?}: a point or interval is not finite or not ordered",
                    g.name
                )));
            }
        }
    }
    Ok(())
}

/// `opts.y_range`, else the padded range of every value and interval end of `groups`.
pub(super) fn y_range<'g>(
    groups: impl IntoIterator<Item = &'g IntervalGroup>,
    opts: &PlotOptions,
) -> Result<(f64, f64)> {
    let ends = groups
        .into_iter()
        .flat_map(|g| g.points.iter())
        .flat_map(|p| {
            let (lo, hi) = p.interval.unwrap_or((p.y, p.y));
            [p.y, lo, hi]
        });
    match opts.y_range {
        Some(r) => check_range(r, "y_range"),
        None => Ok(pad(
            finite_range(ends).ok_or_else(|| ReportError::invalid("no finite values"))?
        )),
    }
}

/// One chart's content: groups over positions on a y range.
pub(super) struct IntervalChart<'a> {
    pub(super) positions: &'a [String],
    pub(super) groups: &'a [IntervalGroup],
    pub(super) y_range: (f64, f64),
    /// Join each group's means.
    pub(super) ordered: bool,
    /// Draw a line at y = 0 when the range holds it.
    pub(super) zero_line: bool,
}

/// What surrounds one chart: its caption and axis descriptions (empty: none).
pub(super) struct Frame<'a> {
    pub(super) caption: &'a str,
    pub(super) caption_style: TextStyle<'a>,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
}

impl IntervalChart<'_> {
    /// x of point `k` of `n` sharing position `at` in group `g` of `ng`: groups side by side
    /// within 70% of a position's slot, a group's own points spread within its share.
    fn x_of(&self, at: usize, g: usize, ng: usize, k: usize, n: usize) -> f64 {
        let slot = 0.7 / ng.max(1) as f64;
        let group_x = at as f64 - 0.35 + slot * (g as f64 + 0.5);
        let spread = slot * 0.6;
        match n {
            0 | 1 => group_x,
            _ => group_x - spread / 2.0 + spread * k as f64 / (n - 1) as f64,
        }
    }

    /// The axes, the zero line (with `zero_line`) and every group on `area`.
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        frame: Frame,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let n = self.positions.len();
        let mut chart = ChartBuilder::on(area)
            .caption(frame.caption, frame.caption_style)
            .margin(14)
            // The same areas with or without a description: a grid's plots then align.
            .x_label_area_size(56)
            .y_label_area_size(72)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, self.y_range.0..self.y_range.1)
            .map_err(plot_err)?;
        let names = self.positions;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(215, 215, 215))
            .x_labels(n)
            .x_label_formatter(&|x: &f64| {
                let i = x.round();
                match (i >= 0.0 && (x - i).abs() < 1e-6).then(|| names.get(i as usize)) {
                    Some(Some(s)) => s.clone(),
                    _ => String::new(),
                }
            })
            .y_label_formatter(&ticker(self.y_range.1 - self.y_range.0))
            .x_desc(frame.x_desc)
            .y_desc(frame.y_desc)
            .axis_desc_style(axis_style())
            .label_style(label_style())
            .draw()
            .map_err(plot_err)?;
        if self.zero_line && self.y_range.0 < 0.0 && self.y_range.1 > 0.0 {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(-0.5, 0.0), (n as f64 - 0.5, 0.0)],
                    RGBColor(90, 90, 90).stroke_width(1),
                )))
                .map_err(plot_err)?;
        }
        for (gi, g) in self.groups.iter().enumerate() {
            self.draw_group(&mut chart, gi, g)?;
        }
        Ok(())
    }
}

/// A single interval plot: one chart and its legend.
struct IntervalPlot<'a> {
    chart: IntervalChart<'a>,
    opts: &'a PlotOptions,
}

impl IntervalPlot<'_> {
    fn legend(&self) -> Vec<(String, RGBColor, bool)> {
        (self.chart.groups.iter().enumerate())
            .map(|(gi, g)| {
                let colour = series_colour(g.colour.unwrap_or(gi));
                (g.name.clone(), colour, g.hollow)
            })
            .collect()
    }
}

impl Figure for IntervalPlot<'_> {
    fn size(&self) -> (u32, u32) {
        let (w, h) = self.opts.size.unwrap_or((900, 560));
        (w + legend_width(&self.legend()), h)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let legend = self.legend();
        let (plot_area, legend_area) = split_off_legend(root, &legend);
        let frame = Frame {
            caption: &self.opts.title,
            caption_style: title_style(),
            x_desc: &self.opts.x_label,
            y_desc: &self.opts.y_label,
        };
        self.chart.draw(&plot_area, frame)?;
        draw_legend(&legend_area, &legend, 60)
    }
}

/// The chart of an interval plot: positions on x, values on y.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

impl IntervalChart<'_> {
    /// Group `gi`'s points with their intervals, and (ordered positions only) the line through
    /// its mean at each position.
    fn draw_group<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        gi: usize,
        g: &IntervalGroup,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let ng = self.groups.len();
        let colour = series_colour(g.colour.unwrap_or(gi));
        let mut means = Vec::new();
        for at in 0..self.positions.len() {
            let here: Vec<&IntervalPoint> = g.points.iter().filter(|p| p.at == at).collect();
            for (k, p) in here.iter().enumerate() {
                let x = self.x_of(at, gi, ng, k, here.len());
                draw_point(chart, x, p, colour, g.hollow)?;
            }
            if !here.is_empty() {
                let m = here.iter().map(|p| p.y).sum::<f64>() / here.len() as f64;
                means.push((self.x_of(at, gi, ng, 0, 1), m));
            }
        }
        if self.ordered {
            let width = if g.hollow { 1 } else { 2 };
            chart
                .draw_series(std::iter::once(PathElement::new(
                    means,
                    colour.mix(0.7).stroke_width(width),
                )))
                .map_err(plot_err)?;
        }
        Ok(())
    }
}

/// Width in pixels of a legend panel of `entries`.
pub(super) fn legend_width(entries: &[(String, RGBColor, bool)]) -> u32 {
    let names: Vec<String> = entries.iter().map(|e| e.0.clone()).collect();
    max_text_width(&names, &label_style()) + 48
}

/// `root` split into the plot's area and, at its right edge, the legend panel of `entries`.
pub(super) fn split_off_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, bool)],
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = root.dim_in_pixel();
    root.split_horizontally(w - legend_width(entries))
}

/// The legend panel: one marker and name per entry, the first at `top` pixels.
pub(super) fn draw_legend<DB: DrawingBackend>(
    legend: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, bool)],
    top: i32,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let style = label_style();
    for (k, (name, colour, hollow)) in entries.iter().enumerate() {
        let y = top + 24 * k as i32;
        legend
            .draw(&Circle::new((14, y), 5, marker_style(*colour, *hollow)))
            .map_err(plot_err)?;
        legend
            .draw(&Text::new(name.clone(), (28, y - 8), style.clone()))
            .map_err(plot_err)?;
    }
    Ok(())
}

/// A filled marker, or a hollow ring of the same colour.
fn marker_style(colour: RGBColor, hollow: bool) -> ShapeStyle {
    match hollow {
        true => colour.stroke_width(2),
        false => colour.filled(),
    }
}

/// One point at `x`: its interval as an error bar with caps (when it has one), then the marker.
fn draw_point<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    x: f64,
    p: &IntervalPoint,
    colour: RGBColor,
    hollow: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    if let Some((lo, hi)) = p.interval {
        let cap = 0.012;
        let bars = [
            vec![(x, lo), (x, hi)],
            vec![(x - cap, lo), (x + cap, lo)],
            vec![(x - cap, hi), (x + cap, hi)],
        ];
        for b in bars {
            chart
                .draw_series(std::iter::once(PathElement::new(b, colour.stroke_width(1))))
                .map_err(plot_err)?;
        }
    }
    if hollow {
        // A white disc first, so the ring reads as hollow over grid lines and its own bar.
        chart
            .draw_series(std::iter::once(Circle::new((x, p.y), 4, WHITE.filled())))
            .map_err(plot_err)?;
    }
    chart
        .draw_series(std::iter::once(Circle::new(
            (x, p.y),
            4,
            marker_style(colour, hollow),
        )))
        .map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_points_are_refused_and_good_ones_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let pos: Vec<String> = ["1/8", "1/4", "1/2", "1"].map(String::from).to_vec();
        let g = |y: f64, iv: Option<(f64, f64)>, at| IntervalGroup {
            name: "a × b".into(),
            points: vec![IntervalPoint {
                at,
                y,
                interval: iv,
            }],
            ..IntervalGroup::default()
        };
        let f = dir.path().join("p.png");
        let o = PlotOptions::default();
        assert!(interval_plot(&f, &pos, &[g(0.5, Some((0.6, 0.4)), 0)], &o).is_err());
        assert!(interval_plot(&f, &pos, &[g(f64::NAN, None, 0)], &o).is_err());
        assert!(interval_plot(&f, &pos, &[g(0.5, None, 4)], &o).is_err());
        assert!(interval_plot(&f, &[], &[g(0.5, None, 0)], &o).is_err());
        let groups = [g(0.5, Some((0.4, 1.2)), 1), g(-0.3, None, 3)];
        interval_plot(&f, &pos, &groups, &o).unwrap();
        assert!(std::fs::metadata(&f).unwrap().len() > 1000);
    }
}
