//! The emergence table and figures.

use std::path::{Path, PathBuf};

use prefscore::{Interval, ScoreKind};
use report::{IntervalGroup, IntervalPanel, IntervalPoint, PlotOptions};

use super::trends::{class_trends, orientations, signs_at, ClassTrend, Orientations};
use super::{sorted_fractions, Emergence, EmergencePair, EmergencePoint};
use crate::error::Result;
use crate::orientation::label_sign;

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
pub(super) fn class_panels(
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
pub(crate) fn fraction_name(f: f64) -> String {
    match (1..=64).find(|d| ((1.0 / f) - *d as f64).abs() < 1e-9) {
        Some(1) => "1".into(),
        Some(d) => format!("1/{d}"),
        None => format!("{f:.3}"),
    }
}

/// The emergence table: a row per run at each point, per pair at each point, and per class's
/// trend; `provenance` (which machines trained the heads, or which studies the pairs come
/// from) opens its note.
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
        .with_note(format!("scores: {}; value: share won by the primary tower (runs) or raw Pearson r (pairs); disattenuated by the head-seed reliabilities (both shown as a / b for pairs), bootstrap {level} intervals over tokens; r with its end: Pearson of a run's scores at that point with its own scores at the end, both in the end's tower order (negative: its towers traded sides later); primary tower: the tower (1 or 2) of higher mean target probability at that point (eq. 3), whose scores the value and the pairs' r put first, so a change of primary tower flips the sign of the run's pairs but not its r with its end; head gap: head NLL minus joint NLL (nats); trend rows: mean disattenuated r of a class at the last two points, rising when the gain exceeds the mean half-width of the end's intervals; oriented: each pair's r times its runs' signs in the orientation of that point's raw r (controls_orientation's rule), so pairs whose towers took opposite sides do not cancel and a late swap of sides does not read as a rise; one sign per run for all of that point's pairs together, so a pair stays negative where its runs' other pairs outweigh it (three runs that cannot all agree)", kind_name(e.kind)))
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
pub(super) fn trend_rows(c: &ClassTrend) -> Vec<Vec<report::Cell>> {
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
    use crate::emergence::tests::{between, of_pairs, pair};

    #[test]
    fn each_class_gets_a_panel_with_raw_and_disattenuated_r_in_one_colour() {
        let mut no_rel = pair("gpt × bert", 1.0, 0.4, 0.05);
        (no_rel.disattenuated, no_rel.disattenuated_interval) = (None, None);
        let e = of_pairs(vec![
            no_rel,
            pair("gpt × gpt", 0.5, 0.5, 0.05),
            pair("gpt × gpt", 1.0, 0.7, 0.05),
            pair("bert × bert", 1.0, 0.2, 0.05),
        ]);
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
        let e = of_pairs(vec![
            between("gpt-s0", "gpt-s1", 1.0, -0.4),
            between("gpt-s1", "gpt-s2", 1.0, 0.6),
        ]);
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
                heads: crate::manifest::HeadQuality {
                    nll: vec![5.0, 5.0],
                    joint_nll: 4.9,
                    gap: gap.to_vec(),
                    unigram_nll: 7.0,
                    above_unigram: false,
                    steps: 977,
                    stopped_early: false,
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
        let none = of_pairs(Vec::new());
        assert!(heads_figure(&none, dir.path()).unwrap().is_none());
    }

    #[test]
    fn fractions_are_named_as_the_paper_would() {
        let names: Vec<String> = [0.125, 0.25, 0.5, 1.0, 0.3].map(fraction_name).to_vec();
        assert_eq!(names, ["1/8", "1/4", "1/2", "1", "0.300"]);
    }
}
