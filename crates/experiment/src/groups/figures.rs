//! The word groups' figures: Fig. 5 (loadings of the most frequent words), Fig. 6 (clusters
//! per word), Fig. 7 (each group's strongest words) and the ICA fit's trajectory.

use std::path::Path;

use report::{MatrixOptions, PlotOptions};

use super::{IcaGroups, WordGroup};
use crate::data::CorpusData;
use crate::error::Result;

/// The `n` members of largest |loading|, largest first (members come by signed loading, so a
/// strong negative one would otherwise fall behind every positive one).
fn strongest(members: &[u32], loadings: &[f32], n: usize) -> Vec<(u32, f64)> {
    let mut all: Vec<(u32, f64)> = members
        .iter()
        .zip(loadings)
        .map(|(&t, &y)| (t, f64::from(y).abs()))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    all.truncate(n);
    all
}

/// Fig. 7: a panel per group, most primary first, its 10 strongest words sized by loading.
pub(super) fn group_words_figure(
    path: &Path,
    g: &IcaGroups,
    tok: &corpus::Tokenizer,
) -> Result<()> {
    let mut order: Vec<&WordGroup> = g.groups.iter().collect();
    order.sort_by_key(|w| w.rank.unwrap_or(usize::MAX));
    let panels: Vec<report::WordPanel> = order
        .iter()
        .filter(|w| !w.members.is_empty())
        .map(|w| report::WordPanel {
            title: match w.mean {
                Some(m) => format!("IC{} ({m:+.2})", w.component),
                None => format!("IC{}", w.component),
            },
            words: strongest(&w.members, &w.loadings, 10)
                .into_iter()
                .map(|(t, y)| (tok.id_to_token(t).unwrap_or_default(), y))
                .collect(),
        })
        .collect();
    if panels.is_empty() {
        return Ok(());
    }
    report::word_grid(
        path,
        &panels,
        6,
        "Fig. 7: word groups, most primary first (mean score), words sized by loading",
    )?;
    Ok(())
}

/// The fit's trajectory: log10 of the off-diagonal residual and of the change of `W` per step.
pub(super) fn trajectory_figure(path: &Path, g: &IcaGroups) -> Result<()> {
    let pts = &g.ica.trajectory;
    let series = |name: &str, f: fn(&ica::TrajectoryPoint) -> f64| {
        let (x, y): (Vec<f64>, Vec<f64>) = pts
            .iter()
            .filter(|p| f(p) > 0.0 && f(p).is_finite())
            .map(|p| (p.step as f64, f(p).log10()))
            .unzip();
        report::Series::new(name, x, y)
    };
    let s = [
        series("off-diagonal residual", |p| p.residual),
        series("relative change of W", |p| p.weight_change),
    ];
    let s: Vec<report::Series> = s.into_iter().filter(|s| !s.x.is_empty()).collect();
    if s.is_empty() {
        return Ok(());
    }
    let opts = PlotOptions {
        title: format!(
            "ICA fit: {} after {} steps",
            if g.ica.converged {
                "converged"
            } else {
                "not converged"
            },
            g.ica.steps
        ),
        x_label: "step".into(),
        y_label: "log10".into(),
        ..PlotOptions::default()
    };
    report::line_plot(path, &s, &opts)?;
    Ok(())
}

/// Fig. 5: the ICA loadings of the `n` most frequent words, rows ordered by their dominant
/// component (then by its loading), so that the groups show as blocks.
pub(super) fn loadings_figure(
    path: &Path,
    g: &IcaGroups,
    tokens: &[u32],
    data: &CorpusData,
    n: usize,
) -> Result<()> {
    let n = n.min(tokens.len());
    let d = g.sources.cols();
    let dominant = |i: usize| {
        let row = g.sources.row(i);
        let k = (0..d)
            .max_by(|&a, &b| row[a].abs().total_cmp(&row[b].abs()))
            .unwrap_or(0);
        (k, -row[k].abs())
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let ((ka, va), (kb, vb)) = (dominant(a), dominant(b));
        ka.cmp(&kb).then(va.total_cmp(&vb))
    });
    let values: Vec<f64> = order
        .iter()
        .flat_map(|&i| g.sources.row(i).iter().map(|&v| v as f64))
        .collect();
    let labels: Vec<String> = order
        .iter()
        .map(|&i| data.tok.id_to_token(tokens[i]).unwrap_or_default())
        .collect();
    let opts = MatrixOptions {
        title: format!("ICA loadings of the {n} most frequent words"),
        x_label: "independent component".into(),
        y_label: "word (by dominant component)".into(),
        diverging: true,
        ..MatrixOptions::default()
    };
    report::matrix_image(path, &values, n, d, Some(&labels), &opts)?;
    Ok(())
}

/// Fig. 6: the share of words in 0, 1, 2, ... clusters.
pub(super) fn cluster_count_figure(path: &Path, g: &IcaGroups, n_words: usize) -> Result<()> {
    let cc = &g.counts;
    let labels: Vec<String> = (0..cc.words_with.len()).map(|k| k.to_string()).collect();
    let shares: Vec<f64> = cc
        .words_with
        .iter()
        .map(|&c| c as f64 / n_words.max(1) as f64)
        .collect();
    let opts = PlotOptions {
        title: "Clusters per word (|y| > 2.5)".into(),
        x_label: "number of clusters".into(),
        y_label: "share of words".into(),
        ..PlotOptions::default()
    };
    report::bar_chart(path, &labels, &shares, &opts)?;
    Ok(())
}
