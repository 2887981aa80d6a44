//! Section 5.3 of the two-tower paper for one run: PCA and Amari ICA of the trained shared
//! embedding of the most frequent tokens, word clusters at |y| > 2.5, Table 3 (each
//! component's typical words and their preference), Fig. 5 (loadings of the most frequent
//! words) and Fig. 6 (clusters per word).

use std::path::{Path, PathBuf};

use prefscore::{top_tokens, Bootstrap, ScoreKind};
use report::{MatrixOptions, PlotOptions};
use serde::Serialize;

use corpus::Tokenizer;

use crate::data::CorpusData;
use crate::error::io_at;
use crate::run::{shared_embedding, trained_model, ScoredRun};
use crate::{ExperimentError, Result};

/// What the word-group analysis uses.
#[derive(Debug, Clone, PartialEq)]
pub struct WordGroupSettings {
    /// The most frequent tokens of the training text analysed (5000, as in the paper).
    pub top_n: usize,
    /// PCA dimension before ICA (128, capped by the embedding width).
    pub dim: usize,
    /// Words shown in Fig. 5 (500).
    pub fig_words: usize,
    /// The ICA optimiser.
    pub ica: ica::AmariConfig,
    /// Intervals of the per-component means.
    pub bootstrap: Bootstrap,
}

impl Default for WordGroupSettings {
    /// The paper's 5000 words, d = 128, 500 words in Fig. 5, the converging ICA default.
    fn default() -> Self {
        Self {
            top_n: 5000,
            dim: 128,
            fig_words: 500,
            ica: ica::AmariConfig::default(),
            bootstrap: Bootstrap::default(),
        }
    }
}

/// What [`word_groups`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct WordGroupOutputs {
    /// Table 3 (CSV, Markdown, JSON).
    pub table3: Vec<PathBuf>,
    /// Fig. 5.
    pub fig5: PathBuf,
    /// Fig. 6.
    pub fig6: PathBuf,
    /// The fit beside the paper's statistics (`ica_fit.{csv,md,json}`).
    pub fit: Vec<PathBuf>,
    /// The fit's residual and change of `W` against its steps (`fig_ica_trajectory.png`).
    pub trajectory: PathBuf,
}

/// The paper's statistics of its fit (section 5.3): 80% of source values in [−1, 1], 45% of
/// words in exactly one group, 13% in none, 1.45 groups per word.
pub const PAPER_STATISTICS: [(&str, f64); 4] = [
    ("share of source values in [-1, 1]", 0.80),
    ("share of words in exactly one group", 0.45),
    ("share of words in no group", 0.13),
    ("groups per word", 1.45),
];

/// The fit's record beside the paper's statistics, as a table.
pub fn fit_table(g: &IcaGroups) -> report::Table {
    let mut t = report::Table::new(
        ["statistic", "this fit", "paper"]
            .map(String::from)
            .to_vec(),
    )
    .with_title("The ICA fit of the word groups and the paper's statistics")
    .with_note(
        "a word is in a group when |y_k| > 2.5; converged: the fit met its stopping rule before \
         its step cap (the paper's preset has none and runs 10^4 steps)",
    )
    .with_precision(4);
    let ours = [
        g.within_unit,
        g.counts.exactly_one,
        g.counts.none,
        g.counts.mean,
    ];
    for ((name, paper), v) in PAPER_STATISTICS.iter().zip(ours) {
        t.push_row(vec![(*name).into(), v.into(), (*paper).into()]);
    }
    let none = || report::Cell::from(None::<f64>);
    t.push_row(vec![
        "PCA dimension d".into(),
        g.dim.into(),
        128usize.into(),
    ]);
    t.push_row(vec![
        "converged".into(),
        (if g.ica.converged { "yes" } else { "no" }).into(),
        "".into(),
    ]);
    t.push_row(vec!["steps".into(), g.ica.steps.into(), 10_000usize.into()]);
    t.push_row(vec![
        "final off-diagonal residual".into(),
        g.ica.residual.into(),
        none(),
    ]);
    t.push_row(vec![
        "final relative change of W".into(),
        g.ica.weight_change.into(),
        none(),
    ]);
    t
}

/// The fit's trajectory: log10 of the off-diagonal residual and of the change of `W` per step.
fn trajectory_figure(path: &Path, g: &IcaGroups) -> Result<()> {
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

/// Runs the word-group analysis of `run` (its loaded model, or the embedding of its final
/// phase-1 checkpoint) and writes Table 3, Fig. 5 and Fig. 6 to `out`.
pub fn word_groups(
    run: &ScoredRun,
    data: &CorpusData,
    settings: &WordGroupSettings,
    out: &Path,
) -> Result<(IcaGroups, Vec<u32>, WordGroupOutputs)> {
    let emb = match &run.model {
        Some(m) => shared_embedding(m)?,
        None => shared_embedding(&trained_model(run, data, &candle_core::Device::Cpu)?)?,
    };
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let scores = crate::analysis::RunScores::new(run, ScoreKind::ArithmeticMean)?;
    // The most frequent tokens of the training text, scored or not (special tokens never occur
    // in the counts).
    let tokens: Vec<u32> = top_tokens(&data.freq, settings.top_n, &[])
        .into_iter()
        .filter(|&t| data.freq[t as usize] > 0)
        .collect();
    let g = ica_groups(
        &emb,
        &tokens,
        &data.freq,
        &scores.scores.values,
        &data.tok,
        settings.dim,
        settings.ica.clone(),
        &settings.bootstrap,
    )?;
    let table3 = g.table.write_all(out, "table3_ica_groups")?;
    let fig5 = out.join("fig5_ica_loadings.png");
    loadings_figure(&fig5, &g, &tokens, data, settings.fig_words)?;
    let fig6 = out.join("fig6_cluster_counts.png");
    cluster_count_figure(&fig6, &g, tokens.len())?;
    let fit = fit_table(&g).write_all(out, "ica_fit")?;
    let trajectory = out.join("fig_ica_trajectory.png");
    trajectory_figure(&trajectory, &g)?;
    let outputs = WordGroupOutputs {
        table3,
        fig5,
        fig6,
        fit,
        trajectory,
    };
    Ok((g, tokens, outputs))
}

/// Fig. 5: the ICA loadings of the `n` most frequent words (rows by frequency).
fn loadings_figure(
    path: &Path,
    g: &IcaGroups,
    tokens: &[u32],
    data: &CorpusData,
    n: usize,
) -> Result<()> {
    let n = n.min(tokens.len());
    let d = g.sources.cols();
    let values: Vec<f64> = (0..n)
        .flat_map(|i| g.sources.row(i).iter().map(|&v| v as f64))
        .collect();
    let labels: Vec<String> = tokens[..n]
        .iter()
        .map(|&t| data.tok.id_to_token(t).unwrap_or_default())
        .collect();
    let opts = MatrixOptions {
        title: format!("ICA loadings of the {n} most frequent words"),
        x_label: "independent component".into(),
        y_label: "word (by frequency)".into(),
        diverging: true,
        ..MatrixOptions::default()
    };
    report::matrix_image(path, &values, n, d, Some(&labels), &opts)?;
    Ok(())
}

/// Fig. 6: the share of words in 0, 1, 2, ... clusters.
fn cluster_count_figure(path: &Path, g: &IcaGroups, n_words: usize) -> Result<()> {
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

/// ICA word groups of an embedding (paper section 5.3) and their preference (Table 3).
pub struct IcaGroups {
    /// PCA dimension d.
    pub dim: usize,
    /// The ICA fit (steps, convergence).
    pub ica: ica::IcaResult,
    /// Independent components of every word (rows in the order of `tokens`), signed so that
    /// each component's long tail is positive.
    pub sources: ica::Matrix,
    /// Share of words in no / exactly one cluster, mean clusters per word.
    pub counts: ica::analysis::ClusterCounts,
    /// Share of the source values in [−1, 1] (the paper: 80%).
    pub within_unit: f64,
    /// Table 3: per component its typical words, size, mean score and rank.
    pub table: report::Table,
}

/// PCA to `dim` (capped by the embedding width and the number of words) and Amari ICA
/// (`cfg`) of the embedding rows of `tokens`; clusters at the paper's threshold 2.5; each
/// component's words summarised by `prefscore::group_summary` against `scores` over `tokens`.
#[allow(clippy::too_many_arguments)]
pub fn ica_groups(
    embedding: &[Vec<f32>],
    tokens: &[u32],
    freq: &[u64],
    scores: &[Option<f64>],
    tok: &Tokenizer,
    dim: usize,
    cfg: ica::AmariConfig,
    boot: &prefscore::Bootstrap,
) -> Result<IcaGroups> {
    use ica::analysis::{cluster_counts, clusters, component_words, sign_to_positive_skew};
    let width = embedding
        .first()
        .ok_or_else(|| ExperimentError::Invalid("empty embedding".into()))?
        .len();
    let rows: Vec<f32> = tokens
        .iter()
        .flat_map(|&id| embedding[id as usize].iter().copied())
        .collect();
    let x = ica::Matrix::new(tokens.len(), width, rows)?;
    let dim = dim.min(width).min(tokens.len().saturating_sub(1)).max(1);
    let pca = ica::Pca::fit(&x, &ica::PcaConfig::new(dim))?;
    let white = pca.transform(&x)?;
    let fit = ica::AmariIca::new(cfg).fit(&white)?;
    let mut sources = fit.sources(&white)?;
    sign_to_positive_skew(&mut sources);
    let per_word = clusters(&sources, ica::analysis::PAPER_THRESHOLD)?;
    let counts = cluster_counts(&per_word);
    let within_unit = ica::analysis::fraction_within(sources.as_slice(), 1.0);
    let freqs: Vec<u64> = tokens.iter().map(|&id| freq[id as usize]).collect();
    let comps = component_words(&sources, ica::analysis::PAPER_THRESHOLD, &freqs, 5)?;
    let groups: Vec<(String, Vec<u32>)> = comps
        .iter()
        .map(|c| {
            let ids = c.members.iter().map(|&(i, _)| tokens[i]).collect();
            (format!("IC{}", c.component), ids)
        })
        .collect();
    let stats = prefscore::group_summary(scores, &groups, tokens, boot)?;
    let mut table = report::Table::new(
        [
            "component",
            "typical words",
            "words",
            "mean score",
            "95% low",
            "95% high",
            "mean rank",
            "rank (0 = most primary)",
            "share primary",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Table 3: ICA word groups of the shared embedding and their preference")
    .with_note(
        "a word is in component k when |y_k| > 2.5; typical words: the 5 most frequent members; \
         rank among the reference tokens by score, descending",
    )
    .with_precision(3);
    for (c, g) in comps.iter().zip(&stats) {
        let typical: Vec<String> = c
            .typical
            .iter()
            .filter_map(|&i| tok.id_to_token(tokens[i]))
            .collect();
        let (lo, hi) = g.interval.map(|i| (i.lo, i.hi)).unzip();
        table.push_row(vec![
            report::Cell::from(c.component),
            report::Cell::from(typical.join(" ")),
            report::Cell::from(c.members.len()),
            report::Cell::from(g.mean),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(g.mean_rank),
            report::Cell::from(g.mean_rank_fraction),
            report::Cell::from(g.share_primary),
        ]);
    }
    Ok(IcaGroups {
        dim,
        ica: fit,
        sources,
        counts,
        within_unit,
        table,
    })
}
