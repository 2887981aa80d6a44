//! lmsplit-report: result tables (CSV, Markdown, JSON) and plots (PNG, SVG) for lmsplit
//! experiments.
//!
//! Tables: build a [`Table`] from a header and rows of [`Cell`]s, then
//! [`Table::write_all`] writes `stem.csv`, `stem.md` and `stem.json`.
//! Plots: [`heatmap`], [`line_plot`], [`scatter`], [`histogram_grid`], [`bar_chart`] and
//! [`matrix_image`] write PNG or SVG, chosen by the path's extension. Text is drawn with the
//! DejaVu Sans font compiled into the binary, so no system fonts are needed.
//! Files: every table and figure is written whole or not at all ([`files::write_atomic`]).
//! Progress: [`Progress`] says whether long loops draw bars and where messages go (the caller's
//! choice; the libraries never print).

#![deny(missing_docs)]

mod error;
mod plot;
mod progress;
mod table;

pub use error::{ReportError, Result};
pub use plot::{
    bar_chart, category_interval_plot, heatmap, histogram_grid, interval_grid, interval_plot,
    line_plot, matrix_image, register_fonts, scatter, word_grid, HeatmapOptions, HistogramOptions,
    IntervalGroup, IntervalPanel, IntervalPoint, MatrixOptions, PlotOptions, Series, WordPanel,
};
pub use progress::{Bar, Progress};
pub use table::{Cell, Table, DEFAULT_PRECISION};
