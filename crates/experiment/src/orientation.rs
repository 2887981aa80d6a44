//! Agreement up to orientation: whether the runs share one division of the vocabulary whose
//! side each run's towers take at random.
//!
//! A run's score (eq. 4) is oriented by its primary tower (eq. 3). If every run divided the
//! vocabulary along one shared axis but the primary tower fell on either side of it by chance,
//! Table 2 would show cells of both signs whose signs still follow one orientation per run:
//! r_ij ≈ s_i s_j |r_ij|. This analysis finds the orientation s (one sign per run, the first
//! run's +) that maximises the mean oriented correlation s_i s_j r_ij over the pairs, by
//! exhaustive search, and calibrates that maximum against runs that share nothing: each run's
//! scores over its `top_n` most frequent tokens permuted among those tokens (a seeded
//! permutation per run and replicate), the same search repeated. Free orientation makes even
//! unrelated runs look alike; the null says how much.

use prefscore::{correlate, quantile_sorted, top_tokens, CorrOptions, Method};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use report::{Cell, Table};
use serde::{Deserialize, Serialize};

use crate::analysis::{pair_cells, PairComparison, RunScores, TopTokens};
use crate::controls::r_only;
use crate::error::{ExperimentError, Result};

/// Most runs the exhaustive search takes (2^(n-1) orientations).
pub const MAX_RUNS: usize = 20;

/// Seed of the null's permutations: a constant, so the null never depends on a run.
const NULL_SEED: u64 = 0x0e1e_17a7;

/// The orientation that makes the runs agree most, and its null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Orientation {
    /// The runs, in study order.
    pub labels: Vec<String>,
    /// +1 or -1 per run (the first run +1).
    pub signs: Vec<i8>,
    /// Pairs compared.
    pub pairs: usize,
    /// Mean Pearson r of the pairs as measured (eq.-3 orientation).
    pub mean_r: f64,
    /// Mean s_i s_j r_ij under the best orientation.
    pub mean_oriented_r: f64,
    /// Pairs whose r has the sign s_i s_j.
    pub sign_matches: usize,
    /// Of the pairs with |r| > 0.1, those whose r has the sign s_i s_j, and how many there are.
    pub strong_matches: [usize; 2],
    /// Null replicates (runs with permuted scores).
    pub replicates: usize,
    /// Mean of the null's best mean oriented r (NaN without replicates).
    pub null_mean: f64,
    /// Its 97.5% quantile (NaN without replicates).
    pub null_q975: f64,
    /// (1 + replicates at least as high as the runs') / (1 + replicates).
    pub null_p: f64,
}

/// The best orientation of `n` runs for the pair correlations `cells` (i, j, r): the signs and
/// the mean oriented r. At most [`MAX_RUNS`] runs.
pub fn best_orientation(n: usize, cells: &[(usize, usize, f64)]) -> Result<(Vec<i8>, f64)> {
    if n > MAX_RUNS {
        let why = format!("the exhaustive search takes at most {MAX_RUNS} runs");
        return Err(ExperimentError::bad_setting("orientation runs", n, &why));
    }
    if cells.is_empty() {
        return Err(ExperimentError::too_little(
            "run pairs, for the orientation",
            0,
            1,
        ));
    }
    let sign = |mask: u32, i: usize| {
        if i > 0 && mask >> (i - 1) & 1 == 1 {
            -1.0
        } else {
            1.0
        }
    };
    let mut best = (0u32, f64::NEG_INFINITY);
    for mask in 0..(1u32 << n.saturating_sub(1)) {
        let sum: f64 = cells
            .iter()
            .map(|&(i, j, r)| sign(mask, i) * sign(mask, j) * r)
            .sum();
        if sum > best.1 {
            best = (mask, sum);
        }
    }
    let signs = (0..n).map(|i| sign(best.0, i) as i8).collect();
    Ok((signs, best.1 / cells.len() as f64))
}

/// The orientation analysis of `runs` over `pairs` (the study's comparisons on its main score
/// kind and top-`top_n` selection; Pearson r), with `replicates` null replicates.
pub fn orientation(
    runs: &[RunScores],
    pairs: &[PairComparison],
    top: TopTokens<'_>,
    replicates: usize,
) -> Result<Orientation> {
    let (freq, top_n) = (top.freq, top.n);
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    let cells: Vec<(usize, usize, f64)> = pair_cells(&labels, pairs)
        .map(|(i, j, p)| (i, j, p.pearson.r))
        .collect();
    let (signs, mean_oriented_r) = best_orientation(runs.len(), &cells)?;
    let agrees =
        |&&(i, j, r): &&(usize, usize, f64)| r * f64::from(signs[i]) * f64::from(signs[j]) > 0.0;
    let strong: Vec<&(usize, usize, f64)> = cells.iter().filter(|c| c.2.abs() > 0.1).collect();
    let opts = r_only(&CorrOptions::default());
    let mut null = Vec::with_capacity(replicates);
    let mut rng = ChaCha8Rng::seed_from_u64(NULL_SEED);
    for _ in 0..replicates {
        let permuted: Vec<Vec<Option<f64>>> = runs
            .iter()
            .map(|r| permuted_top(&r.scores.values, freq, top_n, &mut rng))
            .collect();
        let mut shuffled = Vec::with_capacity(cells.len());
        for &(i, j, _) in &cells {
            let c = correlate(
                &permuted[i],
                &permuted[j],
                freq,
                top_n,
                Method::Pearson,
                &opts,
            )?;
            shuffled.push((i, j, c.r));
        }
        null.push(best_orientation(runs.len(), &shuffled)?.1);
    }
    null.sort_by(f64::total_cmp);
    let at_least = null.iter().filter(|&&x| x >= mean_oriented_r).count();
    Ok(Orientation {
        pairs: cells.len(),
        mean_r: cells.iter().map(|c| c.2).sum::<f64>() / cells.len() as f64,
        mean_oriented_r,
        sign_matches: cells.iter().filter(|c| agrees(c)).count(),
        strong_matches: [strong.iter().filter(|c| agrees(c)).count(), strong.len()],
        replicates,
        null_mean: if null.is_empty() {
            f64::NAN
        } else {
            null.iter().sum::<f64>() / null.len() as f64
        },
        null_q975: quantile_sorted(&null, 0.975).unwrap_or(f64::NAN),
        null_p: (1 + at_least) as f64 / (1 + replicates) as f64,
        labels,
        signs,
    })
}

/// Other correlations of the same runs (e.g. within one class of tokens) read under a found
/// orientation: how many follow its signs, and their mean oriented r.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrientedCells {
    /// What the cells are (e.g. `within word-initial pieces`).
    pub what: String,
    /// Cells whose two runs the orientation has.
    pub pairs: usize,
    /// Their mean r as measured.
    pub mean_r: f64,
    /// Their mean s_i s_j r_ij.
    pub mean_oriented_r: f64,
    /// Cells whose r has the sign s_i s_j.
    pub sign_matches: usize,
    /// Of the cells with |r| > 0.1, those whose r has the sign s_i s_j, and how many there are.
    pub strong_matches: [usize; 2],
}

impl Orientation {
    /// The cells `(run a, run b, r)` under this orientation (the signs are not searched
    /// again); cells naming a run it does not have are left out. A typed error when none is
    /// left.
    pub fn apply(&self, what: &str, cells: &[(String, String, f64)]) -> Result<OrientedCells> {
        apply_signs(&self.labels, &self.signs, what, cells)
    }
}

/// The best orientation ([`best_orientation`]) of the runs named by the cells `(run a, run b,
/// r)`: their labels, in first-seen order, and one sign each (the first run's +).
pub fn labelled_orientation(cells: &[(String, String, f64)]) -> Result<(Vec<String>, Vec<i8>)> {
    let mut labels: Vec<String> = Vec::new();
    let mut index = |l: &String| match labels.iter().position(|x| x == l) {
        Some(i) => i,
        None => {
            labels.push(l.clone());
            labels.len() - 1
        }
    };
    let indexed: Vec<(usize, usize, f64)> = cells
        .iter()
        .map(|(a, b, r)| (index(a), index(b), *r))
        .collect();
    let (signs, _) = best_orientation(labels.len(), &indexed)?;
    Ok((labels, signs))
}

/// The sign (±1) of run `label` in an orientation of `labels`; none for a run it does not name.
pub fn label_sign(labels: &[String], signs: &[i8], label: &str) -> Option<f64> {
    let i = labels.iter().position(|x| x == label)?;
    Some(f64::from(*signs.get(i)?))
}

/// The cells `(run a, run b, r)` under the signs of `labels` (not searched again); cells naming
/// a run without a sign are left out. A typed error when none is left.
pub fn apply_signs(
    labels: &[String],
    signs: &[i8],
    what: &str,
    cells: &[(String, String, f64)],
) -> Result<OrientedCells> {
    let sign = |l: &str| label_sign(labels, signs, l);
    let oriented: Vec<(f64, f64)> = cells
        .iter()
        .filter_map(|(a, b, r)| Some((*r, sign(a)? * sign(b)? * r)))
        .collect();
    if oriented.is_empty() {
        return Err(ExperimentError::too_little("cells of oriented runs", 0, 1));
    }
    let n = oriented.len() as f64;
    let strong: Vec<&(f64, f64)> = oriented.iter().filter(|c| c.0.abs() > 0.1).collect();
    Ok(OrientedCells {
        what: what.to_string(),
        pairs: oriented.len(),
        mean_r: oriented.iter().map(|c| c.0).sum::<f64>() / n,
        mean_oriented_r: oriented.iter().map(|c| c.1).sum::<f64>() / n,
        sign_matches: oriented.iter().filter(|c| c.1 > 0.0).count(),
        strong_matches: [strong.iter().filter(|c| c.1 > 0.0).count(), strong.len()],
    })
}

/// Cell groups read under one orientation, one row each.
pub fn oriented_cells_table(rows: &[OrientedCells], top_n: usize) -> Table {
    let cols = [
        "cells",
        "pairs",
        "mean r as measured",
        "mean oriented r",
        "sign as oriented",
        "of them with |r| > 0.1",
    ];
    let mut t = Table::new(cols.map(String::from).to_vec())
        .with_title(format!(
            "The orientation of all top-{top_n} tokens applied within classes of tokens"
        ))
        .with_note(
            "orientation: the signs of controls_orientation (found over all top tokens), not \
             searched again; a class whose cells follow them shares the runs' division within \
             itself",
        )
        .with_precision(3);
    for c in rows {
        t.push_row(vec![
            Cell::from(c.what.clone()),
            Cell::from(c.pairs),
            Cell::from(c.mean_r),
            Cell::from(c.mean_oriented_r),
            Cell::from(format!("{} of {}", c.sign_matches, c.pairs)),
            Cell::from(format!(
                "{} of {}",
                c.strong_matches[0], c.strong_matches[1]
            )),
        ]);
    }
    t
}

/// `scores` with the values of its `top_n` most frequent scored tokens permuted among them.
fn permuted_top(
    scores: &[Option<f64>],
    freq: &[u64],
    top_n: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Option<f64>> {
    let top = top_tokens(freq, top_n, &[scores]);
    let mut values: Vec<Option<f64>> = top.iter().map(|&t| scores[t as usize]).collect();
    values.shuffle(rng);
    let mut out = scores.to_vec();
    for (&t, v) in top.iter().zip(values) {
        out[t as usize] = v;
    }
    out
}

/// The analysis as a table: one row per run (its orientation), then the summary.
pub fn orientation_table(o: &Orientation, top_n: usize) -> Table {
    let mut t = Table::new(vec!["what".into(), "value".into()])
        .with_title(format!(
            "Agreement up to orientation: one sign per run that makes the runs agree most, top \
             {top_n} tokens (Pearson)"
        ))
        .with_note(format!(
            "orientation: +1 keeps a run's eq.-3 orientation, -1 swaps its towers; the best of \
             all orientations (the first run +1) maximises the mean of s_i s_j r_ij; null: each \
             run's scores permuted over its top {top_n} tokens, the search repeated ({} \
             replicates); a mean oriented r well above the null's says the runs share one \
             division whose side each run's primary tower takes by chance",
            o.replicates
        ))
        .with_precision(3);
    for (l, s) in o.labels.iter().zip(&o.signs) {
        let sign = if *s > 0 { "+1" } else { "-1" };
        t.push_row(vec![
            Cell::from(format!("orientation of {l}")),
            Cell::from(sign),
        ]);
    }
    let rows: [(&str, Cell); 8] = [
        ("pairs", Cell::from(o.pairs)),
        ("mean r as measured", Cell::from(o.mean_r)),
        ("mean oriented r", Cell::from(o.mean_oriented_r)),
        (
            "pairs whose sign the orientation gives",
            Cell::from(format!("{} of {}", o.sign_matches, o.pairs)),
        ),
        (
            "of them with |r| > 0.1",
            Cell::from(format!(
                "{} of {}",
                o.strong_matches[0], o.strong_matches[1]
            )),
        ),
        ("null: mean oriented r, mean", Cell::from(o.null_mean)),
        ("null: mean oriented r, 97.5%", Cell::from(o.null_q975)),
        ("null: p", Cell::from(o.null_p)),
    ];
    for (what, v) in rows {
        t.push_row(vec![Cell::from(what), v]);
    }
    t
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_rng::normal;

    /// An orientation of runs a, b, c: a and b on one side, c on the other.
    pub(crate) fn abc_orientation() -> Orientation {
        Orientation {
            labels: ["a", "b", "c"].map(String::from).to_vec(),
            signs: vec![1, 1, -1],
            pairs: 3,
            mean_r: 0.0,
            mean_oriented_r: 0.0,
            sign_matches: 0,
            strong_matches: [0, 0],
            replicates: 0,
            null_mean: 0.0,
            null_q975: 0.0,
            null_p: 1.0,
        }
    }

    #[test]
    fn a_found_orientation_reads_other_cells_without_searching_again() {
        let o = abc_orientation();
        let cell = |a: &str, b: &str, r: f64| (a.to_string(), b.to_string(), r);
        let cells = [
            cell("a", "b", 0.4),
            cell("a", "c", -0.2),
            cell("b", "c", 0.05),
            // A run the orientation does not have: left out.
            cell("a", "z", 0.9),
        ];
        let c = o.apply("within x", &cells).unwrap();
        assert_eq!((c.what.as_str(), c.pairs), ("within x", 3));
        assert!((c.mean_r - 0.25 / 3.0).abs() < 1e-12);
        assert!((c.mean_oriented_r - (0.4 + 0.2 - 0.05) / 3.0).abs() < 1e-12);
        assert_eq!((c.sign_matches, c.strong_matches), (2, [2, 2]));
        assert!(matches!(
            o.apply("none", &[cell("y", "z", 0.5)]),
            Err(ExperimentError::TooLittleData { .. })
        ));
        let t = oriented_cells_table(&[c], 5000).to_markdown();
        assert!(t.contains("| within x") && t.contains("2 of 3"), "{t}");
    }

    #[test]
    fn finds_the_planted_orientation_of_a_shared_axis() {
        // Six runs share one axis of 400 tokens at loading 0.5, each on a planted side.
        let planted = [1i8, -1, -1, 1, -1, 1];
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let axis: Vec<f64> = (0..400).map(|_| normal(&mut rng)).collect();
        let scores = |strength: f64, rng: &mut ChaCha8Rng| -> Vec<Vec<f64>> {
            planted
                .iter()
                .map(|&s| {
                    axis.iter()
                        .map(|a| f64::from(s) * strength * a + normal(rng))
                        .collect()
                })
                .collect()
        };
        let cells_of = |x: &[Vec<f64>]| -> Vec<(usize, usize, f64)> {
            let mut c = vec![];
            for i in 0..x.len() {
                for j in i + 1..x.len() {
                    c.push((i, j, prefscore::pearson(&x[i], &x[j]).unwrap()));
                }
            }
            c
        };
        let x = scores(0.5, &mut rng);
        let cells = cells_of(&x);
        let (signs, mean) = best_orientation(6, &cells).unwrap();
        assert_eq!(signs, planted);
        // Loading 0.5 against unit noise: r = 0.25 / 1.25 = 0.2 per oriented pair.
        assert!((mean - 0.2).abs() < 0.05, "{mean}");
        let raw: f64 = cells.iter().map(|c| c.2).sum::<f64>() / cells.len() as f64;
        assert!(raw < mean - 0.1, "{raw} {mean}");
        // No shared axis: the best orientation still finds a little, far less.
        let (_, flat) = best_orientation(6, &cells_of(&scores(0.0, &mut rng))).unwrap();
        assert!(flat < 0.06, "{flat}");
        assert!(flat > 0.0, "{flat}");
    }

    /// A run of `V` tokens, 20 positions each, whose towers split along `axis` on side `side`
    /// at loading `load`, plus the run's own division (unit spread).
    fn run(seed: u64, axis: &[f64], side: f64, load: f64) -> RunScores {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let own: Vec<f64> = axis.iter().map(|_| normal(&mut rng)).collect();
        let v = axis.len();
        let (mut targets, mut logp) = (vec![], vec![vec![], vec![]]);
        for t in 0..v {
            let d = 0.2 * (side * load * axis[t] + own[t]);
            for _ in 0..20 {
                let base = -6.0 + 0.5 * normal(&mut rng);
                targets.push(t as u32);
                logp[0].push((base + d) as f32);
                logp[1].push((base - d) as f32);
            }
        }
        let lp = crate::test_runs::one_batch(v, targets, logp);
        crate::test_runs::gpt_run(format!("gpt-s{seed}"), lp)
    }

    /// The orientation of six runs on planted sides of one axis at loading `load`, with the
    /// sides the runs' eq.-3 primary towers give the planted ones.
    fn planted(load: f64, replicates: usize) -> (Orientation, Vec<i8>) {
        use crate::analysis::{compare_runs, TokenSelection};
        let sides = [1.0, -1.0, -1.0, 1.0, -1.0, 1.0];
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let axis: Vec<f64> = (0..300).map(|_| normal(&mut rng)).collect();
        let runs: Vec<RunScores> = (0..6)
            .map(|i| run(i as u64, &axis, sides[i], load))
            .collect();
        // Distinct frequencies: the pairs' partial correlation on log frequency needs spread.
        let freq: Vec<u64> = (0..axis.len() as u64).map(|t| 1000 - t).collect();
        let opts = r_only(&CorrOptions::default());
        let (top, kind) = (TokenSelection::TopFrequent(300), runs[0].scores.kind);
        let mut pairs = vec![];
        for i in 0..6 {
            for j in i + 1..6 {
                pairs.push(compare_runs(&runs[i], &runs[j], &freq, top, kind, &opts).unwrap());
            }
        }
        // Eq. 3 orients each run by its primary tower: the planted side, flipped where tower 2
        // is the primary one; signs are only defined up to the first run's.
        let seen: Vec<f64> = (0..6)
            .map(|i| {
                sides[i]
                    * if runs[i].scores.towers[0] == 0 {
                        1.0
                    } else {
                        -1.0
                    }
            })
            .collect();
        let expect = seen.iter().map(|s| (s * seen[0]) as i8).collect();
        (
            orientation(
                &runs,
                &pairs,
                TopTokens {
                    freq: &freq,
                    n: 300,
                },
                replicates,
            )
            .unwrap(),
            expect,
        )
    }

    #[test]
    fn recovers_planted_sides_through_eq3_and_beats_the_null() {
        let (o, expect) = planted(1.0, 99);
        assert_eq!(o.signs, expect, "{o:?}");
        assert_eq!(o.sign_matches, o.pairs, "{o:?}");
        assert!(o.mean_oriented_r > 0.3 && o.null_p <= 0.01, "{o:?}");
        assert!(o.null_q975 < o.mean_oriented_r, "{o:?}");
        // Without the axis the best orientation is within the null.
        let (flat, _) = planted(0.0, 99);
        assert!(flat.null_p > 0.05, "{flat:?}");
        assert!(flat.mean_oriented_r < 0.1, "{flat:?}");
        // Without replicates there is no null to summarise: no mean or quantile pretends one.
        let (bare, expect) = planted(1.0, 0);
        assert_eq!(bare.signs, expect, "{bare:?}");
        assert!(
            bare.null_mean.is_nan() && bare.null_q975.is_nan(),
            "{bare:?}"
        );
        assert_eq!(bare.null_p, 1.0);
    }

    #[test]
    fn orientation_refuses_too_many_runs_and_no_pairs() {
        assert!(matches!(
            best_orientation(MAX_RUNS + 1, &[(0, 1, 0.5)]),
            Err(ExperimentError::BadSetting { .. })
        ));
        assert!(matches!(
            best_orientation(3, &[]),
            Err(ExperimentError::TooLittleData { .. })
        ));
    }

    #[test]
    fn permuting_keeps_a_runs_top_values_and_moves_them() {
        let scores: Vec<Option<f64>> = (0..50).map(|i| (i % 7 != 0).then_some(i as f64)).collect();
        let freq: Vec<u64> = (0..50).map(|i| 100 - i as u64).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = permuted_top(&scores, &freq, 20, &mut rng);
        let top = top_tokens(&freq, 20, &[&scores]);
        let mut before: Vec<f64> = top.iter().map(|&t| scores[t as usize].unwrap()).collect();
        let mut after: Vec<f64> = top.iter().map(|&t| p[t as usize].unwrap()).collect();
        assert_ne!(before, after);
        before.sort_by(f64::total_cmp);
        after.sort_by(f64::total_cmp);
        assert_eq!(before, after);
        // Tokens outside the top and unscored tokens are untouched.
        for t in 0..50 {
            if !top.contains(&(t as u32)) {
                assert_eq!(p[t], scores[t]);
            }
        }
    }
}
