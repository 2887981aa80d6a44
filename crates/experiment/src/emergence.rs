//! How the preference emerges during phase 1 (beyond the paper: no published figure shows it).
//!
//! Every phase-1 weight snapshot of a run (e.g. at 1/8, 1/4, 1/2 of training) has its own
//! heads, trained by the run stage (`run::SnapshotScores`) with the run's head rule and, when
//! the run has retest heads, a second pair with the retest seed, all scored on the study's
//! scoring set; the end of training is the run itself. For each point: the share of
//! tokens won by the primary tower and which tower that is, each head's gap to the joint head,
//! the head-seed and the split-half reliability of the scores, and their correlation with the
//! run's own end in the end's tower order. For each pair of runs of one model, and for each pair
//! of the first model's runs with another model's, at the same point: the raw Pearson
//! correlation with its bootstrap interval and the correlation disattenuated by the head-seed
//! reliabilities (as in the main tables) with its interval. This module only reads scores.

use std::path::{Path, PathBuf};

use prefscore::{CorrOptions, Interval, ScoreKind};
use report::{IntervalGroup, IntervalPanel, IntervalPoint, PlotOptions};
use serde::{Deserialize, Serialize};

use crate::analysis::{compare_runs, paired_scores, select_tokens, RunScores, TokenSelection};
use crate::orientation::{apply_signs, label_sign, labelled_orientation};
use crate::run::{HeadQuality, ScoredRun};
use crate::snapshots::SnapshotScores;
use crate::Result;

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
    /// `primary_tower`) leaves it unchanged. None in files written before it; in files written
    /// before 27 Nov 2026, 23:00 UTC, each point was in its own eq. 3 order, so a change of
    /// primary tower flipped its sign.
    #[serde(default)]
    pub with_end: Option<f64>,
    /// The tower (0 or 1) that eq. 3 makes primary at this point: the one with the higher mean
    /// probability of the target. None in files written before 27 Nov 2026, 23:00 UTC.
    #[serde(default)]
    pub primary_tower: Option<usize>,
    /// A head of this point, main or retest, ended no better than the unigram model.
    #[serde(default)]
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
    #[serde(default)]
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
    /// The score the curve follows (files written before 28 Nov 2026 hold none: the arithmetic
    /// mean, the only one then).
    #[serde(default)]
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
    /// Its snapshots' points in order, then its end (fraction 1) when `ended`.
    pub points: Vec<RunPoint>,
    /// Whether the run has finished, its last point being its end.
    pub ended: bool,
}

/// The points of the snapshots `snaps` of the run `label` (model `model`) scored on the set
/// `scoring`, under `kind`.
pub(crate) fn snapshot_points(
    label: &str,
    model: &str,
    scoring: &crate::scoring::ScoringSetId,
    snaps: &[SnapshotScores],
    kind: ScoreKind,
) -> Result<Vec<RunPoint>> {
    snaps
        .iter()
        .map(|snap| {
            let scores = RunScores::from_logprobs(
                label.to_string(),
                model.to_string(),
                scoring.clone(),
                snap.logprobs.clone(),
                snap.retest.as_ref(),
                snap.flagged(),
                kind,
            )?;
            Ok((snap.fraction, snap.tokens, scores, snap.heads.clone()))
        })
        .collect()
}

/// The curve of a finished run: its snapshots, then its end.
pub(crate) fn finished_curve(run: &ScoredRun, kind: ScoreKind) -> Result<RunCurve> {
    let res = run.result()?;
    let model = run.record.spec.model_name();
    let scoring = &run.record.scoring;
    let mut points = snapshot_points(&run.label, &model, scoring, &run.snapshots, kind)?;
    let last = RunScores::new(run, kind)?;
    points.push((1.0, res.phase1.tokens, last, res.heads.clone()));
    Ok(RunCurve {
        label: run.label.clone(),
        model,
        points,
        ended: true,
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
/// phase-1 snapshots (`ScoredRun::snapshots`, made by the run stage), with the bootstrap of
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
        .filter(|r| spec.models.contains(&r.record.spec.model_name()))
        .map(|r| finished_curve(r, spec.kind))
        .collect::<Result<Vec<_>>>()?;
    curve_emergence(&curves, freq, spec, copts)
}

/// The emergence analysis of [`emergence`] over runs' curves, finished or not (a run still in
/// phase 1 has no end: its points have no r with their end, and pairs form at the points both
/// runs have).
pub(crate) fn curve_emergence(
    curves: &[RunCurve],
    freq: &[u64],
    spec: &EmergenceSpec,
    copts: &CorrOptions,
) -> Result<Emergence> {
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
    for run in curves {
        let end = run.points.last().filter(|_| run.ended).map(|p| &p.2);
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

/// Whether a class of pairs is still gaining agreement at the end of phase 1: the mean
/// disattenuated r at the last two points (over the pairs that have one at both), and whether the
/// end's mean exceeds the previous point's by more than the mean half-width of the end's intervals
/// (else: levelled off, or too noisy to tell). The same again up to orientation: a run's two towers
/// may take either side of a shared division, so a class mean of signed r can cancel; the oriented
/// mean first multiplies each pair by the signs of [`crate::orientation::best_orientation`] over
/// the raw r of every pair at the same point. Each point gets its own orientation: signs fitted at
/// the end alone would make the end's mean positive by construction and call a run whose towers
/// traded sides late "rising".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassTrend {
    /// `<model a> × <model b>`.
    pub class: String,
    /// The point before the end (fraction) and its mean disattenuated r.
    pub before: (f64, f64),
    /// The last point with a value (fraction 1 once the runs have finished) and its mean
    /// disattenuated r.
    pub end: (f64, f64),
    /// Mean half-width of the end's intervals; none when no pair has one there (no bootstrap,
    /// or too many undefined replicates), and then no verdict on a rise either.
    pub half_width: Option<f64>,
    /// `end − before > half_width`.
    pub rising: Option<bool>,
    /// Mean oriented disattenuated r before the end and at the end, each point under its own
    /// orientation (none when either point's runs could not be oriented: more than
    /// [`crate::orientation::MAX_RUNS`] runs).
    pub oriented: Option<(f64, f64)>,
    /// Its gain exceeds `half_width`.
    pub oriented_rising: Option<bool>,
}

/// Runs' labels and their orientation signs (+1 / -1), in one order.
type Signs = (Vec<String>, Vec<i8>);

/// Each point of phase 1 with the orientation of its pairs ([`orientation_at`]), in order.
type Orientations = Vec<(f64, Option<Signs>)>;

/// One orientation search per point of phase 1, shared by every class of pairs.
fn orientations(e: &Emergence) -> Orientations {
    sorted_fractions(e.pairs.iter().map(|p| p.fraction))
        .into_iter()
        .map(|f| (f, orientation_at(e, f)))
        .collect()
}

/// The signs of the point at `fraction`, where one was found.
fn signs_at(o: &Orientations, fraction: f64) -> Option<&Signs> {
    o.iter().find(|(f, _)| *f == fraction)?.1.as_ref()
}

/// The runs of the pairs at `fraction` of phase 1 and their orientation signs, from the pairs'
/// raw r; none where it cannot be found.
fn orientation_at(e: &Emergence, fraction: f64) -> Option<Signs> {
    let cells: Vec<(String, String, f64)> = e
        .pairs
        .iter()
        .filter(|p| p.fraction == fraction)
        .map(|p| (p.a.clone(), p.b.clone(), p.pearson))
        .collect();
    labelled_orientation(&cells).ok()
}

/// The trend of every class of pairs (see [`ClassTrend`]); classes with fewer than two points
/// with a disattenuated value are left out.
pub fn class_trends(e: &Emergence) -> Vec<ClassTrend> {
    let mut classes: Vec<&str> = e.pairs.iter().map(|p| p.class.as_str()).collect();
    classes.sort();
    classes.dedup();
    let orientations = orientations(e);
    let mut out = Vec::new();
    for c in classes {
        let fr = sorted_fractions(
            e.pairs
                .iter()
                .filter(|p| p.class == c && p.disattenuated.is_some())
                .map(|p| p.fraction),
        );
        let [.., before, end] = fr[..] else {
            continue;
        };
        let at = |f: f64| -> Vec<&EmergencePair> {
            e.pairs
                .iter()
                .filter(|p| p.class == c && p.fraction == f && p.disattenuated.is_some())
                .collect()
        };
        let mean = |ps: &[&EmergencePair]| {
            ps.iter().filter_map(|p| p.disattenuated).sum::<f64>() / ps.len() as f64
        };
        let oriented_mean = |ps: &[&EmergencePair], f: f64| -> Option<f64> {
            let (labels, signs) = signs_at(&orientations, f)?;
            let cells: Vec<(String, String, f64)> = ps
                .iter()
                .filter_map(|p| Some((p.a.clone(), p.b.clone(), p.disattenuated?)))
                .collect();
            let o = apply_signs(labels, signs, c, &cells).ok()?;
            Some(o.mean_oriented_r)
        };
        // The same pairs at both points: a pair with no value at one of them (a reliability
        // at or below 0 there) would otherwise move the mean by leaving.
        let (pb, pe) = (at(before), at(end));
        let in_both = |p: &EmergencePair, other: &[&EmergencePair]| {
            other.iter().any(|q| q.a == p.a && q.b == p.b)
        };
        let pb: Vec<&EmergencePair> = pb.iter().copied().filter(|p| in_both(p, &pe)).collect();
        let pe: Vec<&EmergencePair> = pe.iter().copied().filter(|p| in_both(p, &pb)).collect();
        if pb.is_empty() {
            continue;
        }
        let widths: Vec<f64> = pe
            .iter()
            .filter_map(|p| p.disattenuated_interval.map(|i| (i.hi - i.lo) / 2.0))
            .collect();
        let half_width =
            (!widths.is_empty()).then(|| widths.iter().sum::<f64>() / widths.len() as f64);
        let (mb, me) = (mean(&pb), mean(&pe));
        let oriented = oriented_mean(&pb, before).zip(oriented_mean(&pe, end));
        out.push(ClassTrend {
            class: c.to_string(),
            before: (before, mb),
            end: (end, me),
            half_width,
            rising: half_width.map(|h| me - mb > h),
            oriented,
            oriented_rising: oriented.zip(half_width).map(|((b, e), h)| e - b > h),
        });
    }
    out
}

/// Writes the emergence table (`emergence.{csv,md,json}`, with the trend of every class of
/// pairs) and the figures: `fig_emergence_correlation.png` (a panel per class of pairs, the
/// same-model classes first, on one y range: every pair's disattenuated r, filled, and its raw
/// r, hollow, with bootstrap intervals, at each point of phase 1; a line joins the class's mean),
/// `fig_emergence_oriented.png` (the same up to orientation, each point in its own, as the
/// oriented trend rows; where one is found) and
/// `fig_emergence_heads.png` (each run's primary share, mean head gap, head-seed reliability and
/// r with its own end at each fraction). Returns the files.
pub fn write_emergence(e: &Emergence, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = emergence_table(e).write_all(out, "emergence")?;
    files.extend(correlation_figures(e, out)?);
    files.extend(heads_figure(e, out)?);
    Ok(files)
}

/// Panels a row in the correlation figures (four models' same-model classes fill the first).
const PANEL_COLUMNS: usize = 4;

/// `fig_emergence_correlation.png`: each class's pairs with intervals at each fraction of
/// phase 1, and `fig_emergence_oriented.png`: the same up to orientation (each pair times its
/// runs' signs in the orientation of its own point, as the oriented trend rows, so that runs
/// whose towers traded sides later do not read as disagreeing before), where some point has one
/// (none without pairs).
fn correlation_figures(e: &Emergence, out: &Path) -> Result<Vec<PathBuf>> {
    let fractions = sorted_fractions(e.pairs.iter().map(|p| p.fraction));
    if fractions.is_empty() {
        return Ok(Vec::new());
    }
    let positions: Vec<String> = fractions.iter().map(|&f| fraction_name(f)).collect();
    let orientation = orientations(e);
    let mut figures = vec![("fig_emergence_correlation.png", None, "Pearson r", "")];
    if orientation.iter().any(|(_, s)| s.is_some()) {
        figures.push((
            "fig_emergence_oriented.png",
            Some(&orientation),
            "oriented r",
            " (up to orientation, each point its own)",
        ));
    }
    let mut files = Vec::new();
    for (name, signs, what, title) in figures {
        let f = out.join(name);
        report::interval_grid(
            &f,
            &positions,
            &class_panels(e, &fractions, signs),
            PANEL_COLUMNS,
            &PlotOptions {
                title: format!("Agreement of the preference score during phase 1{title}"),
                x_label: "fraction of phase 1 trained".into(),
                y_label: format!("{what}; {} bootstrap intervals", e.interval_level()),
                ..PlotOptions::default()
            },
        )?;
        files.push(f);
    }
    Ok(files)
}

/// The classes of pairs in the order of the figures: same-model classes (`m × m`) first, then
/// the cross-model ones, each in first-seen order.
fn panel_order(e: &Emergence) -> Vec<&str> {
    let classes = first_seen(e.pairs.iter().map(|p| p.class.as_str()));
    let same = |c: &str| c.split_once(" × ").is_some_and(|(a, b)| a == b);
    let (mut first, cross): (Vec<&str>, Vec<&str>) = classes.into_iter().partition(|c| same(c));
    first.extend(cross);
    first
}

/// Legend name of the disattenuated points.
const DISATTENUATED: &str = "disattenuated r (head-seed reliability)";
/// Legend name of the raw points.
const RAW: &str = "raw r";

/// A panel per class of pairs ([`panel_order`]), titled with the class and its number of pairs,
/// in the class's colour: each pair's disattenuated r (filled) and raw r (hollow) at its
/// fraction's position, with their intervals. A class without reliabilities has the raw group
/// only. With `orientation`, each pair's values and interval are multiplied by its runs' signs
/// at its point, and pairs at a point without an orientation are left out.
fn class_panels(
    e: &Emergence,
    fractions: &[f64],
    orientation: Option<&Orientations>,
) -> Vec<IntervalPanel> {
    // The product of the pair's runs' signs at its point (1 unoriented), or none.
    let sign = |p: &EmergencePair| -> Option<f64> {
        let Some(o) = orientation else {
            return Some(1.0);
        };
        let (labels, s) = signs_at(o, p.fraction)?;
        Some(label_sign(labels, s, &p.a)? * label_sign(labels, s, &p.b)?)
    };
    let point = |p: &EmergencePair, y: f64, iv: Option<Interval>| {
        let at = fractions.iter().position(|f| *f == p.fraction)?;
        let s = sign(p)?;
        let (y, iv) = (s * y, iv.map(|i| (s * i.lo, s * i.hi)));
        Some(IntervalPoint {
            at,
            y,
            interval: iv.map(|(lo, hi)| (lo.min(hi).min(y), lo.max(hi).max(y))),
        })
    };
    let mut panels = Vec::new();
    for (ci, c) in panel_order(e).into_iter().enumerate() {
        let pairs = || e.pairs.iter().filter(move |p| p.class == c);
        let mut runs: Vec<(&str, &str)> = pairs().map(|p| (p.a.as_str(), p.b.as_str())).collect();
        runs.sort();
        runs.dedup();
        let mut groups = Vec::new();
        let corrected: Vec<IntervalPoint> = pairs()
            .filter_map(|p| point(p, p.disattenuated?, p.disattenuated_interval))
            .collect();
        if !corrected.is_empty() {
            groups.push(IntervalGroup {
                name: DISATTENUATED.into(),
                points: corrected,
                colour: Some(ci),
                hollow: false,
            });
        }
        groups.push(IntervalGroup {
            name: RAW.into(),
            points: pairs()
                .filter_map(|p| point(p, p.pearson, p.interval))
                .collect(),
            colour: Some(ci),
            hollow: true,
        });
        let n = runs.len();
        panels.push(IntervalPanel {
            title: format!("{c} ({n} pair{})", if n == 1 { "" } else { "s" }),
            groups,
        });
    }
    panels
}

/// `fig_emergence_heads.png` (none without points): four panels, two a row, over the fractions
/// of phase 1, one colour per run throughout: the share won by the primary tower, the mean
/// head gap (head NLL minus joint NLL, nats), the head-seed reliability (the disattenuation's
/// divisor) and the r with the run's own end ([`EmergencePoint::with_end`]).
fn heads_figure(e: &Emergence, out: &Path) -> Result<Option<PathBuf>> {
    let panels = heads_panels(e);
    if panels.is_empty() {
        return Ok(None);
    }
    let positions: Vec<String> = sorted_fractions(e.points.iter().map(|p| p.fraction))
        .into_iter()
        .map(fraction_name)
        .collect();
    let f = out.join("fig_emergence_heads.png");
    report::interval_grid(
        &f,
        &positions,
        &panels,
        2,
        &PlotOptions {
            title: "Each run's towers and heads during phase 1".into(),
            x_label: "fraction of phase 1 trained".into(),
            y_label: "the measure in the panel's title".into(),
            ..PlotOptions::default()
        },
    )?;
    Ok(Some(f))
}

/// Each name once, in the order first seen.
fn first_seen<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// The points' fractions of phase 1, ascending, each once: the x positions of the figures.
fn sorted_fractions(fractions: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut out: Vec<f64> = fractions.collect();
    out.sort_by(f64::total_cmp);
    out.dedup();
    out
}

/// The panels of [`heads_figure`], a group per run in first-seen order; a measure gets a panel
/// only where some point has it (e.g. no reliability panel without retest heads).
fn heads_panels(e: &Emergence) -> Vec<IntervalPanel> {
    let fractions = sorted_fractions(e.points.iter().map(|p| p.fraction));
    let runs = first_seen(e.points.iter().map(|p| p.label.as_str()));
    let mean_gap = |p: &EmergencePoint| {
        let g = &p.heads.gap;
        (!g.is_empty()).then(|| g.iter().sum::<f64>() / g.len() as f64)
    };
    type Measure<'a> = (&'a str, &'a dyn Fn(&EmergencePoint) -> Option<f64>);
    let measures: [Measure; 4] = [
        ("share won by the primary tower", &|p| Some(p.share_primary)),
        ("mean head gap (nats)", &mean_gap),
        ("head-seed reliability", &|p| p.head_seed),
        ("r with the run's own end", &|p| p.with_end),
    ];
    let mut panels = Vec::new();
    for (title, value) in measures {
        let groups: Vec<IntervalGroup> = runs
            .iter()
            .enumerate()
            .map(|(ri, r)| IntervalGroup {
                name: r.to_string(),
                points: e
                    .points
                    .iter()
                    .filter(|p| p.label == *r)
                    .filter_map(|p| {
                        Some(IntervalPoint {
                            at: fractions.iter().position(|f| *f == p.fraction)?,
                            y: value(p).filter(|v| v.is_finite())?,
                            interval: None,
                        })
                    })
                    .collect(),
                colour: Some(ri),
                hollow: false,
            })
            .filter(|g| !g.points.is_empty())
            .collect();
        if !groups.is_empty() {
            panels.push(IntervalPanel {
                title: title.into(),
                groups,
            });
        }
    }
    panels
}

/// `1/8`, `1/4`, `1/2`, `1`, or the decimal for other fractions.
fn fraction_name(f: f64) -> String {
    match (1..=64).find(|d| ((1.0 / f) - *d as f64).abs() < 1e-9) {
        Some(1) => "1".into(),
        Some(d) => format!("1/{d}"),
        None => format!("{f:.3}"),
    }
}

/// The emergence table: a row per run at each point, per pair at each point, and per class's
/// trend.
fn emergence_table(e: &Emergence) -> report::Table {
    let level = e.interval_level();
    let cols = [
        "what",
        "fraction",
        "tokens",
        "value",
        &format!("{level} interval"),
        "disattenuated",
        &format!("{level} interval "),
        "head-seed rel.",
        "split-half rel.",
        "r with its end",
        "primary tower",
        "head gap 1",
        "head gap 2",
        "flagged",
    ];
    let mut t = report::Table::new(cols.map(String::from).to_vec())
        .with_title("How the preference emerges: runs and run pairs at phase-1 snapshots")
        .with_note(format!("{}; scores: {}; value: share won by the primary tower (runs) or raw Pearson r (pairs); disattenuated by the head-seed reliabilities (both shown as a / b for pairs), bootstrap {level} intervals over tokens; r with its end: Pearson of a run's scores at that point with its own scores at the end, both in the end's tower order (negative: its towers traded sides later); primary tower: the tower (1 or 2) of higher mean target probability at that point (eq. 3), whose scores the value and the pairs' r put first, so a change of primary tower flips the sign of the run's pairs but not its r with its end; head gap: head NLL minus joint NLL (nats); trend rows: mean disattenuated r of a class at the last two points, rising when the gain exceeds the mean half-width of the end's intervals; oriented: each pair's r times its runs' signs in the orientation of that point's raw r (controls_orientation's rule), so pairs whose towers took opposite sides do not cancel and a late swap of sides does not read as a rise; one sign per run for all of that point's pairs together, so a pair stays negative where its runs' other pairs outweigh it (three runs that cannot all agree)", machines_note(e), kind_name(e.kind)))
        .with_precision(3);
    for p in &e.points {
        t.push_row(point_row(p));
    }
    for p in &e.pairs {
        t.push_row(pair_row(p));
    }
    for c in &class_trends(e) {
        for r in trend_rows(c) {
            t.push_row(r);
        }
    }
    t
}

/// The score kind as the table's note says it.
fn kind_name(kind: Option<ScoreKind>) -> &'static str {
    match kind.unwrap_or(ScoreKind::ArithmeticMean) {
        ScoreKind::ArithmeticMean => "log of the arithmetic mean probability (eq. 4)",
        ScoreKind::GeometricMean => "mean log probability (the released code's)",
    }
}

/// Which machine trained the heads of which points, e.g. "heads trained on cpu ...: gpt-s0 at
/// 1/8, 1/4; on cuda:0 ...: gpt-s1 at 1/8" (a run's points may mix machines: a lent GPU's
/// call cut short leaves some to the CPU).
fn machines_note(e: &Emergence) -> String {
    fn machine(p: &EmergencePoint) -> &str {
        p.heads
            .machine
            .as_deref()
            .unwrap_or("a machine not recorded")
    }
    let at = |f: f64| match f == 1.0 {
        true => "the end".to_string(),
        false => fraction_name(f),
    };
    let parts: Vec<String> = first_seen(e.points.iter().map(machine))
        .into_iter()
        .map(|m| {
            let on: Vec<&EmergencePoint> = e.points.iter().filter(|p| machine(p) == m).collect();
            let runs: Vec<String> = first_seen(on.iter().map(|p| p.label.as_str()))
                .into_iter()
                .map(|l| {
                    let f: Vec<String> = on
                        .iter()
                        .filter(|p| p.label == l)
                        .map(|p| at(p.fraction))
                        .collect();
                    format!("{l} at {}", f.join(", "))
                })
                .collect();
            format!("{m}: {}", runs.join("; "))
        })
        .collect();
    format!("heads trained on {}", parts.join("; on "))
}

/// An empty number cell.
fn no_value() -> report::Cell {
    report::Cell::from(None::<f64>)
}

/// `[lo, hi]`, or nothing.
fn interval_text(i: Option<Interval>) -> String {
    match i {
        Some(i) => format!("[{:.3}, {:.3}]", i.lo, i.hi),
        None => String::new(),
    }
}

/// A run at one point of phase 1.
fn point_row(p: &EmergencePoint) -> Vec<report::Cell> {
    let gap = |k: usize| p.heads.gap.get(k).copied();
    vec![
        p.label.clone().into(),
        p.fraction.into(),
        (p.tokens as usize).into(),
        p.share_primary.into(),
        "".into(),
        no_value(),
        "".into(),
        p.head_seed.into(),
        p.split_half.into(),
        p.with_end.into(),
        p.primary_tower.map(|t| t + 1).into(),
        gap(0).into(),
        gap(1).into(),
        flag_text(p.flagged),
    ]
}

/// A pair of runs at one point of phase 1.
fn pair_row(p: &EmergencePair) -> Vec<report::Cell> {
    let rel = p
        .reliability
        .map(|[a, b]| format!("{a:.3} / {b:.3}"))
        .unwrap_or_default();
    vec![
        format!("{} × {}", p.a, p.b).into(),
        p.fraction.into(),
        (p.tokens as usize).into(),
        p.pearson.into(),
        interval_text(p.interval).into(),
        p.disattenuated.into(),
        interval_text(p.disattenuated_interval).into(),
        rel.into(),
        no_value(),
        no_value(),
        no_value(),
        no_value(),
        no_value(),
        flag_text(p.flagged),
    ]
}

/// The flagged column: a head no better than the unigram model.
fn flag_text(flagged: bool) -> report::Cell {
    (if flagged { "yes" } else { "" }).into()
}

/// A class's trend over its last two points, and up to orientation where the runs have one.
fn trend_rows(c: &ClassTrend) -> Vec<Vec<report::Cell>> {
    // A signed mean that rises while it stays at or below zero is disagreement fading, not
    // agreement growing: said so, not "still rising".
    let verdict = |rising: Option<bool>, end: f64| match (rising, end > 0.0) {
        (Some(true), true) => "still rising",
        (Some(true), false) => "rising toward 0 (still at or below it)",
        (Some(false), _) => "not rising beyond its interval",
        (None, _) => "no interval at the end to judge a rise",
    };
    let row = |what: String, (before, end): (f64, f64)| -> Vec<report::Cell> {
        vec![
            what.into(),
            c.end.0.into(),
            "".into(),
            before.into(),
            format!("at {}", fraction_name(c.before.0)).into(),
            end.into(),
            match c.half_width {
                Some(h) => format!("± {h:.3} at the end"),
                None => "no interval at the end".into(),
            }
            .into(),
            "".into(),
            no_value(),
            no_value(),
            no_value(),
            no_value(),
            no_value(),
            "".into(),
        ]
    };
    let mut rows = vec![row(
        format!("trend {}: {}", c.class, verdict(c.rising, c.end.1)),
        (c.before.1, c.end.1),
    )];
    if let Some(o) = c.oriented {
        rows.push(row(
            format!(
                "trend {}, oriented: {}",
                c.class,
                verdict(c.oriented_rising, o.1)
            ),
            o,
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(class: &str, fraction: f64, d: f64, half: f64) -> EmergencePair {
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
    fn between(a: &str, b: &str, fraction: f64, d: f64) -> EmergencePair {
        EmergencePair {
            a: a.into(),
            b: b.into(),
            ..pair("gpt × gpt", fraction, d, 0.05)
        }
    }

    #[test]
    fn trends_compare_the_last_two_points_with_the_end_intervals() {
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs: vec![
                pair("gpt × gpt", 0.5, 0.5, 0.05),
                pair("gpt × gpt", 1.0, 0.7, 0.05),
                pair("gpt × bert", 0.5, 0.5, 0.05),
                pair("gpt × bert", 1.0, 0.52, 0.05),
                pair("bert × bert", 1.0, 0.3, 0.05),
            ],
        };
        let t = class_trends(&e);
        let names: Vec<(&str, Option<bool>)> =
            t.iter().map(|c| (c.class.as_str(), c.rising)).collect();
        assert_eq!(
            names,
            [("gpt × bert", Some(false)), ("gpt × gpt", Some(true))]
        );
        let half = t[1].half_width.unwrap();
        assert!((t[1].end.1 - 0.7).abs() < 1e-12 && (half - 0.05).abs() < 1e-12);
    }

    #[test]
    fn without_intervals_at_the_end_a_trend_gets_no_verdict() {
        let mut e = one_pair([(0.5, 0.1), (1.0, 0.7)]);
        for p in &mut e.pairs {
            p.disattenuated_interval = None;
        }
        let [t] = &class_trends(&e)[..] else {
            panic!("one class")
        };
        assert_eq!(
            (t.half_width, t.rising, t.oriented_rising),
            (None, None, None)
        );
        assert_eq!(
            trend_names(t),
            [
                "trend gpt × gpt: no interval at the end to judge a rise",
                "trend gpt × gpt, oriented: no interval at the end to judge a rise"
            ]
        );
    }

    #[test]
    fn a_trend_compares_the_same_pairs_at_both_points() {
        // gpt-s0 × gpt-s2 has no value at 1/2 (a reliability at or below 0 there): its 0.9 at
        // the end must not lift the class's end above its 1/2.
        let mut pairs = vec![
            between("gpt-s0", "gpt-s1", 0.5, 0.3),
            between("gpt-s0", "gpt-s1", 1.0, 0.3),
            between("gpt-s0", "gpt-s2", 1.0, 0.9),
        ];
        pairs.push(EmergencePair {
            disattenuated: None,
            disattenuated_interval: None,
            ..between("gpt-s0", "gpt-s2", 0.5, 0.0)
        });
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs,
        };
        let [t] = &class_trends(&e)[..] else {
            panic!("one class")
        };
        assert!((t.before.1 - 0.3).abs() < 1e-12 && (t.end.1 - 0.3).abs() < 1e-12);
        assert_eq!(t.rising, Some(false));
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

    /// One `gpt × gpt` pair at two (fraction, disattenuated r) points, intervals ± 0.05.
    fn one_pair(points: [(f64, f64); 2]) -> Emergence {
        Emergence {
            kind: None,
            points: Vec::new(),
            pairs: points
                .iter()
                .map(|&(f, d)| pair("gpt × gpt", f, d, 0.05))
                .collect(),
        }
    }

    /// The first cell (the row's name) of each trend row.
    fn trend_names(t: &ClassTrend) -> Vec<String> {
        trend_rows(t)
            .into_iter()
            .map(|r| match &r[0] {
                report::Cell::Text(s) => s.clone(),
                other => panic!("a trend row is named by text, not {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_negative_mean_moving_toward_zero_is_not_called_rising_agreement() {
        let [t] = &class_trends(&one_pair([(0.5, -0.3), (1.0, -0.1)]))[..] else {
            panic!("one class")
        };
        assert_eq!(t.rising, Some(true));
        // Oriented, the one pair reads 0.3 then 0.1: its division weakened.
        assert_eq!(t.oriented_rising, Some(false));
        assert_eq!(
            trend_names(t),
            [
                "trend gpt × gpt: rising toward 0 (still at or below it)",
                "trend gpt × gpt, oriented: not rising beyond its interval"
            ]
        );
        let [t] = &class_trends(&one_pair([(0.5, 0.5), (1.0, 0.7)]))[..] else {
            panic!("one class")
        };
        assert_eq!(
            trend_names(t),
            [
                "trend gpt × gpt: still rising",
                "trend gpt × gpt, oriented: still rising"
            ]
        );
    }

    #[test]
    fn oriented_trends_do_not_let_runs_on_opposite_sides_cancel() {
        // gpt-s0's towers took the other side: its pairs are negative, the third positive.
        let mut pairs = Vec::new();
        for (f, r) in [(0.5, 0.3), (1.0, 0.5)] {
            pairs.push(between("gpt-s0", "gpt-s1", f, -r));
            pairs.push(between("gpt-s0", "gpt-s2", f, -r));
            pairs.push(between("gpt-s1", "gpt-s2", f, r));
        }
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs,
        };
        let [t] = &class_trends(&e)[..] else {
            panic!("one class")
        };
        // Signed means cancel: -0.1 then -1/6, not rising.
        assert!((t.before.1 + 0.1).abs() < 1e-12 && (t.end.1 + 0.5 / 3.0).abs() < 1e-12);
        assert_eq!(t.rising, Some(false));
        let (b, end) = t.oriented.unwrap();
        assert!(
            (b - 0.3).abs() < 1e-12 && (end - 0.5).abs() < 1e-12,
            "{b} {end}"
        );
        assert_eq!(t.oriented_rising, Some(true));
        let rows = trend_rows(t);
        assert_eq!(rows.len(), 2);
        // The last two points need not include the end: each is oriented on its own.
        let [t] = &class_trends(&one_pair([(0.25, 0.3), (0.5, 0.4)]))[..] else {
            panic!("one class")
        };
        let (b, end) = t.oriented.unwrap();
        assert!((b - 0.3).abs() < 1e-12 && (end - 0.4).abs() < 1e-12);
        assert_eq!(trend_rows(t).len(), 2);
    }

    #[test]
    fn a_late_swap_of_sides_is_not_read_as_rising_agreement() {
        // gpt-s1 agrees with both others at 1/2 (0.3); by the end its towers have traded
        // sides (-0.35), while gpt-s0 × gpt-s2 holds at 0.3. The division is as strong at both
        // points, so the oriented trend must not rise. Signs fitted at the end alone would
        // give 1/2 a mean of (-0.3 - 0.3 + 0.3) / 3 = -0.1 and call the class rising.
        let mut pairs = Vec::new();
        for (f, s1) in [(0.5, 1.0), (1.0, -1.0)] {
            pairs.push(between("gpt-s0", "gpt-s1", f, 0.3 * s1));
            pairs.push(between("gpt-s0", "gpt-s2", f, 0.3));
            pairs.push(between("gpt-s1", "gpt-s2", f, 0.3 * s1));
        }
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs,
        };
        let [t] = &class_trends(&e)[..] else {
            panic!("one class")
        };
        let (b, end) = t.oriented.unwrap();
        assert!(
            (b - 0.3).abs() < 1e-12 && (end - 0.3).abs() < 1e-12,
            "{b} {end}"
        );
        assert_eq!(t.oriented_rising, Some(false));
        // The end's signs applied to 1/2 give the biased reading this guards against.
        let o = orientations(&e);
        let (labels, signs) = signs_at(&o, 1.0).unwrap();
        let half: Vec<(String, String, f64)> = e
            .pairs
            .iter()
            .filter(|p| p.fraction == 0.5)
            .map(|p| (p.a.clone(), p.b.clone(), p.disattenuated.unwrap()))
            .collect();
        let biased = apply_signs(labels, signs, "gpt × gpt", &half).unwrap();
        assert!((biased.mean_oriented_r + 0.1).abs() < 1e-12);
        // The oriented figure reads as the trend rows: every pair at 0.3 at both points (the
        // disattenuated group; each point in its own orientation).
        let panels = class_panels(&e, &[0.5, 1.0], Some(&o));
        let ys: Vec<f64> = panels[0].groups[0].points.iter().map(|p| p.y).collect();
        assert_eq!(ys.len(), 6);
        assert!(ys.iter().all(|y| (y - 0.3).abs() < 1e-12), "{ys:?}");
    }

    #[test]
    fn each_class_gets_a_panel_with_raw_and_disattenuated_r_in_one_colour() {
        let mut no_rel = pair("gpt × bert", 1.0, 0.4, 0.05);
        (no_rel.disattenuated, no_rel.disattenuated_interval) = (None, None);
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs: vec![
                no_rel,
                pair("gpt × gpt", 0.5, 0.5, 0.05),
                pair("gpt × gpt", 1.0, 0.7, 0.05),
                pair("bert × bert", 1.0, 0.2, 0.05),
            ],
        };
        let panels = class_panels(&e, &[0.5, 1.0], None);
        // Same-model classes first (first seen), then the cross-model one.
        let titles: Vec<&str> = panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "gpt × gpt (1 pair)",
                "bert × bert (1 pair)",
                "gpt × bert (1 pair)"
            ]
        );
        let shape = |p: &IntervalPanel| -> Vec<(String, Option<usize>, bool, usize)> {
            p.groups
                .iter()
                .map(|g| (g.name.clone(), g.colour, g.hollow, g.points.len()))
                .collect()
        };
        assert_eq!(
            shape(&panels[0]),
            [
                (DISATTENUATED.to_string(), Some(0), false, 2),
                (RAW.to_string(), Some(0), true, 2),
            ]
        );
        assert_eq!(shape(&panels[2]), [(RAW.to_string(), Some(2), true, 1)]);
        let g = &panels[0].groups;
        assert_eq!((g[0].points[1].at, g[0].points[1].y), (1, 0.7));
        assert!((g[1].points[1].y - 0.63).abs() < 1e-12);
    }

    #[test]
    fn oriented_groups_flip_the_pairs_of_runs_on_opposite_sides() {
        let e = Emergence {
            kind: None,
            points: Vec::new(),
            pairs: vec![
                between("gpt-s0", "gpt-s1", 1.0, -0.4),
                between("gpt-s1", "gpt-s2", 1.0, 0.6),
            ],
        };
        let o = orientations(&e);
        let signed = &class_panels(&e, &[1.0], None)[0].groups;
        let oriented = &class_panels(&e, &[1.0], Some(&o))[0].groups;
        // Disattenuated group: gpt-s0 × gpt-s1 turns positive with its interval mirrored;
        // gpt-s1 × gpt-s2 (same side) is unchanged.
        let (s0, o0) = (&signed[0].points, &oriented[0].points);
        assert_eq!((s0[0].y, o0[0].y), (-0.4, 0.4));
        let (lo, hi) = o0[0].interval.unwrap();
        assert!(
            (lo - 0.35).abs() < 1e-12 && (hi - 0.45).abs() < 1e-12,
            "{lo} {hi}"
        );
        assert_eq!((s0[1].y, o0[1].y), (0.6, 0.6));
        // Raw r (0.9 of the disattenuated in `pair`) turns the same way.
        assert!((oriented[1].points[0].y - 0.36).abs() < 1e-12);
        let dir = tempfile::tempdir().unwrap();
        let files = write_emergence(&e, dir.path()).unwrap();
        assert!(files.contains(&dir.path().join("fig_emergence_oriented.png")));
    }

    #[test]
    fn heads_figure_gives_each_run_one_colour_in_three_panels() {
        let point = |label: &str, fraction: f64, share: f64, gap: [f64; 2], rel: Option<f64>| {
            EmergencePoint {
                with_end: Some(if fraction == 1.0 { 1.0 } else { share - 0.1 }),
                label: label.into(),
                model: "gpt".into(),
                fraction,
                tokens: 0,
                heads: crate::record::HeadQuality {
                    nll: vec![5.0, 5.0],
                    joint_nll: 4.9,
                    gap: gap.to_vec(),
                    unigram_nll: 7.0,
                    above_unigram: false,
                    steps: 977,
                    stopped_early: false,
                    machine: None,
                },
                share_primary: share,
                head_seed: rel,
                split_half: 0.7,
                primary_tower: Some(0),
                flagged: false,
            }
        };
        let e = Emergence {
            kind: None,
            points: vec![
                point("gpt-s0", 0.5, 0.55, [0.1, 0.3], Some(0.8)),
                point("gpt-s0", 1.0, 0.6, [0.2, 0.4], Some(0.9)),
                point("gpt-s1", 0.5, 0.45, [0.0, 0.1], None),
                point("gpt-s1", 1.0, 0.4, [0.1, 0.2], Some(0.85)),
            ],
            pairs: Vec::new(),
        };
        // Which machine trained which point's heads, grouped by machine in order of appearance.
        let mut mixed = e.clone();
        for (p, m) in mixed
            .points
            .iter_mut()
            .zip([Some("cpu"), Some("cpu"), Some("gpu"), None])
        {
            p.heads.machine = m.map(String::from);
        }
        assert_eq!(
            machines_note(&mixed),
            "heads trained on cpu: gpt-s0 at 1/2, the end; on gpu: gpt-s1 at 1/2; on a machine \
             not recorded: gpt-s1 at the end"
        );
        let panels = heads_panels(&e);
        let titles: Vec<&str> = panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "share won by the primary tower",
                "mean head gap (nats)",
                "head-seed reliability",
                "r with the run's own end"
            ]
        );
        let ys = |panel: usize, run: usize| -> Vec<(usize, f64)> {
            let g = &panels[panel].groups[run];
            g.points.iter().map(|p| (p.at, p.y)).collect()
        };
        for panel in &panels {
            let colours: Vec<_> = panel
                .groups
                .iter()
                .map(|g| (g.name.as_str(), g.colour))
                .collect();
            assert_eq!(colours, [("gpt-s0", Some(0)), ("gpt-s1", Some(1))]);
        }
        assert_eq!(ys(0, 1), [(0, 0.45), (1, 0.4)]);
        let gap = ys(1, 0);
        assert!((gap[0].1 - 0.2).abs() < 1e-12 && (gap[1].1 - 0.3).abs() < 1e-12);
        // gpt-s1 has no reliability at 1/2: that point is left out, not drawn at zero.
        assert_eq!(ys(2, 1), [(1, 0.85)]);
        let to_end = ys(3, 0);
        assert!((to_end[0].1 - 0.45).abs() < 1e-12 && to_end[1] == (1, 1.0));
        let dir = tempfile::tempdir().unwrap();
        let files = write_emergence(&e, dir.path()).unwrap();
        assert!(files.contains(&dir.path().join("fig_emergence_heads.png")));
        let none = Emergence {
            kind: None,
            points: Vec::new(),
            pairs: Vec::new(),
        };
        assert!(heads_figure(&none, dir.path()).unwrap().is_none());
    }

    #[test]
    fn fractions_are_named_as_the_paper_would() {
        let names: Vec<String> = [0.125, 0.25, 0.5, 1.0, 0.3].map(fraction_name).to_vec();
        assert_eq!(names, ["1/8", "1/4", "1/2", "1", "0.300"]);
    }
}
