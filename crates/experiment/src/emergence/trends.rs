//! Whether agreement is still rising: each class of pairs over its last two points, signed
//! and up to orientation.

use serde::{Deserialize, Serialize};

use super::{sorted_fractions, Emergence, EmergencePair};
use crate::orientation::{apply_signs, labelled_orientation};

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
pub(super) type Signs = (Vec<String>, Vec<i8>);

/// Each point of phase 1 with the orientation of its pairs ([`orientation_at`]), in order.
pub(super) type Orientations = Vec<(f64, Option<Signs>)>;

/// One orientation search per point of phase 1, shared by every class of pairs.
pub(super) fn orientations(e: &Emergence) -> Orientations {
    sorted_fractions(e.pairs.iter().map(|p| p.fraction))
        .into_iter()
        .map(|f| (f, orientation_at(e, f)))
        .collect()
}

/// The signs of the point at `fraction`, where one was found.
pub(super) fn signs_at(o: &Orientations, fraction: f64) -> Option<&Signs> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emergence::tests::{between, of_pairs, one_pair, pair};
    use crate::emergence::write::{class_panels, trend_rows};

    #[test]
    fn trends_compare_the_last_two_points_with_the_end_intervals() {
        let e = of_pairs(vec![
            pair("gpt × gpt", 0.5, 0.5, 0.05),
            pair("gpt × gpt", 1.0, 0.7, 0.05),
            pair("gpt × bert", 0.5, 0.5, 0.05),
            pair("gpt × bert", 1.0, 0.52, 0.05),
            pair("bert × bert", 1.0, 0.3, 0.05),
        ]);
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
        let t = &only_trend(&e);
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
        let e = of_pairs(pairs);
        let t = &only_trend(&e);
        assert!((t.before.1 - 0.3).abs() < 1e-12 && (t.end.1 - 0.3).abs() < 1e-12);
        assert_eq!(t.rising, Some(false));
    }

    /// The trend of a curve with one class of pairs.
    fn only_trend(e: &Emergence) -> ClassTrend {
        let [t] = &class_trends(e)[..] else {
            panic!("one class")
        };
        t.clone()
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
        let t = &only_trend(&one_pair([(0.5, -0.3), (1.0, -0.1)]));
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
        let t = &only_trend(&one_pair([(0.5, 0.5), (1.0, 0.7)]));
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
        let e = of_pairs(pairs);
        let t = &only_trend(&e);
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
        let t = &only_trend(&one_pair([(0.25, 0.3), (0.5, 0.4)]));
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
        let e = of_pairs(pairs);
        let t = &only_trend(&e);
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
}
