//! The per-run controls of a study and the paper's Fig. 3 and Fig. 8.
//!
//! - **Frequency**: the correlation of each run's scores with the frequency rank of the
//!   tokens (a frequency trend alone makes two runs agree).
//! - **Predictability**: the correlation of each run's scores with how well the run predicts
//!   each token from its context (mean log p(target) over its positions and both towers). A
//!   score that only said "context helps this token" would make any two runs agree, since
//!   every model finds the same tokens predictable; a division of labour need not follow it.
//! - **Split null**: each run's primary-tower positions split twice at random into two
//!   pseudo-towers and scored as if they were two towers; the correlation of the two
//!   replicates is what agreement looks like when the "division" is chance. It has no head
//!   noise (both halves come from one head), so it is a null for the positions, not a noise
//!   ceiling; the noise ceiling is the head-seed reliability of the pair tables.
//! - **Fig. 3**: every run's scores in the order of the first run's; **Fig. 8**: every run's
//!   scores against the frequency index.

use std::path::{Path, PathBuf};

use heads::PositionLogProbs;
use prefscore::{
    correlate, correlate_with_frequency, sorted_profile, split_null, top_tokens, CorrOptions,
    Method, ScoreKind, SplitNull,
};
use report::{Cell, PlotOptions, Series, Table};
use serde::{Deserialize, Serialize};

use crate::analysis::{pair_cells, PairComparison, RunScores, TopTokens};
use crate::error::{ExperimentError, Result};

/// The controls of one run (top-`n` tokens, Pearson unless said).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunControl {
    /// `<style>-s<seed>`.
    pub label: String,
    /// Tokens used.
    pub tokens: usize,
    /// Pearson correlation of the scores with the frequency rank.
    pub pearson_vs_frequency_rank: f64,
    /// Spearman correlation of the scores with the frequency rank.
    pub spearman_vs_frequency_rank: f64,
    /// Pearson correlation of the scores with the run's predictability of each token
    /// ([`predictability`]).
    pub pearson_vs_predictability: Option<f64>,
    /// Mean of the split-null replicates' correlations.
    pub null_mean: f64,
    /// Their 97.5% quantile.
    pub null_q975: f64,
    /// Mean Pearson r with the other runs of its model (its other seeds), if any.
    pub same_style_r: Option<f64>,
    /// Share of null replicates at least as large as `same_style_r`.
    pub null_p: Option<f64>,
}

/// The settings of [`run_controls`].
#[derive(Debug, Clone, Copy)]
pub struct ControlSettings<'a> {
    /// The tokens of each run's correlations.
    pub top: TopTokens<'a>,
    /// The score kind of the runs' scores (and of the split null's).
    pub kind: ScoreKind,
    /// Split-null replicates per run.
    pub replicates: usize,
    /// Bootstrap and permutations of the frequency correlations.
    pub opts: &'a CorrOptions,
}

/// Computes the controls of `runs` over their `set.top` most frequent tokens, `set.replicates`
/// split-null replicates each; `preds` are the runs' [`scored_predictability`] in the same
/// order and `pairs` the study's pair comparisons of the same score kind (for the same-style
/// mean r).
pub fn run_controls(
    runs: &[RunScores],
    preds: &[Vec<Option<f64>>],
    pairs: &[PairComparison],
    set: &ControlSettings<'_>,
) -> Result<Vec<RunControl>> {
    let (freq, top_n, kind, opts) = (set.top.freq, set.top.n, set.kind, set.opts);
    check_preds(preds, runs.len())?;
    let mut out = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let v = &r.scores.values;
        let fp = correlate_with_frequency(v, freq, top_n, Method::Pearson, opts)?;
        let fs = correlate_with_frequency(v, freq, top_n, Method::Spearman, opts)?;
        let lp = &r.logprobs;
        let pred = correlate(v, &preds[i], freq, top_n, Method::Pearson, &r_only(opts))?;
        let primary = &lp.logp[r.scores.towers[0]];
        let null = SplitNull {
            top_n,
            kind,
            method: Method::Pearson,
            replicates: set.replicates,
            // The run's own stream: the same whichever runs a study selects, in whatever order.
            seed: corpus::fnv1a(r.label.as_bytes()),
        };
        let nd = split_null(&lp.targets, primary, lp.vocab_size, freq, &null)?;
        let same: Vec<f64> = pairs
            .iter()
            .filter(|p| (p.a == r.label || p.b == r.label) && p.models[0] == p.models[1])
            .map(|p| p.pearson.r)
            .collect();
        let same_style_r = (!same.is_empty()).then(|| same.iter().sum::<f64>() / same.len() as f64);
        out.push(RunControl {
            label: r.label.clone(),
            tokens: fp.n,
            pearson_vs_frequency_rank: fp.r,
            spearman_vs_frequency_rank: fs.r,
            pearson_vs_predictability: Some(pred.r),
            null_mean: nd.mean,
            null_q975: nd.q975,
            same_style_r,
            null_p: same_style_r.map(|x| nd.p_value(x)),
        });
    }
    Ok(out)
}

/// Per token id, the mean of log p(target) over the token's scored positions and every tower
/// of `lp` (natural log; `None` for a token never scored): how predictable the run finds the
/// token from its context.
pub fn predictability(lp: &PositionLogProbs) -> Result<Vec<Option<f64>>> {
    let n_pos = lp.targets.len();
    if let Some(k) = lp.logp.iter().position(|k| k.len() != n_pos) {
        let why = format!("tower {k} has {} log-probs for {n_pos}", lp.logp[k].len());
        return Err(mismatch("the positions' targets", why));
    }
    if let Some(t) = lp.targets.iter().find(|&&t| t as usize >= lp.vocab_size) {
        let why = format!("target {t} is outside the vocabulary of {}", lp.vocab_size);
        return Err(mismatch("the vocabulary", why));
    }
    let mut sum = vec![0.0f64; lp.vocab_size];
    let mut n = vec![0u64; lp.vocab_size];
    for (i, &t) in lp.targets.iter().enumerate() {
        sum[t as usize] += lp.logp.iter().map(|k| f64::from(k[i])).sum::<f64>();
        n[t as usize] += lp.logp.len() as u64;
    }
    Ok(sum
        .iter()
        .zip(&n)
        .map(|(&s, &c)| (c > 0).then(|| s / c as f64))
        .collect())
}

/// The log-probabilities of a run that do not fit `data`.
fn mismatch(data: &str, why: String) -> ExperimentError {
    ExperimentError::mismatch("the run's position log-probabilities", data, why)
}

/// Refuses `preds` that are not one per run.
fn check_preds(preds: &[Vec<Option<f64>>], runs: usize) -> Result<()> {
    match preds.len() == runs {
        true => Ok(()),
        false => Err(ExperimentError::mismatch(
            format!("{runs} runs"),
            format!("{} predictability vectors", preds.len()),
            "one per run, in the runs' order",
        )),
    }
}

/// [`predictability`] of `run`'s tokens where the run has a score (`None` elsewhere), so that
/// pairs of runs compare it over the tokens their scores are compared on.
pub fn scored_predictability(run: &RunScores) -> Result<Vec<Option<f64>>> {
    Ok(predictability(&run.logprobs)?
        .into_iter()
        .zip(&run.scores.values)
        .map(|(p, s)| s.and(p))
        .collect())
}

/// The predictability control across a pair of runs: how alike the two runs find the tokens to
/// predict, beside how alike their scores are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictabilityPair {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// Tokens used (the `top_n` most frequent scored in both).
    pub tokens: usize,
    /// Pearson r of the two runs' [`predictability`].
    pub pearson_predictability: f64,
    /// Pearson r of the two runs' scores over the same tokens.
    pub pearson_scores: f64,
}

/// [`PredictabilityPair`] for each pair comparison of `pairs` (its scores' Pearson r is taken
/// from it) whose two runs are in `labels`: the Pearson r of the two runs' predictability
/// (`preds`, [`scored_predictability`] in the order of `labels`) over the `top_n` most frequent
/// tokens scored in both.
pub fn predictability_pairs(
    labels: &[String],
    preds: &[Vec<Option<f64>>],
    pairs: &[PairComparison],
    top: TopTokens<'_>,
) -> Result<Vec<PredictabilityPair>> {
    let (freq, top_n) = (top.freq, top.n);
    check_preds(preds, labels.len())?;
    let mut out = Vec::new();
    for (i, j, p) in pair_cells(labels, pairs) {
        let pred = correlate(
            &preds[i],
            &preds[j],
            freq,
            top_n,
            Method::Pearson,
            &r_only(&CorrOptions::default()),
        )?;
        out.push(PredictabilityPair {
            a: p.a.clone(),
            b: p.b.clone(),
            tokens: pred.n,
            pearson_predictability: pred.r,
            pearson_scores: p.pearson.r,
        });
    }
    Ok(out)
}

/// `opts` without its bootstrap interval and permutation p-value: for a coefficient alone.
pub(crate) fn r_only(opts: &CorrOptions) -> CorrOptions {
    CorrOptions {
        bootstrap: prefscore::Bootstrap {
            resamples: 0,
            ..opts.bootstrap
        },
        permutations: 0,
    }
}

/// The predictability pairs as a table.
pub fn predictability_pairs_table(pairs: &[PredictabilityPair]) -> Table {
    let cols = [
        "run a",
        "run b",
        "tokens",
        "Pearson of predictability",
        "Pearson of scores",
    ];
    let mut t = Table::new(cols.map(String::from).to_vec())
        .with_title("Predictability against preference, run pairs (Pearson)")
        .with_note(
            "predictability: each run's mean log p(target) of a token over its positions and \
             both towers; two runs that agree on it but not on their scores divide the work \
             differently while finding the same tokens easy",
        )
        .with_precision(3);
    for p in pairs {
        t.push_row(vec![
            Cell::from(p.a.as_str()),
            Cell::from(p.b.as_str()),
            Cell::from(p.tokens),
            Cell::from(p.pearson_predictability),
            Cell::from(p.pearson_scores),
        ]);
    }
    t
}

/// The controls as a table.
pub fn controls_table(c: &[RunControl], replicates: usize) -> Table {
    let cols = [
        "run",
        "tokens",
        "Pearson vs frequency rank",
        "Spearman vs frequency rank",
        "Pearson vs predictability",
        "split null mean",
        "split null 97.5%",
        "same-style r (other seeds)",
        "null p of same-style r",
    ];
    let mut t = Table::new(cols.map(String::from).to_vec())
        .with_title("Controls: frequency, predictability and the split null (Pearson)")
        .with_note(format!(
            "predictability: the run's mean log p(target) of each token over its positions and \
             both towers; split null: each run's primary-tower positions split twice at random \
             into two pseudo-towers, {replicates} replicates; a null without head noise"
        ))
        .with_precision(3);
    for r in c {
        t.push_row(vec![
            Cell::from(r.label.as_str()),
            Cell::from(r.tokens),
            Cell::from(r.pearson_vs_frequency_rank),
            Cell::from(r.spearman_vs_frequency_rank),
            Cell::from(r.pearson_vs_predictability),
            Cell::from(r.null_mean),
            Cell::from(r.null_q975),
            Cell::from(r.same_style_r),
            Cell::from(r.null_p),
        ]);
    }
    t
}

/// Fig. 3 (`fig3_sorted_scores.png`: every run's scores in the order of the first run's) and
/// Fig. 8 (`fig8_score_vs_frequency.png`) over the `top_n` most frequent tokens scored in
/// every run.
pub fn score_figures(runs: &[RunScores], top: TopTokens<'_>, out: &Path) -> Result<Vec<PathBuf>> {
    let (freq, top_n) = (top.freq, top.n);
    let Some(first) = runs.first() else {
        return Ok(Vec::new());
    };
    let all: Vec<&[Option<f64>]> = runs.iter().map(|r| r.scores.values.as_slice()).collect();
    let common = top_tokens(freq, top_n, &all);
    let (order, curves) = sorted_profile(&first.scores.values, &all, &common)?;
    let mut series: Vec<Series> = runs
        .iter()
        .zip(curves)
        .map(|(r, y)| Series::from_y(r.label.clone(), y))
        .collect();
    // The sorting run last, drawn on top: the others scatter around its monotone curve.
    series.rotate_left(1);
    let fig3 = out.join("fig3_sorted_scores.png");
    let opts = PlotOptions {
        title: format!(
            "Preference scores sorted by {} ({} tokens)",
            first.label,
            order.len()
        ),
        x_label: format!("token (sorted by the score of {})", first.label),
        y_label: "score s (primary − secondary)".into(),
        ..PlotOptions::default()
    };
    report::line_plot(&fig3, &series, &opts)?;
    let rank: Vec<f64> = (0..common.len()).map(|i| i as f64).collect();
    let series: Vec<Series> = runs
        .iter()
        .map(|r| {
            let y = common
                .iter()
                .map(|&t| r.scores.values[t as usize].unwrap_or(0.0))
                .collect();
            Series::new(r.label.clone(), rank.clone(), y)
        })
        .collect();
    let fig8 = out.join("fig8_score_vs_frequency.png");
    let opts = PlotOptions {
        title: "Preference score against frequency index".into(),
        x_label: "frequency index (0 = most frequent)".into(),
        y_label: "score s".into(),
        ..PlotOptions::default()
    };
    report::scatter(&fig8, &series, &opts)?;
    Ok(vec![fig3, fig8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_split_null_is_its_own_whichever_runs_come_with_it() {
        use crate::test_rng::normal;
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut run = |label: &str| {
            let targets: Vec<u32> = (0..2400).map(|i| (i % 40) as u32).collect();
            let logp = (0..2)
                .map(|_| {
                    let tower = targets
                        .iter()
                        .map(|_| -(normal(&mut rng).abs() as f32) - 0.1);
                    tower.collect()
                })
                .collect();
            crate::test_runs::gpt_run(label.into(), crate::test_runs::one_batch(40, targets, logp))
        };
        let (a, b) = (run("a"), run("b"));
        let freq: Vec<u64> = (0..40).map(|t| 1000 - 10 * t).collect();
        let controls = |runs: &[RunScores]| {
            let preds: Vec<_> = runs
                .iter()
                .map(|r| scored_predictability(r).unwrap())
                .collect();
            let opts = CorrOptions::default();
            run_controls(runs, &preds, &[], &settings(&freq, &opts)).unwrap()
        };
        let both = controls(&[a.clone(), b.clone()]);
        let alone = controls(std::slice::from_ref(&b));
        let swapped = controls(&[b.clone(), a.clone()]);
        assert_eq!(both[1], alone[0]);
        assert_eq!(both[1], swapped[0]);
        assert_eq!(both[0], swapped[1]);
        assert_ne!(both[0].null_mean, both[1].null_mean);
        // Predictability vectors that are not one per run are refused, not indexed past.
        let one = vec![scored_predictability(&a).unwrap()];
        let opts = CorrOptions::default();
        assert!(run_controls(&[a, b], &one, &[], &settings(&freq, &opts)).is_err());
    }

    /// The test's controls: the top 40 tokens, 20 replicates.
    fn settings<'a>(freq: &'a [u64], opts: &'a CorrOptions) -> ControlSettings<'a> {
        ControlSettings {
            top: TopTokens { freq, n: 40 },
            kind: ScoreKind::ArithmeticMean,
            replicates: 20,
            opts,
        }
    }

    #[test]
    fn predictability_is_the_mean_log_p_over_positions_and_towers() {
        let lp = PositionLogProbs {
            vocab_size: 4,
            targets: vec![1, 3, 1],
            batch_index: vec![0; 3],
            position: vec![0, 1, 2],
            logp: vec![vec![-1.0, -4.0, -3.0], vec![-2.0, -6.0, -0.5]],
            full: None,
        };
        let p = predictability(&lp).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!((p[0], p[2]), (None, None));
        assert!((p[1].unwrap() - (-1.0 - 3.0 - 2.0 - 0.5) / 4.0).abs() < 1e-12);
        assert!((p[3].unwrap() + 5.0).abs() < 1e-12);
        // A target outside the vocabulary, or a tower short of positions, is refused.
        let outside = PositionLogProbs {
            targets: vec![1, 4, 1],
            ..lp.clone()
        };
        assert!(predictability(&outside).is_err());
        let mut short = lp;
        short.logp[1].pop();
        assert!(predictability(&short).is_err());
    }
}
