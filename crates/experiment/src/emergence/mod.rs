//! How the preference emerges during phase 1 (beyond the paper: no published figure shows it).
//!
//! Every phase-1 weight snapshot of a run (e.g. at 1/8, 1/4, 1/2 of training) has its own
//! heads, trained by its snapshot job ([`crate::snapshots`]) with the run's head rule and, when
//! the run has retest heads, a second pair with the retest seed, all scored on the study's
//! scoring set; the end of training is the run itself. For each point: the share of
//! tokens won by the primary tower and which tower that is, each head's gap to the joint head,
//! the head-seed and the split-half reliability of the scores, and their correlation with the
//! run's own end in the end's tower order. For each pair of runs of one model, and for each pair
//! of the first model's runs with another model's, at the same point: the raw Pearson
//! correlation with its bootstrap interval and the correlation disattenuated by the head-seed
//! reliabilities (as in the main tables) with its interval. This module only reads scores;
//! [`class_trends`] says whether agreement still rises, and [`write_emergence`] draws it.

use prefscore::{CorrOptions, Interval, ScoreKind};
use serde::{Deserialize, Serialize};

use crate::analysis::{compare_runs, paired_scores, select_tokens, RunScores, TokenSelection};
use crate::error::Result;
use crate::run::{HeadQuality, ScoredRun};

mod trends;
mod write;

pub use trends::{class_trends, ClassTrend};
pub use write::write_emergence;

/// What the emergence analysis covers.
#[derive(Debug, Clone, PartialEq)]
pub struct EmergenceSpec {
    /// The token selection of the correlations and reliabilities.
    pub selection: TokenSelection,
    /// The models (`RunSpec::model_name`, e.g. `gpt`, `elmo_released`) whose runs are analysed;
    /// the first is the reference of the cross-model pairs. Each snapshot costs one or two head
    /// trainings and scorings.
    pub models: Vec<String>,
    /// The score of the curve (the protocols: eq. 4's arithmetic mean, the paper's).
    pub kind: ScoreKind,
}

/// One run at one point of phase 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmergencePoint {
    /// `<model>-s<seed>`.
    pub label: String,
    /// The run's model.
    pub model: String,
    /// Fraction of phase 1's updates done (1 = the finished run).
    pub fraction: f64,
    /// Token positions trained by then.
    pub tokens: u64,
    /// The heads of that point (validation NLL, gap to the joint head, unigram flag).
    pub heads: HeadQuality,
    /// Share of scored tokens won by the primary tower.
    pub share_primary: f64,
    /// Head-seed reliability (Pearson of the scores of two head seeds), when retested.
    pub head_seed: Option<f64>,
    /// Split-half reliability (Pearson, Spearman-Brown corrected) over the selection.
    pub split_half: f64,
    /// Pearson r of this point's scores with the same run's scores at the end of phase 1, over
    /// the selection (1 at the end), both in the end's tower order (eq. 4 with the end's primary
    /// tower first): how much of the run's final division it already has. A negative value
    /// means its towers later traded sides; a change of the eq. 3 primary tower alone (see
    /// `primary_tower`) leaves it unchanged.
    pub with_end: Option<f64>,
    /// The tower (0 or 1) that eq. 3 makes primary at this point: the one with the higher mean
    /// probability of the target.
    pub primary_tower: Option<usize>,
    /// A head of this point, main or retest, ended no better than the unigram model.
    pub flagged: bool,
}

/// Two runs at the same point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmergencePair {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// The pair's models, `<model a> × <model b>`.
    pub class: String,
    /// Fraction of phase 1.
    pub fraction: f64,
    /// Token positions trained by then (by the first run).
    pub tokens: u64,
    /// Tokens in the selection.
    pub n: usize,
    /// Raw Pearson correlation of the two runs' scores.
    pub pearson: f64,
    /// Its bootstrap interval.
    pub interval: Option<Interval>,
    /// Head-seed reliabilities of the two runs.
    pub reliability: Option<[f64; 2]>,
    /// Disattenuated by the head-seed reliabilities, when both are positive.
    pub disattenuated: Option<f64>,
    /// Its bootstrap interval.
    pub disattenuated_interval: Option<Interval>,
    /// A head of either run at this point ended no better than the unigram model.
    pub flagged: bool,
}

/// The whole emergence analysis of a study.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Emergence {
    /// Every run at every point.
    pub points: Vec<EmergencePoint>,
    /// Every same-model pair, and every pair of a reference-model run with another model's, at
    /// every common point.
    pub pairs: Vec<EmergencePair>,
    /// The score the curve follows.
    pub kind: Option<ScoreKind>,
}

impl Emergence {
    /// The confidence level of the pairs' intervals for labels (`95%`;
    /// [`prefscore::common_level`]).
    pub fn interval_level(&self) -> String {
        prefscore::common_level(
            self.pairs
                .iter()
                .flat_map(|p| [p.interval.as_ref(), p.disattenuated_interval.as_ref()]),
        )
    }
}

/// One run at one point: (fraction, tokens, scores, heads).
type RunPoint = (f64, u64, RunScores, HeadQuality);

/// One run's points along phase 1: what the curve is drawn from.
pub(crate) struct RunCurve {
    /// `<model>-s<seed>`.
    pub label: String,
    /// The run's model.
    pub model: String,
    /// Its snapshots' points in order, then its end (fraction 1).
    pub points: Vec<RunPoint>,
}

/// The curve of a finished run under `kind`: its snapshots, then its end.
pub(crate) fn finished_curve(run: &ScoredRun, kind: ScoreKind) -> Result<RunCurve> {
    let res = run.result()?;
    let model = run.manifest.spec.model_name();
    let mut points = Vec::new();
    for snap in &run.snapshots {
        let (label, scoring) = (run.label.clone(), run.manifest.scoring.clone());
        let (lp, retest) = (snap.logprobs.clone(), snap.retest.as_ref());
        let scores = RunScores::from_logprobs(
            label,
            model.clone(),
            scoring,
            lp,
            retest,
            snap.flagged(),
            kind,
        )?;
        points.push((snap.fraction, snap.tokens, scores, snap.heads.clone()));
    }
    points.push((
        1.0,
        res.phase1.tokens,
        RunScores::new(run, kind)?,
        res.heads.clone(),
    ));
    let label = run.label.clone();
    Ok(RunCurve {
        label,
        model,
        points,
    })
}

/// Pearson r of a run's scores at one point with its scores at the end, over `sel`, with the
/// point's scores in the end's tower order ([`EmergencePoint::with_end`]).
fn r_with_end(
    point: &RunScores,
    end: &RunScores,
    freq: &[u64],
    sel: TokenSelection,
) -> Result<f64> {
    // Pearson r alone, as `compare_runs` computes it, without the comparison's other measures.
    let (_, x, y) = paired_scores(point, end, freq, sel)?;
    let r = prefscore::pearson(&x, &y)?;
    // Each point's scores put its own eq. 3 primary tower first. A race for the primary that
    // changes hands negates every score of the point without changing which tower takes which
    // tokens; in the end's order it does not read as the towers trading sides.
    let same_order = point.scores.towers == end.scores.towers;
    Ok(if same_order { r } else { -r })
}

/// The emergence analysis over the runs of `spec.models` among `runs`, from the scores of their
/// phase-1 snapshots (`ScoredRun::snapshots`, made by their snapshot jobs), with the bootstrap of
/// `copts` (its permutations are not used); `freq` selects the tokens. A pure function of the
/// runs: no training, no files.
pub fn emergence(
    runs: &[ScoredRun],
    freq: &[u64],
    spec: &EmergenceSpec,
    copts: &CorrOptions,
) -> Result<Emergence> {
    let curves = runs
        .iter()
        .filter(|r| spec.models.contains(&r.manifest.spec.model_name()))
        .map(|r| finished_curve(r, spec.kind))
        .collect::<Result<Vec<_>>>()?;
    let sel = spec.selection;
    let copts = CorrOptions {
        bootstrap: copts.bootstrap,
        permutations: 0,
    };
    // A run's own point measures (reliabilities, r with its end) need r only: no bootstrap.
    let r_only = CorrOptions {
        bootstrap: prefscore::Bootstrap {
            resamples: 0,
            ..copts.bootstrap
        },
        permutations: 0,
    };
    let mut out = Emergence {
        kind: Some(spec.kind),
        ..Emergence::default()
    };
    for run in &curves {
        let end = run.points.last().map(|p| &p.2);
        for (fraction, tokens, s, q) in &run.points {
            let toks = select_tokens(&[s], freq, sel);
            let (pearson, boot) = (prefscore::Method::Pearson, &r_only.bootstrap);
            let sh = s.split_half(spec.kind, &toks, pearson, boot)?;
            let hs = s.retest_reliability(&toks, pearson, boot)?;
            let with_end = match end {
                Some(end) => Some(r_with_end(s, end, freq, sel)?),
                None => None,
            };
            out.points.push(EmergencePoint {
                label: run.label.clone(),
                model: run.model.clone(),
                fraction: *fraction,
                tokens: *tokens,
                heads: q.clone(),
                share_primary: s.share_primary,
                head_seed: hs.map(|r| r.r),
                split_half: sh.r,
                with_end,
                primary_tower: s.scores.towers.first().copied(),
                flagged: s.flagged,
            });
        }
    }
    let all: Vec<(&String, &Vec<RunPoint>)> =
        curves.iter().map(|c| (&c.model, &c.points)).collect();
    let reference = spec.models.first();
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            let (ma, mb) = (all[i].0, all[j].0);
            if ma != mb && Some(ma) != reference && Some(mb) != reference {
                continue;
            }
            // The reference model first in a cross-model pair.
            let (x, y) = if Some(mb) == reference && ma != mb {
                (&all[j], &all[i])
            } else {
                (&all[i], &all[j])
            };
            for (fa, tokens, sa, _) in x.1 {
                let Some((_, _, sb, _)) = y.1.iter().find(|p| p.0 == *fa) else {
                    continue;
                };
                let p = compare_runs(sa, sb, freq, sel, spec.kind, &copts)?;
                out.pairs.push(EmergencePair {
                    a: p.a,
                    b: p.b,
                    class: format!("{} × {}", x.0, y.0),
                    fraction: *fa,
                    tokens: *tokens,
                    n: p.tokens,
                    pearson: p.pearson.r,
                    interval: p.pearson.interval,
                    reliability: p.reliability_head_seed,
                    disattenuated: p.disattenuated.as_ref().and_then(|d| d.value),
                    disattenuated_interval: p.disattenuated.and_then(|d| d.interval),
                    flagged: p.flagged,
                });
            }
        }
    }
    Ok(out)
}

/// The points' fractions of phase 1, ascending, each once: the x positions of the figures.
fn sorted_fractions(fractions: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut out: Vec<f64> = fractions.collect();
    out.sort_by(f64::total_cmp);
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn pair(class: &str, fraction: f64, d: f64, half: f64) -> EmergencePair {
        EmergencePair {
            a: "a".into(),
            b: "b".into(),
            class: class.into(),
            fraction,
            tokens: 0,
            n: 10,
            pearson: d * 0.9,
            interval: None,
            reliability: Some([0.9, 0.9]),
            disattenuated: Some(d),
            disattenuated_interval: Some(Interval {
                lo: d - half,
                hi: d + half,
                level: 0.95,
            }),
            flagged: false,
        }
    }

    /// A `gpt × gpt` pair of the runs `a` and `b` (see [`pair`]).
    pub(super) fn between(a: &str, b: &str, fraction: f64, d: f64) -> EmergencePair {
        EmergencePair {
            a: a.into(),
            b: b.into(),
            ..pair("gpt × gpt", fraction, d, 0.05)
        }
    }

    /// The curve of these pairs alone (no run points, no score kind).
    pub(super) fn of_pairs(pairs: Vec<EmergencePair>) -> Emergence {
        Emergence {
            kind: None,
            points: Vec::new(),
            pairs,
        }
    }

    /// One `gpt × gpt` pair at two (fraction, disattenuated r) points, intervals ± 0.05.
    pub(super) fn one_pair(points: [(f64, f64); 2]) -> Emergence {
        of_pairs(
            points
                .iter()
                .map(|&(f, d)| pair("gpt × gpt", f, d, 0.05))
                .collect(),
        )
    }

    /// A run of 200 tokens, 20 positions each, whose tower 0 is ahead of tower 1 on token t by
    /// `0.4 · side · division[t]` nats minus `lead_1` (tower 1's lead on every token, which
    /// decides eq. 3's primary tower and nothing else).
    fn divided_run(division: &[f64], side: f64, lead_1: f64) -> RunScores {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (mut targets, mut logp) = (vec![], vec![vec![], vec![]]);
        for (t, d) in division.iter().enumerate() {
            for _ in 0..20 {
                let base = -6.0 + rand::Rng::random_range(&mut rng, -1.0..1.0);
                targets.push(t as u32);
                logp[0].push((base + 0.2 * side * d) as f32);
                logp[1].push((base - 0.2 * side * d + lead_1) as f32);
            }
        }
        let lp = crate::test_runs::one_batch(division.len(), targets, logp);
        crate::test_runs::gpt_run("gpt-s0".into(), lp)
    }

    #[test]
    fn r_with_the_end_follows_the_towers_not_the_primary() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let division: Vec<f64> = (0..200)
            .map(|_| rand::Rng::random_range(&mut rng, -1.0..1.0))
            .collect();
        // Distinct frequencies: the comparison's partial correlation needs log frequency to vary.
        let freq: Vec<u64> = (0..division.len() as u64).map(|t| 20 + t).collect();
        let (sel, opts) = (TokenSelection::TopFrequent(200), CorrOptions::default());
        let opts = CorrOptions {
            bootstrap: prefscore::Bootstrap {
                resamples: 0,
                ..opts.bootstrap
            },
            permutations: 0,
        };
        let end = divided_run(&division, 1.0, -0.5);
        assert_eq!(end.scores.towers, [0, 1], "tower 0 is primary at the end");
        // The same division with tower 1 primary: every score of the point is negated.
        let primary_changed = divided_run(&division, 1.0, 0.5);
        assert_eq!(primary_changed.scores.towers, [1, 0]);
        let raw = compare_runs(
            &primary_changed,
            &end,
            &freq,
            sel,
            ScoreKind::ArithmeticMean,
            &opts,
        );
        assert!(
            raw.unwrap().pearson.r < -0.99,
            "in eq. 3 order the sign flips"
        );
        let r = r_with_end(&primary_changed, &end, &freq, sel).unwrap();
        assert!(r > 0.99, "same division, other primary: {r}");
        // The towers traded sides while tower 0 stays primary: that is a negative r.
        let traded = divided_run(&division, -1.0, -0.5);
        assert_eq!(traded.scores.towers, [0, 1]);
        let r = r_with_end(&traded, &end, &freq, sel).unwrap();
        assert!(r < -0.99, "traded sides: {r}");
    }
}
