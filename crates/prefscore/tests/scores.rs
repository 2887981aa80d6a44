//! TokenStats and scores against hand-computed values; tower swaps; bad input.

use prefscore::{PrefscoreError, ScoreKind, TokenStats};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn ln(x: f64) -> f32 {
    x.ln() as f32
}

/// Targets [0, 0, 1] in a vocabulary of 3; tower 0 gives p = .5, .25, .8, tower 1 p = .1, .4, .2.
fn hand_stats(swap: bool) -> TokenStats {
    let targets = [0u32, 0, 1];
    let t0 = [ln(0.5), ln(0.25), ln(0.8)];
    let t1 = [ln(0.1), ln(0.4), ln(0.2)];
    let mut st = TokenStats::new(3, 2).unwrap();
    let towers: [&[f32]; 2] = if swap { [&t1, &t0] } else { [&t0, &t1] };
    st.add(&targets, &towers).unwrap();
    st
}

fn close(a: f64, b: f64, tol: f64) {
    assert!((a - b).abs() <= tol, "{a} vs {b}");
}

#[test]
fn sufficient_statistics_match_hand_values() {
    let st = hand_stats(false);
    assert_eq!(st.counts(), &[2, 1, 0]);
    assert_eq!(st.total_positions(), 3);
    assert_eq!(st.unseen_tokens(), vec![2]);
    close(st.sum_p(0, 0), 0.75, 1e-6);
    close(st.sum_p(1, 0), 0.5, 1e-6);
    close(st.sum_log_p(0, 0), 0.125f64.ln(), 1e-6);
    close(st.log_mean_p(0, 0).unwrap(), 0.375f64.ln(), 1e-6);
    close(st.mean_log_p(1, 0).unwrap(), 0.04f64.ln() / 2.0, 1e-6);
    assert_eq!(st.log_mean_p(0, 2), None);
    assert_eq!(st.mean_log_p(1, 2), None);
    // Eq. 3: mean p over all positions, (.5+.25+.8)/3 vs (.1+.4+.2)/3.
    close(st.tower_mean_p(0).unwrap(), 1.55 / 3.0, 1e-6);
    close(st.tower_mean_p(1).unwrap(), 0.7 / 3.0, 1e-6);
    assert_eq!(st.primary_order(), vec![0, 1]);
}

#[test]
fn scores_match_eq4_and_released_code() {
    let st = hand_stats(false);
    let a = st.scores(ScoreKind::ArithmeticMean).unwrap();
    assert_eq!(a.towers, vec![0, 1]);
    close(a.get(0).unwrap(), 1.5f64.ln(), 1e-6); // ln(.375 / .25)
    close(a.get(1).unwrap(), 4f64.ln(), 1e-6); // ln(.8 / .2)
    assert_eq!(a.get(2), None);
    assert_eq!(a.unseen(), vec![2]);
    assert_eq!(a.n_scored(), 2);
    let g = st.scores(ScoreKind::GeometricMean).unwrap();
    close(g.get(0).unwrap(), 0.5 * 3.125f64.ln(), 1e-6); // ½ ln(.125 / .04)
    close(g.get(1).unwrap(), 4f64.ln(), 1e-6);
    assert!(a.values.iter().flatten().all(|v| v.is_finite()));
}

#[test]
fn swapped_towers_negate_raw_scores_and_leave_ordered_scores_unchanged() {
    // Hand case and a random case with many tokens.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let n = 2000;
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..50)).collect();
    let t0: Vec<f32> = (0..n).map(|_| -rng.random_range(0.01f32..6.0)).collect();
    let t1: Vec<f32> = (0..n).map(|_| -rng.random_range(0.01f32..5.0)).collect();
    let mut orig = TokenStats::new(60, 2).unwrap();
    orig.add(&targets, &[&t0, &t1]).unwrap();
    let mut swapped = TokenStats::new(60, 2).unwrap();
    swapped.add(&targets, &[&t1, &t0]).unwrap();
    assert_eq!(
        orig.primary_order(),
        vec![1, 0],
        "tower 1 has the higher mean p"
    );
    for (o, s) in [(orig, swapped), (hand_stats(false), hand_stats(true))] {
        for kind in [ScoreKind::ArithmeticMean, ScoreKind::GeometricMean] {
            let ro = o.raw_scores(kind, 0, 1).unwrap();
            let rs = s.raw_scores(kind, 0, 1).unwrap();
            assert_eq!(rs.values.len(), ro.values.len());
            for (x, y) in ro.values.iter().zip(&rs.values) {
                match (x, y) {
                    (Some(x), Some(y)) => close(*x, -*y, 1e-12),
                    (None, None) => {}
                    _ => panic!("seen/unseen differ"),
                }
            }
            assert_eq!(rs.values, ro.negated().values);
            let so = o.scores(kind).unwrap();
            let ss = s.scores(kind).unwrap();
            assert_eq!(
                so.values, ss.values,
                "ordered scores must not depend on tower order"
            );
            // The same physical tower is primary: its index flips with the swap.
            assert_eq!(ss.towers, vec![1 - so.towers[0], 1 - so.towers[1]]);
        }
    }
}

#[test]
fn merge_equals_one_pass() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let n = 1000;
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..20)).collect();
    let lp: Vec<Vec<f32>> = (0..3)
        .map(|_| (0..n).map(|_| -rng.random_range(0.0f32..30.0)).collect())
        .collect();
    let all: Vec<&[f32]> = lp.iter().map(|v| v.as_slice()).collect();
    let mut one = TokenStats::new(20, 3).unwrap();
    one.add(&targets, &all).unwrap();
    let mut a = TokenStats::new(20, 3).unwrap();
    let mut b = TokenStats::new(20, 3).unwrap();
    let cut = 377;
    let first: Vec<&[f32]> = lp.iter().map(|v| &v[..cut]).collect();
    let second: Vec<&[f32]> = lp.iter().map(|v| &v[cut..]).collect();
    a.add(&targets[..cut], &first).unwrap();
    b.add(&targets[cut..], &second).unwrap();
    a.merge(&b).unwrap();
    assert_eq!(a.counts(), one.counts());
    for k in 0..3 {
        for t in 0..20 {
            close(
                a.log_mean_p(k, t).unwrap(),
                one.log_mean_p(k, t).unwrap(),
                1e-10,
            );
            close(
                a.mean_log_p(k, t).unwrap(),
                one.mean_log_p(k, t).unwrap(),
                1e-10,
            );
        }
    }
    let mut empty = TokenStats::new(20, 3).unwrap();
    empty.merge(&one).unwrap();
    assert_eq!(empty, one, "merging into empty statistics copies them");
    let wrong = TokenStats::new(21, 3).unwrap();
    assert!(matches!(
        a.merge(&wrong),
        Err(PrefscoreError::InvalidArgument(_))
    ));
}

#[test]
fn very_small_probabilities_do_not_underflow() {
    // p = e^-800 underflows f64, but log p̄ is exact in the shifted form.
    let mut st = TokenStats::new(1, 2).unwrap();
    st.add(&[0, 0], &[&[-800.0, -800.0], &[-801.0, -799.0]])
        .unwrap();
    close(st.log_mean_p(0, 0).unwrap(), -800.0, 1e-9);
    let expected = -800.0 + ((-1.0f64).exp() + 1f64.exp()).ln() - 2f64.ln();
    close(st.log_mean_p(1, 0).unwrap(), expected, 1e-9);
    let s = st.raw_scores(ScoreKind::ArithmeticMean, 0, 1).unwrap();
    close(s.get(0).unwrap(), -800.0 - expected, 1e-9);
    close(
        st.raw_scores(ScoreKind::GeometricMean, 0, 1)
            .unwrap()
            .get(0)
            .unwrap(),
        0.0,
        1e-12,
    );
}

#[test]
fn more_than_two_towers_score_each_against_the_rest() {
    // One position per token; token 0: p = .5, .2, .1; token 1: p = .1, .3, .6.
    let mut st = TokenStats::new(2, 3).unwrap();
    st.add(
        &[0, 1],
        &[
            &[ln(0.5), ln(0.1)],
            &[ln(0.2), ln(0.3)],
            &[ln(0.1), ln(0.6)],
        ],
    )
    .unwrap();
    // Mean p over positions: .3, .25, .35 -> order 2, 0, 1.
    assert_eq!(st.primary_order(), vec![2, 0, 1]);
    let a = st.scores_vs_rest(ScoreKind::ArithmeticMean).unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(a[0].towers, vec![2, 0, 1]);
    assert_eq!(a[1].towers, vec![0, 1, 2]);
    close(a[1].get(0).unwrap(), (0.5f64 / 0.15).ln(), 1e-6);
    close(a[0].get(1).unwrap(), (0.6f64 / 0.2).ln(), 1e-6);
    let g = st.scores_vs_rest(ScoreKind::GeometricMean).unwrap();
    close(
        g[1].get(0).unwrap(),
        0.5f64.ln() - (0.2f64.ln() + 0.1f64.ln()) / 2.0,
        1e-6,
    );
    assert!(matches!(
        st.scores(ScoreKind::ArithmeticMean),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    // K = 2: the tower against the rest is eq. 4.
    let two = hand_stats(false);
    for kind in [ScoreKind::ArithmeticMean, ScoreKind::GeometricMean] {
        let vr = two.scores_vs_rest(kind).unwrap();
        assert_eq!(vr[0].values, two.scores(kind).unwrap().values);
        assert_eq!(vr[1].values, two.scores(kind).unwrap().negated().values);
    }
    // Permuting towers permutes nothing in the ordered result.
    let perm = st.reorder_towers(&[1, 2, 0]).unwrap();
    let b = perm.scores_vs_rest(ScoreKind::ArithmeticMean).unwrap();
    for (x, y) in a.iter().zip(&b) {
        for (u, v) in x.values.iter().zip(&y.values) {
            close(u.unwrap(), v.unwrap(), 1e-12);
        }
    }
    assert!(st.reorder_towers(&[0, 0, 1]).is_err());
    assert!(st.reorder_towers(&[0, 1]).is_err());
}

#[test]
fn bad_input_is_refused_without_partial_updates() {
    let mut st = TokenStats::new(3, 2).unwrap();
    let bad = |r: prefscore::Result<()>| assert!(r.is_err(), "{r:?}");
    bad(st.add(&[0, 1], &[&[-1.0, -1.0]])); // one tower missing
    bad(st.add(&[0, 1], &[&[-1.0, -1.0], &[-1.0]])); // length mismatch
    bad(st.add(&[0, 3], &[&[-1.0, -1.0], &[-1.0, -1.0]])); // token out of range
    assert!(matches!(
        st.add(&[0, 1], &[&[-1.0, f32::NAN], &[-1.0, -1.0]]),
        Err(PrefscoreError::BadValue { .. })
    ));
    bad(st.add(&[0], &[&[f32::NEG_INFINITY], &[-1.0]]));
    bad(st.add(&[0], &[&[0.5], &[-1.0]])); // not a log-probability
    assert_eq!(
        st.total_positions(),
        0,
        "a refused batch must leave no trace"
    );
    // A rounding-level positive log-prob is accepted as 0.
    st.add(&[0], &[&[1e-6], &[-1.0]]).unwrap();
    close(st.log_mean_p(0, 0).unwrap(), 0.0, 1e-12);
    assert!(TokenStats::new(0, 2).is_err());
    assert!(TokenStats::new(3, 0).is_err());
    assert!(st.raw_scores(ScoreKind::ArithmeticMean, 0, 0).is_err());
    assert!(st.raw_scores(ScoreKind::ArithmeticMean, 0, 2).is_err());
}

#[test]
fn stats_serialise_round_trip() {
    let st = hand_stats(false);
    let json = serde_json::to_string(&st).unwrap();
    let back: TokenStats = serde_json::from_str(&json).unwrap();
    assert_eq!(back.counts(), st.counts());
    assert_eq!(back, st);
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["count"] = serde_json::json!([1]);
    assert!(serde_json::from_value::<TokenStats>(v).is_err());
    // Sizes whose product overflows are refused, not wrapped into a small consistent size.
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["vocab_size"] = serde_json::json!(u64::MAX);
    v["n_towers"] = serde_json::json!(2);
    let e = serde_json::from_value::<TokenStats>(v).unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
}
