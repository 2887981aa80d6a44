//! Table 2 of the LMD study (rows = models, columns = T) and its heatmap.

use std::path::PathBuf;

use report::{heatmap, HeatmapOptions, Table};

use super::{Context, LmdTOutcome};
use crate::analysis::{Analysis, GroupR2};
use crate::encoder::Encoder;
use crate::tables::{group_table, ORIENTATION};
use crate::Result;

/// Table 2 (rows = models, columns = T, cells = group R² on all others, last row group ρ),
/// written as `out/table2.{csv,md,json}`.
pub(super) fn write_table2(
    ctx: &Context<'_>,
    per_t: &[(Analysis, LmdTOutcome)],
) -> Result<(Table, Vec<PathBuf>)> {
    let settings: Vec<(String, &GroupR2)> = per_t
        .iter()
        .map(|(a, o)| (format!("T={}", o.t), &a.group))
        .collect();
    let spec = ctx.spec;
    // The sequences sampled, which a small corpus leaves below the ones asked for.
    let sizes: Vec<String> = per_t
        .iter()
        .map(|(_, o)| format!("T={} {}/{}", o.t, o.n_train, o.n_test))
        .collect();
    let table = group_table(&settings)?
        .with_title("Table 2: held-out group R² of each model on all the others, by T")
        .with_note(format!(
            "{ORIENTATION}; sequences train/test {} (asked for {}/{}), pooling {}, {}, corpus {}; last row: group rho (mean over models)",
            sizes.join(", "),
            spec.n_train,
            spec.n_test,
            spec.pooling.as_str(),
            ctx.ridge.label(),
            spec.corpus.display()
        ));
    let files = table.write_all(ctx.out, "table2")?;
    Ok((table, files))
}

/// Table 2 as a heatmap, `out/table2_group_r2.png`.
pub(super) fn write_table2_heatmap(
    ctx: &Context<'_>,
    per_t: &[(Analysis, LmdTOutcome)],
) -> Result<PathBuf> {
    let names: Vec<String> = ctx.encoders.iter().map(|e| e.name().to_string()).collect();
    let grid: Vec<f64> = (0..names.len())
        .flat_map(|i| per_t.iter().map(move |(a, _)| a.group.r2[i]))
        .collect();
    let t_labels: Vec<String> = per_t.iter().map(|(_, o)| format!("T={}", o.t)).collect();
    let path = ctx.out.join("table2_group_r2.png");
    let opts = HeatmapOptions {
        title: "group R² (model on all others)".into(),
        x_label: "T".into(),
        y_label: "model".into(),
        value_range: Some((0.0, 1.0)),
        annotate: true,
    };
    heatmap(
        &path,
        &grid,
        names.len(),
        t_labels.len(),
        &names,
        &t_labels,
        &opts,
    )?;
    Ok(path)
}
