//! Known answers: tree embeddings by classical MDS, hand-worked trees, Spearman by a second
//! computation.

mod common;

use common::{chance_uuas, mds_states, random_trees, shuffled};
use corpus::Upos;
use probe::{
    minimum_spanning_tree, right_branching_uuas, score_depths, score_distances, spearman,
    Bootstrap, FittedProbe, GoldTree, Prediction, ProbeParams, ProbeSet, Scores,
};

const WIDTH: usize = 24;

fn identity(width: usize) -> FittedProbe {
    let mut w = vec![0f32; width * width];
    for i in 0..width {
        w[i * width + i] = 1.0;
    }
    FittedProbe::from_weights(ProbeParams::distance().rank(width), width, w, Vec::new()).unwrap()
}

fn distance_scores(s: Scores) -> probe::DistanceScores {
    match s {
        Scores::Distance(d) => d,
        other => panic!("not distance scores: {other:?}"),
    }
}

#[test]
fn mds_vectors_give_uuas_one_and_shuffled_words_fall_to_chance() {
    let trees = random_trees(300, WIDTH, 7);
    let states = mds_states(&trees, WIDTH);
    let b = Bootstrap::default();
    let probe = identity(WIDTH);
    let set = ProbeSet::new(&trees, &states, 0).unwrap();
    let s = distance_scores(probe.evaluate(&set, &b).unwrap());
    assert_eq!(s.uuas.value, 1.0);
    let dspr = s.dspr.unwrap();
    assert!(dspr.value > 0.9, "DSpr. {dspr:?}");
    // The predicted distances are the tree's up to f32 rounding, which breaks the tree's many
    // ties at random (so DSpr. is below 1); rounded, they are the tree's and DSpr. is 1.
    let Prediction::Distances(pred) = probe.predict(&set).unwrap() else {
        panic!("not distances")
    };
    let rounded: Vec<Vec<f64>> = pred
        .iter()
        .map(|d| d.iter().map(|x| x.round()).collect())
        .collect();
    let exact = score_distances(&rounded, &trees, &b).unwrap();
    assert_eq!(exact.uuas.value, 1.0);
    assert!((exact.dspr.unwrap().value - 1.0).abs() < 1e-12, "{exact:?}");

    let mixed = shuffled(&states, 11);
    let set = ProbeSet::new(&trees, &mixed, 0).unwrap();
    let s = distance_scores(probe.evaluate(&set, &b).unwrap());
    let chance = chance_uuas(&trees);
    assert!(
        (s.uuas.value - chance).abs() < 0.03,
        "shuffled UUAS {} vs chance {chance}",
        s.uuas.value
    );
    assert!(
        s.uuas.low <= chance + 0.01 && chance - 0.01 <= s.uuas.high,
        "{s:?}"
    );
    assert!(s.dspr.unwrap().value < 0.3, "shuffled DSpr. {:?}", s.dspr);
}

#[test]
fn a_trained_distance_probe_recovers_mds_trees_and_not_shuffled_ones() {
    let trees = random_trees(400, 16, 3);
    let (train, rest) = trees.split_at(300);
    let (dev, test) = rest.split_at(50);
    let split = |t: &[GoldTree]| mds_states(t, 16);
    let (s_train, s_dev, s_test) = (split(train), split(dev), split(test));
    let params = ProbeParams::distance()
        .rank(16)
        .epochs(40)
        .learning_rate(1e-2)
        .patience(5);
    let fitted = params
        .fit(
            &ProbeSet::new(train, &s_train, 0).unwrap(),
            &ProbeSet::new(dev, &s_dev, 0).unwrap(),
        )
        .unwrap();
    let b = Bootstrap::default();
    let s = distance_scores(
        fitted
            .evaluate(&ProbeSet::new(test, &s_test, 0).unwrap(), &b)
            .unwrap(),
    );
    assert!(s.uuas.value > 0.9, "trained UUAS {s:?}");
    assert!(s.dspr.unwrap().value > 0.9, "trained DSpr. {s:?}");
    // The released code's loss learns the same structure.
    let mse = ProbeParams::new(probe::ProbeTask::Distance(probe::DistanceLoss::ReleasedMse))
        .rank(16)
        .epochs(40)
        .learning_rate(1e-2)
        .patience(5);
    let fitted = mse
        .fit(
            &ProbeSet::new(train, &s_train, 0).unwrap(),
            &ProbeSet::new(dev, &s_dev, 0).unwrap(),
        )
        .unwrap();
    let s = distance_scores(
        fitted
            .evaluate(&ProbeSet::new(test, &s_test, 0).unwrap(), &b)
            .unwrap(),
    );
    assert!(s.uuas.value > 0.9, "released-loss UUAS {s:?}");

    // Trained on words shuffled within their sentences, the probe finds no tree.
    let (m_train, m_dev, m_test) = (
        shuffled(&s_train, 1),
        shuffled(&s_dev, 2),
        shuffled(&s_test, 3),
    );
    let fitted = params
        .fit(
            &ProbeSet::new(train, &m_train, 0).unwrap(),
            &ProbeSet::new(dev, &m_dev, 0).unwrap(),
        )
        .unwrap();
    let s = distance_scores(
        fitted
            .evaluate(&ProbeSet::new(test, &m_test, 0).unwrap(), &b)
            .unwrap(),
    );
    let chance = chance_uuas(test);
    assert!(
        (s.uuas.value - chance).abs() < 0.08,
        "shuffled trained UUAS {} vs chance {chance}",
        s.uuas.value
    );
}

fn tree(heads: &[usize], punct: &[usize]) -> GoldTree {
    let tags: Vec<Upos> = (0..heads.len())
        .map(|i| {
            if punct.contains(&i) {
                Upos::Punct
            } else {
                Upos::Noun
            }
        })
        .collect();
    GoldTree::from_heads(heads, &tags).unwrap()
}

#[test]
fn tree_distances_and_depths_by_hand() {
    // 1 <- 2 -> 3 -> 4 (word 2 the root): a path 1-2-3-4 hanging from word 2.
    let t = tree(&[2, 0, 2, 3], &[]);
    assert_eq!(t.distance(0, 3), 3);
    assert_eq!(t.distance(0, 2), 2);
    assert_eq!(t.distance(3, 1), 2);
    assert_eq!(t.depths(), [1, 0, 1, 2]);
    assert_eq!(t.root(), 1);
    assert_eq!(t.edges_without_punct(), [(0, 1), (1, 2), (2, 3)]);
    assert!(GoldTree::from_heads(&[2, 1], &[Upos::Noun; 2]).is_err()); // no root
    assert!(GoldTree::from_heads(&[0, 5], &[Upos::Noun; 2]).is_err()); // head outside
}

#[test]
fn mst_and_uuas_against_hand_worked_trees() {
    #[rustfmt::skip]
    let d = [
        0.0, 1.0, 2.5, 3.0,
        1.0, 0.0, 0.5, 2.0,
        2.5, 0.5, 0.0, 1.5,
        3.0, 2.0, 1.5, 0.0,
    ];
    // Prim: {1,2} at 0.5, then {0,1} at 1.0, then {2,3} at 1.5 (beats {1,3} at 2.0).
    assert_eq!(
        minimum_spanning_tree(&d, 4, &[0, 1, 2, 3]),
        [(0, 1), (1, 2), (2, 3)]
    );
    // Without word 2, the tree over {0, 1, 3}: {0,1} 1.0, {1,3} 2.0.
    assert_eq!(minimum_spanning_tree(&d, 4, &[0, 1, 3]), [(0, 1), (1, 3)]);
    let b = Bootstrap::default();
    let pred = vec![d.to_vec()];
    // Gold = the path: 3 of 3.
    let s = score_distances(&pred, &[tree(&[2, 0, 2, 3], &[])], &b).unwrap();
    assert_eq!(s.uuas.value, 1.0);
    // Gold = a star around word 1: edges (0,1), (1,2), (1,3); the MST has 2 of them.
    let s = score_distances(&pred, &[tree(&[2, 0, 2, 2], &[])], &b).unwrap();
    assert!((s.uuas.value - 2.0 / 3.0).abs() < 1e-12);
    // Word 2 punctuation: gold edges without it (0,1), (1,3); the MST over {0,1,3} has both.
    let s = score_distances(&pred, &[tree(&[2, 0, 2, 2], &[2])], &b).unwrap();
    assert_eq!(s.uuas.value, 1.0);
    // Pooled over sentences: (3 + 2) / (3 + 3).
    let two = vec![d.to_vec(), d.to_vec()];
    let s = score_distances(
        &two,
        &[tree(&[2, 0, 2, 3], &[]), tree(&[2, 0, 2, 2], &[])],
        &b,
    )
    .unwrap();
    assert!((s.uuas.value - 5.0 / 6.0).abs() < 1e-12);
    assert!(s.dspr.is_none(), "no sentence of 5-50 words");
}

#[test]
fn right_branching_and_root_accuracy_by_hand() {
    let b = Bootstrap::default();
    // A chain either way is all right-branching edges.
    assert_eq!(
        right_branching_uuas(&[tree(&[2, 3, 4, 0], &[])], &b)
            .unwrap()
            .value,
        1.0
    );
    assert_eq!(
        right_branching_uuas(&[tree(&[0, 1, 2, 3], &[])], &b)
            .unwrap()
            .value,
        1.0
    );
    // A star from word 0 shares one edge, (0,1), with the chain.
    let star = tree(&[0, 1, 1, 1], &[]);
    assert!((right_branching_uuas(&[star], &b).unwrap().value - 1.0 / 3.0).abs() < 1e-12);
    // Punctuation is skipped: a , b -> the chain links a to b.
    let t = tree(&[0, 1, 1], &[1]);
    assert_eq!(right_branching_uuas(&[t], &b).unwrap().value, 1.0);

    // Root accuracy: the least deep non-punctuation word; punctuation may be shallower.
    let t = tree(&[2, 0, 2, 2, 2], &[4]);
    let right = vec![vec![1.0, 0.2, 1.1, 0.9, 0.1]];
    let wrong = vec![vec![0.1, 0.2, 1.1, 0.9, 0.0]];
    let s = score_depths(&right, std::slice::from_ref(&t), &b).unwrap();
    assert_eq!(s.root_accuracy.value, 1.0);
    let s = score_depths(&wrong, std::slice::from_ref(&t), &b).unwrap();
    assert_eq!(s.root_accuracy.value, 0.0);
    // NSpr.: Spearman's ρ of the predicted depths against the gold [1, 0, 1, 1, 1].
    let nspr = s.nspr.unwrap();
    assert!(nspr.value < 1.0);
    let s = score_depths(&right, &[t], &b).unwrap();
    let exact = spearman(&right[0], &[1.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
    assert!((s.nspr.unwrap().value - exact).abs() < 1e-12);
}

/// Ranks by counting (rank = #smaller + (#equal + 1) / 2), Pearson by a second formula.
fn spearman_by_counting(a: &[f64], b: &[f64]) -> f64 {
    let rank = |x: &[f64]| -> Vec<f64> {
        x.iter()
            .map(|v| {
                let less = x.iter().filter(|w| *w < v).count() as f64;
                let eq = x.iter().filter(|w| *w == v).count() as f64;
                less + (eq + 1.0) / 2.0
            })
            .collect()
    };
    let (ra, rb) = (rank(a), rank(b));
    let n = a.len() as f64;
    let sa: f64 = ra.iter().sum();
    let sb: f64 = rb.iter().sum();
    let sab: f64 = ra.iter().zip(&rb).map(|(x, y)| x * y).sum();
    let saa: f64 = ra.iter().map(|x| x * x).sum();
    let sbb: f64 = rb.iter().map(|x| x * x).sum();
    (n * sab - sa * sb) / ((n * saa - sa * sa).sqrt() * (n * sbb - sb * sb).sqrt())
}

#[test]
fn spearman_against_a_second_computation() {
    // scipy.stats.spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) = 0.8207826816681233.
    let r = spearman(&[1., 2., 3., 4., 5.], &[5., 6., 7., 8., 7.]).unwrap();
    assert!((r - 0.8207826816681233).abs() < 1e-12);
    // Without ties: 1 − 6 Σ d² / (n (n² − 1)).
    let a = [0.3, 1.7, -2.0, 4.4, 0.9, 2.2];
    let b = [1.0, 0.5, -1.0, 3.0, 2.0, 2.5];
    let ra = probe::ranks(&a);
    let rb = probe::ranks(&b);
    let d2: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - y).powi(2)).sum();
    let n = 6.0;
    let closed = 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
    assert!((spearman(&a, &b).unwrap() - closed).abs() < 1e-12);
    // With ties (tree distances have many): against ranks by counting.
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for _ in 0..50 {
        let n = rng.random_range(3..30);
        let a: Vec<f64> = (0..n).map(|_| rng.random_range(0..5) as f64).collect();
        let b: Vec<f64> = (0..n).map(|_| rng.random::<f64>()).collect();
        match spearman(&a, &b) {
            Some(r) => assert!((r - spearman_by_counting(&a, &b)).abs() < 1e-10),
            None => assert!(a.iter().all(|x| *x == a[0])),
        }
    }
    assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
}

#[test]
fn bootstrap_intervals_are_seeded_and_hold_the_value() {
    let trees = random_trees(100, 20, 9);
    let states = mds_states(&trees, WIDTH);
    let mixed = shuffled(&states, 4);
    let set = ProbeSet::new(&trees, &mixed, 0).unwrap();
    let b = Bootstrap {
        resamples: 200,
        level: 0.9,
        seed: 3,
    };
    let p = identity(WIDTH);
    let one = distance_scores(p.evaluate(&set, &b).unwrap());
    let two = distance_scores(p.evaluate(&set, &b).unwrap());
    assert_eq!(one, two);
    assert!(
        one.uuas.low < one.uuas.value && one.uuas.value < one.uuas.high,
        "{one:?}"
    );
    let other = distance_scores(p.evaluate(&set, &Bootstrap { seed: 4, ..b }).unwrap());
    assert_ne!(one.uuas.low, other.uuas.low);
    assert!(Bootstrap { resamples: 1, ..b }.check().is_err());
    assert!(Bootstrap { level: 1.0, ..b }.check().is_err());
}
