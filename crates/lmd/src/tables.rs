//! Reports of an analysis: the paper's Table 2 (models × settings, last row group ρ) as CSV,
//! JSON and Markdown, square model × model tables, and heatmaps (PNG, SVG) with model names on
//! both axes. Every R² output says "rows = target, columns = basis".

use std::path::{Path, PathBuf};

use report::{Cell, HeatmapOptions, Table};

use crate::analysis::{Analysis, GroupR2};
use crate::error::{LmdError, Result};
use crate::pair_matrix::PairMatrix;

/// The orientation note written into every R² table and plot.
pub const ORIENTATION: &str = "rows = target, columns = basis";

/// Table 2 of the paper: one row per model with its group R²(u_i, {u_-i}) under each setting
/// (one column per setting), and a last row with group ρ. All settings must hold the same models.
pub fn group_table(settings: &[(String, &GroupR2)]) -> Result<Table> {
    let Some((_, first)) = settings.first() else {
        return Err(LmdError::InvalidArgument(
            "group table needs at least one setting".into(),
        ));
    };
    if let Some((label, _)) = settings.iter().find(|(_, g)| g.names != first.names) {
        return Err(LmdError::InvalidArgument(format!(
            "setting {label} holds other models than {}",
            settings[0].0
        )));
    }
    let mut header = vec!["model".to_string()];
    header.extend(settings.iter().map(|(label, _)| label.clone()));
    let mut table = Table::new(header)
        .with_title("Group R²(u_i, {u_-i}) of every model on all the others")
        .with_note(format!(
            "held-out pooled R² of the row's model (target) on all other models (basis); last row: group ρ = mean over models; {ORIENTATION}"
        ));
    for (i, name) in first.names.iter().enumerate() {
        let mut row = vec![Cell::from(name.as_str())];
        row.extend(settings.iter().map(|(_, g)| Cell::from(g.r2[i])));
        table.push_row(row);
    }
    let mut last = vec![Cell::from("group ρ")];
    last.extend(settings.iter().map(|(_, g)| Cell::from(g.rho())));
    table.push_row(last);
    Ok(table)
}

/// A model × model table of `m` (first column: the row's model).
pub fn pair_table(m: &PairMatrix, title: &str, note: &str) -> Table {
    let mut header = vec!["target \\ basis".to_string()];
    header.extend(m.names.iter().cloned());
    let mut table = Table::new(header).with_title(title).with_note(note);
    for (i, name) in m.names.iter().enumerate() {
        let mut row = vec![Cell::from(name.as_str())];
        row.extend((0..m.len()).map(|j| Cell::from(m.get(i, j))));
        table.push_row(row);
    }
    table
}

/// Draws `m` as a heatmap (PNG or SVG by the extension of `path`) with the model names on both
/// axes (rows: target, columns: basis), on the colour range `range`.
pub fn pair_heatmap(
    path: &Path,
    m: &PairMatrix,
    title: &str,
    range: Option<(f64, f64)>,
) -> Result<()> {
    let opts = HeatmapOptions {
        title: title.to_string(),
        x_label: "basis".into(),
        y_label: "target".into(),
        value_range: range,
        annotate: m.len() <= 16,
    };
    report::heatmap(path, &m.values, m.len(), m.len(), &m.names, &m.names, &opts)?;
    Ok(())
}

/// Writes an analysis into `dir`: `pairwise_r2`, `pairwise_rho`, `cka` tables (CSV, Markdown,
/// JSON) and heatmaps (PNG, SVG), and the group table `group_r2`. Returns the files written.
pub fn write_analysis(dir: &Path, a: &Analysis) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| LmdError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let setting = a.ridge.label();
    let items = [
        (
            "pairwise_r2",
            &a.pairwise_r2,
            format!("Pairwise held-out R² ({setting})"),
            format!("R²(target | basis), fit on train, scored on test; {ORIENTATION}; diagonal = 1 by definition"),
        ),
        (
            "pairwise_rho",
            &a.pairwise_rho,
            format!("Pairwise ρ ({setting})"),
            format!("ρ(u, v) = (R²(u, v) + R²(v, u)) / 2, symmetric; {ORIENTATION}"),
        ),
        (
            "cka",
            &a.cka,
            "Linear CKA (test split)".to_string(),
            "linear CKA of centred embeddings, symmetric".to_string(),
        ),
    ];
    let mut files = Vec::new();
    for (stem, m, title, note) in items {
        files.extend(pair_table(m, &title, &note).write_all(dir, stem)?);
        for ext in ["png", "svg"] {
            let path = dir.join(format!("{stem}.{ext}"));
            pair_heatmap(&path, m, &title, Some((0.0, 1.0)))?;
            files.push(path);
        }
    }
    files.extend(group_table(&[(setting, &a.group)])?.write_all(dir, "group_r2")?);
    Ok(files)
}
