//! Section 5.3 of the two-tower paper for one run: PCA and Amari ICA of the trained shared
//! embedding of the most frequent tokens, word clusters at |y| > 2.5, Table 3 (each
//! component's typical words and their preference), Fig. 5 (loadings of the most frequent
//! words) and Fig. 6 (clusters per word). The figures are drawn in `figures`; the groups scored on
//! several runs (Table 3 across runs) in `by_run`.

use std::path::{Path, PathBuf};

use prefscore::{top_tokens, Bootstrap, ScoreKind};
use serde::Serialize;

use corpus::Tokenizer;

use crate::data::CorpusData;
use crate::error::io_at;
use crate::error::{ExperimentError, Result};
use crate::run::{shared_embedding, ScoredRun};

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
    /// The rows PCA and ICA are fitted on.
    pub rows: FitRows,
}

/// The rows the PCA and the ICA of the word groups are fitted on (the sources of every word are
/// then computed with the fitted transform).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FitRows {
    /// The paper's ("n represents the number of tokens"): the embedding at `positions` corpus
    /// positions of the analysed words, drawn with the seed, so that a word weighs by its
    /// frequency (a draw from the words' training frequencies is a draw of corpus positions
    /// restricted to them).
    CorpusTokens {
        /// Positions drawn.
        positions: usize,
        /// Seed of the draw.
        seed: u64,
    },
    /// Each analysed word once, equally weighted.
    Vocabulary,
}

impl Default for WordGroupSettings {
    /// The paper's 5000 words, d = 128, 500 words in Fig. 5, the converging ICA default, fitted
    /// on 100,000 corpus positions (the paper's weighting).
    fn default() -> Self {
        Self {
            top_n: 5000,
            dim: 128,
            fig_words: 500,
            ica: ica::AmariConfig::default(),
            bootstrap: Bootstrap::default(),
            rows: FitRows::CorpusTokens {
                positions: 100_000,
                seed: 0,
            },
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
    /// Fig. 7: each group's strongest words, sized by loading (`fig7_group_words.png`).
    pub fig7: PathBuf,
}

mod by_run;
mod figures;

pub use by_run::{groups_by_run, groups_by_run_tables, ranks_descending, GroupsByRun};
use figures::{cluster_count_figure, group_words_figure, loadings_figure, trajectory_figure};

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

/// The word-group analysis of `run` (its loaded model, or the embedding of its final
/// phase-1 checkpoint): the groups and the words they were found among, most frequent first
/// ([`write_word_groups`] writes them).
pub fn word_groups(
    run: &ScoredRun,
    data: &CorpusData,
    settings: &WordGroupSettings,
) -> Result<(IcaGroups, Vec<u32>)> {
    let emb = match &run.model {
        Some(m) => shared_embedding(m)?,
        None => shared_embedding(&run.trained_model(data, &candle_core::Device::Cpu)?)?,
    };
    let scores = crate::analysis::RunScores::new(run, ScoreKind::ArithmeticMean)?;
    // The most frequent tokens of the training text, scored or not (special tokens never occur
    // in the counts).
    let tokens: Vec<u32> = top_tokens(&data.freq, settings.top_n, &[])
        .into_iter()
        .filter(|&t| data.freq[t as usize] > 0)
        .collect();
    let input = GroupInput {
        embedding: &emb,
        tokens: &tokens,
        freq: &data.freq,
        scores: &scores.scores.values,
        tok: &data.tok,
    };
    Ok((ica_groups(&input, settings)?, tokens))
}

/// Table 3, the fit, Figs. 5, 6 and 7 and the fit's trajectory of [`word_groups`]' result
/// (`g` found among `tokens` of `data`), written to `out`.
pub fn write_word_groups(
    g: &IcaGroups,
    tokens: &[u32],
    data: &CorpusData,
    settings: &WordGroupSettings,
    out: &Path,
) -> Result<WordGroupOutputs> {
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let table3 = g.table.write_all(out, "table3_ica_groups")?;
    let fig5 = out.join("fig5_ica_loadings.png");
    loadings_figure(&fig5, g, tokens, data, settings.fig_words)?;
    let fig6 = out.join("fig6_cluster_counts.png");
    cluster_count_figure(&fig6, g, tokens.len())?;
    let fit = fit_table(g).write_all(out, "ica_fit")?;
    let trajectory = out.join("fig_ica_trajectory.png");
    trajectory_figure(&trajectory, g)?;
    let fig7 = out.join("fig7_group_words.png");
    group_words_figure(&fig7, g, &data.tok)?;
    Ok(WordGroupOutputs {
        table3,
        fig5,
        fig6,
        fit,
        trajectory,
        fig7,
    })
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
    /// The groups: each component's members (|y_k| > 2.5) and typical words.
    pub groups: Vec<WordGroup>,
    /// Table 3: per component its typical words, size, share of `##` pieces, mean score and
    /// rank among the groups.
    pub table: report::Table,
}

/// One ICA word group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WordGroup {
    /// Its independent component.
    pub component: usize,
    /// Its 5 most frequent members.
    pub typical: Vec<String>,
    /// Its members (token ids), by loading descending.
    pub members: Vec<u32>,
    /// Their loadings on the component (|loading| > 2.5; after the sign to a positive skew
    /// most are positive, a few can lie below −2.5).
    pub loadings: Vec<f32>,
    /// Its mean preference score on the run the groups were found on.
    pub mean: Option<f64>,
    /// Its rank among the groups by that mean, 1 the most primary.
    pub rank: Option<usize>,
    /// Share of its members that are `##` continuation pieces (the paper's Table 3 has a
    /// `##s ##ed ##ly ##ing ##ism` group).
    pub continuation_share: f64,
}

/// What the word groups are computed from.
pub struct GroupInput<'a> {
    /// The shared embedding, one row per token id.
    pub embedding: &'a [Vec<f32>],
    /// The analysed words (token ids), most frequent first.
    pub tokens: &'a [u32],
    /// Training frequencies over the vocabulary.
    pub freq: &'a [u64],
    /// Preference scores over the vocabulary.
    pub scores: &'a [Option<f64>],
    /// The tokenizer (typical words' names).
    pub tok: &'a Tokenizer,
}

/// The rows of `ids` in `embedding`, as a matrix; an id outside the embedding is refused.
fn embedding_rows(embedding: &[Vec<f32>], ids: &[u32]) -> Result<ica::Matrix> {
    let width = embedding
        .first()
        .ok_or_else(|| ExperimentError::too_little("the embedding (rows)", 0, 1))?
        .len();
    let mut rows = Vec::with_capacity(ids.len() * width);
    for &id in ids {
        let row = embedding
            .get(id as usize)
            .ok_or_else(|| outside(id, embedding.len(), "embedding"))?;
        rows.extend_from_slice(row);
    }
    Ok(ica::Matrix::new(ids.len(), width, rows)?)
}

/// A word `id` outside the `n` rows of `what` (the embedding, the frequencies).
fn outside(id: u32, n: usize, what: &str) -> ExperimentError {
    ExperimentError::mismatch(
        "the analysed words",
        format!("the {what} of {n} token ids"),
        format!("token id {id} is outside it"),
    )
}

/// The token ids of the fit's rows: `positions` draws from the words' frequencies, or every
/// word once.
pub fn fit_row_ids(tokens: &[u32], freq: &[u64], rows: FitRows) -> Result<Vec<u32>> {
    match rows {
        FitRows::Vocabulary => Ok(tokens.to_vec()),
        FitRows::CorpusTokens { positions, seed } => {
            use rand::distr::{weighted::WeightedIndex, Distribution};
            use rand::SeedableRng;
            let weights = tokens
                .iter()
                .map(|&t| {
                    let f = freq.get(t as usize);
                    f.copied()
                        .ok_or_else(|| outside(t, freq.len(), "frequencies"))
                })
                .collect::<Result<Vec<u64>>>()?;
            let dist = WeightedIndex::new(&weights).map_err(|_| {
                let seen = weights.iter().filter(|&&w| w > 0).count();
                ExperimentError::too_little("the analysed words (seen in the corpus)", seen, 1)
            })?;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            Ok((0..positions)
                .map(|_| tokens[dist.sample(&mut rng)])
                .collect())
        }
    }
}

/// PCA to `settings.dim` (capped by the embedding width and the distinct words of the fit's rows
/// less one, the rank of the centred rows) and Amari ICA
/// (`settings.ica`), both fitted on `settings.rows` (corpus positions or the words), then every
/// word's sources; clusters at the paper's threshold 2.5; each component's words summarised by
/// `prefscore::group_summary` against the scores over the words.
pub fn ica_groups(input: &GroupInput<'_>, settings: &WordGroupSettings) -> Result<IcaGroups> {
    use ica::analysis::{cluster_counts, clusters, component_words, PAPER_THRESHOLD};
    let (tokens, freq) = (input.tokens, input.freq);
    let (dim, fit, sources) = fit_sources(input, settings)?;
    let per_word = clusters(&sources, PAPER_THRESHOLD)?;
    let counts = cluster_counts(&per_word);
    let within_unit = ica::analysis::fraction_within(sources.as_slice(), 1.0);
    let freqs: Vec<u64> = tokens.iter().map(|&id| freq[id as usize]).collect();
    let comps = component_words(&sources, PAPER_THRESHOLD, &freqs, 5)?;
    let mut groups: Vec<WordGroup> = comps
        .iter()
        .map(|c| word_group(c, tokens, input.tok))
        .collect();
    let named: Vec<(String, Vec<u32>)> = groups
        .iter()
        .map(|g| (format!("IC{}", g.component), g.members.clone()))
        .collect();
    let stats = prefscore::group_summary(input.scores, &named, tokens, &settings.bootstrap)?;
    let rank = ranks_descending(&stats.iter().map(|g| g.mean).collect::<Vec<_>>());
    for ((g, st), r) in groups.iter_mut().zip(&stats).zip(&rank) {
        (g.mean, g.rank) = (st.mean, *r);
    }
    let table = table3(&groups, &stats, &rank);
    Ok(IcaGroups {
        dim,
        ica: fit,
        sources,
        counts,
        within_unit,
        groups,
        table,
    })
}

/// PCA to `settings.dim` (capped by the width and by the distinct words drawn less one: corpus
/// positions repeat words, so their count does not bound the rank) and Amari ICA fitted on the
/// fit's rows, then the words' sources, each component signed to a positive skew (and the
/// unmixing's row with it, so `fit.sources` gives the same signs).
fn fit_sources(
    input: &GroupInput<'_>,
    settings: &WordGroupSettings,
) -> Result<(usize, ica::IcaResult, ica::Matrix)> {
    let (tokens, freq) = (input.tokens, input.freq);
    let x = embedding_rows(input.embedding, tokens)?;
    let ids = fit_row_ids(tokens, freq, settings.rows)?;
    let distinct = ids.iter().collect::<std::collections::BTreeSet<_>>().len();
    let fit_rows = embedding_rows(input.embedding, &ids)?;
    let dim = settings
        .dim
        .min(x.cols())
        .min(distinct.saturating_sub(1))
        .max(1);
    let pca = ica::Pca::fit(&fit_rows, &ica::PcaConfig::new(dim))?;
    let mut fit = ica::AmariIca::new(settings.ica.clone()).fit(&pca.transform(&fit_rows)?)?;
    let mut sources = fit.sources(&pca.transform(&x)?)?;
    let flipped = ica::analysis::sign_to_positive_skew(&mut sources);
    // Source k is row k of W applied to a whitened word: flip that row too.
    let w = fit.unmixing.as_mut_slice();
    for (row, _) in w.chunks_exact_mut(dim).zip(&flipped).filter(|(_, &f)| f) {
        row.iter_mut().for_each(|v| *v = -*v);
    }
    Ok((dim, fit, sources))
}

/// One component's word group (its preference not yet summarised): members as token ids,
/// typical words by name, the share of continuation pieces.
fn word_group(c: &ica::analysis::ComponentWords, tokens: &[u32], tok: &Tokenizer) -> WordGroup {
    let members: Vec<u32> = c.members.iter().map(|&(i, _)| tokens[i]).collect();
    let pieces = members
        .iter()
        .filter(|&&t| tok.id_to_token(t).is_some_and(|s| s.starts_with("##")))
        .count();
    WordGroup {
        component: c.component,
        typical: c
            .typical
            .iter()
            .filter_map(|&i| tok.id_to_token(tokens[i]))
            .collect(),
        continuation_share: pieces as f64 / members.len().max(1) as f64,
        loadings: c.members.iter().map(|&(_, y)| y).collect(),
        members,
        mean: None,
        rank: None,
    }
}

/// Table 3: each word group with its preference summary and rank among the groups.
fn table3(
    groups: &[WordGroup],
    stats: &[prefscore::GroupSummary],
    rank: &[Option<usize>],
) -> report::Table {
    let level = prefscore::common_level(stats.iter().map(|g| g.interval.as_ref()));
    let mut table = report::Table::new(
        [
            "component",
            "typical words",
            "words",
            "mean score",
            &format!("{level} low"),
            &format!("{level} high"),
            "## share",
            "rank among groups (1 = most primary)",
            "mean token rank",
            "mean token-rank fraction (0 = most primary)",
            "share primary",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Table 3: ICA word groups of the shared embedding and their preference")
    .with_note(
        "a word is in component k when |y_k| > 2.5; typical words: the 5 most frequent members; \
         ## share: members that are continuation pieces (a group of them is marked ##); rank \
         among groups by mean score, 1 the most primary; token ranks among the reference tokens \
         by score, descending",
    )
    .with_precision(3);
    for ((c, g), r) in groups.iter().zip(stats).zip(rank) {
        let (lo, hi) = g.interval.map(|i| (i.lo, i.hi)).unzip();
        let mark = if c.continuation_share > 0.5 {
            " (##)"
        } else {
            ""
        };
        table.push_row(vec![
            report::Cell::from(c.component),
            report::Cell::from(format!("{}{mark}", c.typical.join(" "))),
            report::Cell::from(c.members.len()),
            report::Cell::from(g.mean),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(c.continuation_share),
            report::Cell::from(*r),
            report::Cell::from(g.mean_rank),
            report::Cell::from(g.mean_rank_fraction),
            report::Cell::from(g.share_primary),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_positions_weigh_words_by_frequency_as_the_weighted_vocabulary_does() {
        // Three words with 2-d embeddings and frequencies 1 : 3 : 6: the second moment over
        // drawn positions must approach Σ f_w x_w x_wᵀ / Σ f_w, not the unweighted mean.
        let embedding: [[f64; 2]; 4] = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]];
        let (tokens, freq) = ([1u32, 2, 3], [0u64, 100, 300, 600]);
        let rows = FitRows::CorpusTokens {
            positions: 200_000,
            seed: 7,
        };
        let ids = fit_row_ids(&tokens, &freq, rows).unwrap();
        assert_eq!(ids.len(), 200_000);
        let m = |ids: &[u32], w: &dyn Fn(u32) -> f64| {
            let mut s = [0f64; 4];
            let mut tot = 0.0;
            for &id in ids {
                let (x, wt) = (&embedding[id as usize], w(id));
                for (k, (a, b)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
                    s[k] += wt * x[a] * x[b];
                }
                tot += wt;
            }
            s.map(|v| v / tot)
        };
        let sampled = m(&ids, &|_| 1.0);
        let weighted = m(&tokens, &|id| freq[id as usize] as f64);
        let unweighted = m(&tokens, &|_| 1.0);
        for k in 0..4 {
            assert!(
                (sampled[k] - weighted[k]).abs() < 0.03,
                "{sampled:?} vs {weighted:?}"
            );
        }
        assert!(
            (sampled[0] - unweighted[0]).abs() > 1.0,
            "{sampled:?} {unweighted:?}"
        );
        // Same seed, same rows; the vocabulary rows are the words themselves.
        assert_eq!(fit_row_ids(&tokens, &freq, rows).unwrap(), ids);
        let vocab = fit_row_ids(&tokens, &freq, FitRows::Vocabulary).unwrap();
        assert_eq!(vocab, tokens);
        // Words that never occur cannot be drawn: refused by name.
        assert!(fit_row_ids(&[0], &freq, rows).is_err());
    }
}
