//! Controls (pseudo-tower splits, the split null) and the POS / word-group summaries.

use prefscore::{
    by_tag, correlate, group_summary, own_positions, random_partition, split_null, split_positions,
    Bootstrap, CorrOptions, Method, ScoreKind, SplitNull, TokenStats,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn close(a: f64, b: f64, tol: f64) {
    assert!((a - b).abs() <= tol, "{a} vs {b}");
}

#[test]
fn random_partition_is_a_seeded_half_split() {
    let [a, b] = random_partition(11, 3);
    assert_eq!((a.len(), b.len()), (6, 5));
    let mut all: Vec<usize> = a.iter().chain(&b).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..11).collect::<Vec<_>>());
    assert!(a.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(random_partition(11, 3), [a.clone(), b]);
    assert_ne!(random_partition(11, 4)[0], a);
    assert_eq!(random_partition(0, 1), [vec![], vec![]]);
}

/// Corpus with a planted preference: tokens < 20 are predicted better by tower "A", the others
/// by tower "B"; per-position noise from `seed`. Returns targets and the two towers' log p.
fn planted(seed: u64, n: usize, vocab: u32) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut targets = Vec::with_capacity(n);
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        // Zipf-like frequencies: small ids are frequent.
        let t = ((rng.random::<f64>().powi(2)) * vocab as f64) as u32;
        let base = -1.0 - 2.0 * rng.random::<f32>();
        let (pa, pb) = if t < 20 { (0.0, -1.0) } else { (-1.0, 0.0) };
        targets.push(t);
        a.push(base + pa + 0.3 * rng.random::<f32>());
        b.push(base + pb + 0.3 * rng.random::<f32>());
    }
    (targets, a, b)
}

#[test]
fn planted_preference_is_stable_across_seeds_and_above_the_split_null() {
    let vocab = 40;
    let scores_of = |seed| {
        let (t, a, b) = planted(seed, 4000, vocab);
        let mut st = TokenStats::new(vocab as usize, 2).unwrap();
        st.add(&t, &[&a, &b]).unwrap();
        (
            st.counts().to_vec(),
            st.scores(ScoreKind::ArithmeticMean).unwrap().values,
        )
    };
    let (freq, s1) = scores_of(1);
    let (_, s2) = scores_of(2);
    let opts = CorrOptions {
        bootstrap: Bootstrap {
            resamples: 200,
            ..Default::default()
        },
        permutations: 200,
    };
    // Pearson: the planted structure is two classes, within which ranks are noise.
    let c = correlate(&s1, &s2, &freq, 30, Method::Pearson, &opts).unwrap();
    assert!(c.r > 0.9, "{c:?}");
    assert!(c.p_value.unwrap() < 0.01);
    // The null from splitting one tower's positions: centred near 0, far below c.r.
    let (t, a, _) = planted(1, 4000, vocab);
    let null = split_null(
        &t,
        &a,
        vocab as usize,
        &freq,
        &SplitNull {
            top_n: 30,
            kind: ScoreKind::ArithmeticMean,
            method: Method::Pearson,
            replicates: 40,
            seed: 9,
        },
    )
    .unwrap();
    assert_eq!(null.correlations.len(), 40);
    assert!(null.mean.abs() < 0.15, "{null:?}");
    assert!(null.q975 < c.r);
    assert!(null.q025 < null.mean && null.mean < null.q975);
    close(null.p_value(c.r), 1.0 / 41.0, 1e-12);
    assert_eq!(null.p_value(-2.0), 1.0);
    let again = split_null(
        &t,
        &a,
        vocab as usize,
        &freq,
        &SplitNull {
            top_n: 30,
            kind: ScoreKind::ArithmeticMean,
            method: Method::Pearson,
            replicates: 40,
            seed: 9,
        },
    )
    .unwrap();
    assert_eq!(again, null);
}

#[test]
fn split_positions_counts_every_position_once() {
    let (t, a, _) = planted(3, 500, 40);
    let st = split_positions(&t, &a, 40, 5).unwrap();
    assert_eq!(st.total_positions(), 500);
    let mut by_token = vec![0u64; 40];
    for &x in &t {
        by_token[x as usize] += 1;
    }
    assert_eq!(st.counts(), by_token.as_slice());
    // Each token's pseudo-tower means average disjoint halves; a token seen once has no score.
    let s = st.scores(ScoreKind::GeometricMean).unwrap();
    for (tok, v) in s.values.iter().enumerate() {
        if by_token[tok] < 2 {
            assert_eq!(*v, None);
        }
        if let Some(v) = v {
            assert!(v.is_finite());
        }
    }
    assert_eq!(split_positions(&t, &a, 40, 5).unwrap(), st);
    assert!(split_positions(&t, &a[..10], 40, 5).is_err());
    assert!(split_positions(&t, &a, 10, 5).is_err());
}

#[test]
fn by_tag_matches_hand_values() {
    let scores = [Some(1.0), Some(-1.0), Some(2.0), Some(5.0), None, Some(3.0)];
    let tags = [
        Some("NOUN"),
        Some("NOUN"),
        Some("VERB"),
        None,
        Some("VERB"),
        Some("NOUN"),
    ];
    let tokens: Vec<u32> = (0..6).collect();
    let boot = Bootstrap {
        resamples: 500,
        level: 0.95,
        seed: 1,
    };
    let s = by_tag(&scores, &tags, &tokens, &boot).unwrap();
    assert_eq!(s.len(), 2);
    let noun = &s[0];
    assert_eq!((noun.tag.as_str(), noun.n), ("NOUN", 3));
    close(noun.mean, 1.0, 1e-12);
    close(noun.sd, 2.0, 1e-12);
    close(noun.share_primary, 2.0 / 3.0, 1e-12);
    // Sorted [-1, 1, 3]: q10 = -0.6, q25 = 0, q50 = 1, q75 = 2, q90 = 2.6.
    for (q, e) in noun.quantiles.iter().zip([-0.6, 0.0, 1.0, 2.0, 2.6]) {
        close(*q, e, 1e-12);
    }
    assert_eq!(noun.tokens, vec![0, 1, 5]);
    let iv = noun.interval.unwrap();
    assert!(iv.lo >= -1.0 && iv.hi <= 3.0 && iv.lo < 1.0 && 1.0 < iv.hi);
    let verb = &s[1];
    assert_eq!(
        (verb.tag.as_str(), verb.n, verb.mean, verb.share_primary),
        ("VERB", 1, 2.0, 1.0)
    );
    // Deterministic; a subset of tokens restricts the summary.
    assert_eq!(by_tag(&scores, &tags, &tokens, &boot).unwrap(), s);
    let sub = by_tag(&scores, &tags, &[0, 2], &boot).unwrap();
    assert_eq!(sub.iter().map(|t| t.n).sum::<usize>(), 2);
    let no_boot = Bootstrap {
        resamples: 0,
        ..boot
    };
    assert_eq!(
        by_tag(&scores, &tags, &tokens, &no_boot).unwrap()[0].interval,
        None
    );
    assert!(by_tag(&scores, &tags[..5], &tokens, &boot).is_err());
    assert!(by_tag(&scores, &tags, &[9], &boot).is_err());
    // A token listed twice would count twice in NOUN's n and mean.
    let twice = by_tag(&scores, &tags, &[0, 1, 0], &boot).unwrap_err();
    assert!(
        twice.to_string().contains("token 0 is listed twice"),
        "{twice}"
    );
    let owned: Vec<Option<String>> = tags.iter().map(|t| t.map(String::from)).collect();
    assert_eq!(by_tag(&scores, &owned, &tokens, &boot).unwrap(), s);
}

#[test]
fn group_summary_matches_hand_values() {
    // Reference tokens 0..5 with scores 3, 1, 2, -1, 0 -> descending ranks 1, 3, 2, 5, 4.
    let scores = [Some(3.0), Some(1.0), Some(2.0), Some(-1.0), Some(0.0), None];
    let reference: Vec<u32> = (0..6).collect();
    let groups = vec![
        ("A".to_string(), vec![0, 2]),
        ("B".to_string(), vec![3, 5, 9]),
        ("C".to_string(), vec![]),
    ];
    let boot = Bootstrap {
        resamples: 200,
        ..Default::default()
    };
    let g = group_summary(&scores, &groups, &reference, &boot).unwrap();
    assert_eq!(g.len(), 3);
    assert_eq!((g[0].size, g[0].n), (2, 2));
    close(g[0].mean.unwrap(), 2.5, 1e-12);
    close(g[0].mean_rank.unwrap(), 1.5, 1e-12);
    close(g[0].mean_rank_fraction.unwrap(), 0.5 / 4.0, 1e-12);
    close(g[0].share_primary.unwrap(), 1.0, 1e-12);
    assert_eq!((g[1].size, g[1].n), (3, 1));
    close(g[1].mean.unwrap(), -1.0, 1e-12);
    close(g[1].mean_rank.unwrap(), 5.0, 1e-12);
    close(g[1].mean_rank_fraction.unwrap(), 1.0, 1e-12);
    close(g[1].share_primary.unwrap(), 0.0, 1e-12);
    assert_eq!(
        (g[2].n, g[2].mean, g[2].mean_rank, g[2].interval),
        (0, None, None, None)
    );
    // Ties share their average rank.
    let tied = [Some(1.0), Some(1.0), Some(0.0)];
    let t = group_summary(&tied, &[("t".into(), vec![0])], &[0, 1, 2], &boot).unwrap();
    close(t[0].mean_rank.unwrap(), 1.5, 1e-12);
    assert!(group_summary(&[None, None], &groups, &[0, 1], &boot).is_err());
    // Repeated ids would shift the ranks (reference) or weigh a token twice (group).
    let e = group_summary(&scores, &groups, &[0, 1, 2, 1], &boot).unwrap_err();
    assert!(
        e.to_string()
            .contains("token 1 is listed twice in the reference set"),
        "{e}"
    );
    let doubled = vec![("D".to_string(), vec![2, 0, 2])];
    let e = group_summary(&scores, &doubled, &reference, &boot).unwrap_err();
    assert!(
        e.to_string().contains("token 2 is listed twice in group D"),
        "{e}"
    );
}

#[test]
fn own_positions_scores_each_tower_on_its_side_only() {
    // Token 0 at positions 0..4, token 1 at 4..6 (side 0 only), token 2 nowhere.
    let t = [0u32, 0, 0, 0, 1, 1];
    let l0 = [-1.0f32, -3.0, -50.0, -50.0, -2.0, -4.0];
    let l1 = [-50.0f32, -50.0, -0.5, -1.5, -50.0, -50.0];
    let side = [false, false, true, true, false, false];
    let st = own_positions(&t, [&l0, &l1], &side, 3).unwrap();
    assert_eq!(st.counts(), &[4, 2, 0]);
    // The -50s belong to the other side and must never enter a mean.
    close(st.mean_log_p(0, 0).unwrap(), -2.0, 1e-12);
    close(st.mean_log_p(1, 0).unwrap(), -1.0, 1e-12);
    let am = |x: f64, y: f64| ((x.exp() + y.exp()) / 2.0).ln();
    close(st.log_mean_p(0, 0).unwrap(), am(-1.0, -3.0), 1e-12);
    assert_eq!(st.mean_log_p(1, 1), None);
    let g = st.raw_scores(ScoreKind::GeometricMean, 0, 1).unwrap();
    close(g.values[0].unwrap(), -1.0, 1e-12);
    assert_eq!(g.values[1], None);
    // The released rule: a side that never saw the token counts as 0.
    let z = st
        .scores_missing_as_zero(ScoreKind::GeometricMean, 0, 1)
        .unwrap();
    close(z.values[0].unwrap(), -1.0, 1e-12);
    close(z.values[1].unwrap(), -3.0, 1e-12);
    assert_eq!(z.values[2], None);
    let za = st
        .scores_missing_as_zero(ScoreKind::ArithmeticMean, 0, 1)
        .unwrap();
    close(za.values[1].unwrap(), am(-2.0, -4.0), 1e-12);
    // On identical positions the rule changes nothing.
    let mut same = TokenStats::new(3, 2).unwrap();
    same.add(&t, &[&l0, &l1]).unwrap();
    assert_eq!(
        same.scores_missing_as_zero(ScoreKind::ArithmeticMean, 0, 1)
            .unwrap(),
        same.raw_scores(ScoreKind::ArithmeticMean, 0, 1).unwrap()
    );
    assert!(own_positions(&t, [&l0, &l1], &side[..5], 3).is_err());
    assert!(own_positions(&t, [&l0, &l1[..5]], &side, 3).is_err());
    assert!(st
        .scores_missing_as_zero(ScoreKind::GeometricMean, 1, 1)
        .is_err());
}
