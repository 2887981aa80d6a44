//! From scored runs to the paper's numbers, with the noise ceiling beside them.
//!
//! - [`RunScores`]: a run's preference scores (eq. 3-4), the retest heads' scores in the same
//!   tower order, the split-half scores, and their reliabilities.
//! - [`compare_runs`]: for a pair of runs, Pearson and Spearman over a token selection, the
//!   disattenuated correlation r_ab / √(r_aa r_bb) with a bootstrap interval, and the partial
//!   correlation controlling for log frequency.
//!
//! The disattenuation uses the head-seed (test-retest) reliability: two runs of one style are
//! scored on identical positions, so the sampling noise of the positions is shared by both and
//! does not attenuate their correlation, while the noise of each run's own heads does. The
//! split-half reliability (sampling noise of the positions) is reported beside it.

use heads::PositionLogProbs;
use prefscore::{
    correlation, disattenuated_correlation, partial_on_log_frequency, retest_reliability,
    split_half_reliability, tokens_with_min_count, top_tokens, Bootstrap, CorrOptions,
    Disattenuated, Method, Reliability, ScoreKind, Scores, TokenStats,
};
use serde::{Deserialize, Serialize};

use crate::error::{ExperimentError, Result};
use crate::manifest::heads_flagged;
use crate::run::ScoredRun;
use crate::scoring::ScoringSetId;

/// Which tokens enter a correlation: a key of the pairs (with the score kind), written in
/// tables and JSON as its name (`top-5000`, `min-count-5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum TokenSelection {
    /// The paper's: the `n` most frequent tokens of the training text scored in both runs.
    TopFrequent(usize),
    /// Tokens with at least `m` scored positions in every run compared (default m = 50).
    MinCount(u64),
}

impl From<TokenSelection> for String {
    fn from(s: TokenSelection) -> Self {
        s.to_string()
    }
}

impl TryFrom<String> for TokenSelection {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        let bad = || format!("{s:?} is no token selection (top-N or min-count-M)");
        if let Some(n) = s.strip_prefix("top-") {
            return n
                .parse()
                .map(TokenSelection::TopFrequent)
                .map_err(|_| bad());
        }
        match s.strip_prefix("min-count-") {
            Some(m) => m.parse().map(TokenSelection::MinCount).map_err(|_| bad()),
            None => Err(bad()),
        }
    }
}

impl std::fmt::Display for TokenSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSelection::TopFrequent(n) => write!(f, "top-{n}"),
            TokenSelection::MinCount(m) => write!(f, "min-count-{m}"),
        }
    }
}

/// The top-N selection of the per-run analyses: the `n` most frequent tokens of the training
/// text (`freq`), among those a run (or every run compared) scored. One value where a `freq`
/// and a `top_n` used to travel apart.
#[derive(Debug, Clone, Copy)]
pub struct TopTokens<'a> {
    /// Token frequencies of the training text over the padded vocabulary.
    pub freq: &'a [u64],
    /// How many of the most frequent tokens.
    pub n: usize,
}

impl TopTokens<'_> {
    /// As a [`TokenSelection`] (its name in tables and `study.json`).
    pub fn selection(&self) -> TokenSelection {
        TokenSelection::TopFrequent(self.n)
    }
}

/// One run's scores and their reliability.
#[derive(Debug, Clone)]
pub struct RunScores {
    /// `<model>-s<seed>`.
    pub label: String,
    /// The run's model (`RunSpec::model_name`): runs of one model differ only in their seeds.
    pub model: String,
    /// The scoring set.
    pub scoring: ScoringSetId,
    /// Scores, tower 1 the primary tower (eq. 3).
    pub scores: Scores,
    /// The retest heads' scores in the same tower order.
    pub retest: Option<Scores>,
    /// Scored positions per token.
    pub counts: Vec<u64>,
    /// The log-probabilities (for the split halves).
    pub logprobs: PositionLogProbs,
    /// Share of scored tokens whose score is positive (won by the primary tower).
    pub share_primary: f64,
    /// Whether a head of the run ended no better than the unigram model.
    pub flagged: bool,
}

fn stats_of(lp: &PositionLogProbs) -> Result<TokenStats> {
    let mut stats = TokenStats::new(lp.vocab_size, lp.logp.len())?;
    let towers: Vec<&[f32]> = lp.logp.iter().map(Vec::as_slice).collect();
    stats.add(&lp.targets, &towers)?;
    Ok(stats)
}

impl RunScores {
    /// The scores of a scored run.
    pub fn new(run: &ScoredRun, kind: ScoreKind) -> Result<Self> {
        let res = run.result()?;
        Self::from_logprobs(
            run.label.clone(),
            run.manifest.spec.model_name(),
            run.manifest.scoring.clone(),
            run.logprobs.clone(),
            run.retest.as_ref(),
            heads_flagged(&res.heads, res.retest.as_ref()),
            kind,
        )
    }

    /// The scores of saved log-probabilities (the retest heads' in the main heads' order).
    pub fn from_logprobs(
        label: String,
        model: String,
        scoring: ScoringSetId,
        logprobs: PositionLogProbs,
        retest: Option<&PositionLogProbs>,
        flagged: bool,
        kind: ScoreKind,
    ) -> Result<Self> {
        let stats = stats_of(&logprobs)?;
        let scores = stats.scores(kind)?;
        let retest = match retest {
            Some(r) => {
                if r.targets != logprobs.targets {
                    return Err(ExperimentError::mismatch(
                        label.to_string(),
                        "its retest heads",
                        "the retest heads were scored on other positions",
                    ));
                }
                Some(stats_of(r)?.raw_scores(kind, scores.towers[0], scores.towers[1])?)
            }
            None => None,
        };
        let scored: Vec<f64> = scores.values.iter().flatten().copied().collect();
        let share_primary =
            scored.iter().filter(|&&s| s > 0.0).count() as f64 / scored.len().max(1) as f64;
        Ok(Self {
            model,
            label,
            scoring,
            counts: stats.counts().to_vec(),
            scores,
            retest,
            logprobs,
            share_primary,
            flagged,
        })
    }

    /// Split-half reliability (Spearman–Brown corrected) over `tokens`.
    pub fn split_half(
        &self,
        kind: ScoreKind,
        tokens: &[u32],
        method: Method,
        boot: &Bootstrap,
    ) -> Result<Reliability> {
        let lp = &self.logprobs;
        let towers: Vec<&[f32]> = lp.logp.iter().map(Vec::as_slice).collect();
        Ok(split_half_reliability(
            &lp.targets,
            &towers,
            lp.vocab_size,
            kind,
            tokens,
            method,
            boot,
        )?)
    }

    /// Head-seed (test-retest) reliability over `tokens`, when the run has retest heads.
    pub fn retest_reliability(
        &self,
        tokens: &[u32],
        method: Method,
        boot: &Bootstrap,
    ) -> Result<Option<Reliability>> {
        self.retest
            .as_ref()
            .map(|r| {
                Ok(retest_reliability(
                    &self.scores.values,
                    &r.values,
                    tokens,
                    method,
                    boot,
                )?)
            })
            .transpose()
    }
}

/// The tokens of a selection for a set of runs (ascending ids for min-count, frequency order
/// for top-n); tokens absent from the training text are left out (log frequency undefined).
pub fn select_tokens(runs: &[&RunScores], freq: &[u64], sel: TokenSelection) -> Vec<u32> {
    let tokens = match sel {
        TokenSelection::TopFrequent(n) => {
            let all: Vec<&[Option<f64>]> = runs.iter().map(|r| &r.scores.values[..]).collect();
            top_tokens(freq, n, &all)
        }
        TokenSelection::MinCount(m) => {
            let counts: Vec<&[u64]> = runs.iter().map(|r| &r.counts[..]).collect();
            tokens_with_min_count(&counts, m)
        }
    };
    tokens
        .into_iter()
        .filter(|&t| freq.get(t as usize).is_some_and(|&c| c > 0))
        .collect()
}

/// One pair of runs compared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairComparison {
    /// The two runs' models (`RunSpec::model_name`).
    pub models: [String; 2],
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// The token selection.
    pub selection: TokenSelection,
    /// Tokens used.
    pub tokens: usize,
    /// Pearson (Table 2) with its bootstrap interval and permutation p-value.
    pub pearson: prefscore::Correlation,
    /// Spearman (Table 4).
    pub spearman: prefscore::Correlation,
    /// Head-seed reliability of each run (Pearson), when both have retest heads.
    pub reliability_head_seed: Option<[f64; 2]>,
    /// Split-half reliability of each run (Pearson, Spearman–Brown corrected).
    pub reliability_split_half: [f64; 2],
    /// The disattenuated Pearson correlation (head-seed reliabilities).
    pub disattenuated: Option<Disattenuated>,
    /// Pearson controlling for log frequency.
    pub partial_log_freq: f64,
    /// Whether either run is flagged (a head no better than unigram).
    pub flagged: bool,
}

/// Each pair of `pairs` whose runs are both in `labels`, as (index of `a`, index of `b`, pair):
/// the runs' places in a per-run list (and, below the diagonal of a run × run matrix, the cell
/// (larger index, smaller index)).
pub(crate) fn pair_cells<'a>(
    labels: &'a [String],
    pairs: &'a [PairComparison],
) -> impl Iterator<Item = (usize, usize, &'a PairComparison)> + 'a {
    let at = |l: &str| labels.iter().position(|x| x == l);
    pairs
        .iter()
        .filter_map(move |p| Some((at(&p.a)?, at(&p.b)?, p)))
}

/// Every pair (i < j, in the order of `runs`) compared with [`compare_runs`].
pub fn compare_all(
    runs: &[RunScores],
    freq: &[u64],
    sel: TokenSelection,
    kind: ScoreKind,
    opts: &CorrOptions,
) -> Result<Vec<PairComparison>> {
    let mut pairs = Vec::new();
    for i in 0..runs.len() {
        for j in i + 1..runs.len() {
            pairs.push(compare_runs(&runs[i], &runs[j], freq, sel, kind, opts)?);
        }
    }
    Ok(pairs)
}

/// The tokens of `sel` scored in both runs (at least 3; the runs on one scoring set) and the two
/// runs' scores of them, in that order.
pub(crate) fn paired_scores(
    a: &RunScores,
    b: &RunScores,
    freq: &[u64],
    sel: TokenSelection,
) -> Result<(Vec<u32>, Vec<f64>, Vec<f64>)> {
    a.scoring.check_comparable(&b.scoring, &a.label, &b.label)?;
    let tokens = select_tokens(&[a, b], freq, sel);
    if tokens.len() < 3 {
        return Err(ExperimentError::too_little(
            format!(
                "the {sel} selection of {} and {} (tokens)",
                a.label, b.label
            ),
            tokens.len(),
            3,
        ));
    }
    let pick = |s: &[Option<f64>]| -> Vec<f64> {
        tokens
            .iter()
            .map(|&t| s[t as usize].unwrap_or(f64::NAN))
            .collect()
    };
    let (xa, xb) = (pick(&a.scores.values), pick(&b.scores.values));
    Ok((tokens, xa, xb))
}

/// Compares two runs over a token selection (see the module docs). Runs scored on different
/// scoring sets are refused ([`ExperimentError::ScoringSetMismatch`]).
///
/// Every pair of a study draws the same resamples and permutations (the same seed and streams
/// for each pair, over the same top-n tokens of one scoring set): common random numbers, so
/// that two cells of a table differ by their runs and not by their draws, and a cell does not
/// change when runs are added to or left out of the study. Each interval and p-value is valid
/// on its own; their errors are correlated across cells, which an eye comparing two intervals
/// for overlap should keep in mind.
pub fn compare_runs(
    a: &RunScores,
    b: &RunScores,
    freq: &[u64],
    sel: TokenSelection,
    kind: ScoreKind,
    opts: &CorrOptions,
) -> Result<PairComparison> {
    let (tokens, xa, xb) = paired_scores(a, b, freq, sel)?;
    let (va, vb) = (&a.scores.values, &b.scores.values);
    let pearson = correlation(&xa, &xb, Method::Pearson, opts, 0)?;
    let spearman = correlation(&xa, &xb, Method::Spearman, opts, 1)?;
    let boot = &opts.bootstrap;
    let disattenuated = match (&a.retest, &b.retest) {
        (Some(ra), Some(rb)) => Some(disattenuated_correlation(
            va,
            &ra.values,
            vb,
            &rb.values,
            &tokens,
            Method::Pearson,
            boot,
        )?),
        _ => None,
    };
    // Only the split-half value is kept: no resamples for an interval nobody reads.
    let no_interval = Bootstrap {
        resamples: 0,
        ..*boot
    };
    let sh = |r: &RunScores| -> Result<f64> {
        Ok(r.split_half(kind, &tokens, Method::Pearson, &no_interval)?
            .r)
    };
    let partial = partial_on_log_frequency(va, vb, freq, &tokens, Method::Pearson)?;
    Ok(PairComparison {
        models: [a.model.clone(), b.model.clone()],
        a: a.label.clone(),
        b: b.label.clone(),
        selection: sel,
        tokens: tokens.len(),
        pearson,
        spearman,
        reliability_head_seed: disattenuated.as_ref().map(|d| [d.rel_a, d.rel_b]),
        reliability_split_half: [sh(a)?, sh(b)?],
        disattenuated,
        partial_log_freq: partial.partial,
        flagged: a.flagged || b.flagged,
    })
}
