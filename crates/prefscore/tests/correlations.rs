//! Correlations, bootstrap, permutation p-values and the all-pairs table.

use prefscore::{
    correlate, correlate_with_frequency, correlation, pairwise, pearson, ranks, sorted_profile,
    spearman, top_tokens, Bootstrap, CorrOptions, Method, PrefscoreError, MAX_STREAM,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn close(a: f64, b: f64, tol: f64) {
    assert!((a - b).abs() <= tol, "{a} vs {b}");
}

const X: [f64; 5] = [1.0, 2.0, 3.0, 4.0, 5.0];
const Y: [f64; 5] = [2.0, 4.0, 5.0, 4.0, 5.0];

#[test]
fn ranks_average_ties() {
    assert_eq!(ranks(&[10.0, 20.0, 20.0, 30.0]), vec![1.0, 2.5, 2.5, 4.0]);
    assert_eq!(ranks(&[3.0, 1.0, 2.0]), vec![3.0, 1.0, 2.0]);
    assert_eq!(ranks(&[7.0, 7.0, 7.0]), vec![2.0, 2.0, 2.0]);
    assert_eq!(ranks(&Y), vec![1.0, 2.5, 4.5, 2.5, 4.5]);
}

#[test]
fn pearson_and_spearman_match_hand_results() {
    // Pearson: Sxy = 6, Sxx = 10, Syy = 6 -> 6 / sqrt(60).
    close(pearson(&X, &Y).unwrap(), 6.0 / 60f64.sqrt(), 1e-12);
    // Spearman with ties: ranks of Y = [1, 2.5, 4.5, 2.5, 4.5]; Sxy = 7, Sxx = 10, Syy = 9.
    close(spearman(&X, &Y).unwrap(), 7.0 / 90f64.sqrt(), 1e-12);
    // Symmetric, and Spearman sees through monotone transforms.
    close(pearson(&Y, &X).unwrap(), pearson(&X, &Y).unwrap(), 1e-15);
    let cubes: Vec<f64> = X.iter().map(|v| v.powi(3)).collect();
    close(spearman(&X, &cubes).unwrap(), 1.0, 1e-12);
    assert!(pearson(&X, &cubes).unwrap() < 1.0 - 1e-3);
    let neg: Vec<f64> = X.iter().map(|v| -2.0 * v + 1.0).collect();
    close(pearson(&X, &neg).unwrap(), -1.0, 1e-12);
}

#[test]
fn correlation_errors() {
    assert!(matches!(
        pearson(&[1.0, 2.0], &[1.0, 2.0]),
        Err(PrefscoreError::NotEnoughData(_))
    ));
    assert!(matches!(
        pearson(&X, &[1.0; 5]),
        Err(PrefscoreError::Undefined(_))
    ));
    assert!(matches!(
        spearman(&X, &[1.0; 5]),
        Err(PrefscoreError::Undefined(_))
    ));
    // A constant whose mean is not exact in binary still counts as constant.
    assert!(matches!(
        pearson(&X, &[0.1; 5]),
        Err(PrefscoreError::Undefined(_))
    ));
    assert!(matches!(
        pearson(&[1e3 / 3.0; 5], &X),
        Err(PrefscoreError::Undefined(_))
    ));
    // Small but real variation is kept.
    let tiny: Vec<f64> = X.iter().map(|v| v * 1e-6).collect();
    close(pearson(&tiny, &Y).unwrap(), pearson(&X, &Y).unwrap(), 1e-9);
    assert!(matches!(
        pearson(&X, &Y[..4]),
        Err(PrefscoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        pearson(&X, &[1.0, 2.0, f64::NAN, 4.0, 5.0]),
        Err(PrefscoreError::BadValue { .. })
    ));
    let bad_level = CorrOptions {
        bootstrap: Bootstrap {
            level: 1.5,
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(correlation(&X, &Y, Method::Pearson, &bad_level, 0).is_err());
    // Streams from 2^39 would reach the reliabilities' (2 stream overflows at 2^63).
    let ok = CorrOptions::default();
    assert!(correlation(&X, &Y, Method::Pearson, &ok, MAX_STREAM - 1).is_ok());
    for stream in [MAX_STREAM, u64::MAX] {
        let e = correlation(&X, &Y, Method::Pearson, &ok, stream).unwrap_err();
        assert!(e.to_string().contains("must lie below 2^39"), "{e}");
    }
}

fn noisy_pair(n: usize, signal: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let y: Vec<f64> = x
        .iter()
        .map(|v| signal * v + rng.random_range(-1.0..1.0))
        .collect();
    (x, y)
}

#[test]
fn bootstrap_is_deterministic_and_brackets_r() {
    let (x, y) = noisy_pair(200, 1.0, 3);
    let opts = CorrOptions {
        bootstrap: Bootstrap {
            resamples: 300,
            level: 0.9,
            seed: 42,
        },
        permutations: 100,
    };
    for method in [Method::Pearson, Method::Spearman] {
        let a = correlation(&x, &y, method, &opts, 0).unwrap();
        let b = correlation(&x, &y, method, &opts, 0).unwrap();
        assert_eq!(a, b, "same seed, same numbers");
        let iv = a.interval.unwrap();
        assert!(iv.lo < a.r && a.r < iv.hi, "{iv:?} vs {}", a.r);
        assert!(iv.hi - iv.lo < 0.4);
        assert_eq!(iv.level, 0.9);
        let other = CorrOptions {
            bootstrap: Bootstrap {
                seed: 43,
                ..opts.bootstrap
            },
            ..opts
        };
        let c = correlation(&x, &y, method, &other, 0).unwrap();
        assert_eq!(c.r, a.r);
        assert_ne!(c.interval, a.interval, "another seed draws other resamples");
        let d = correlation(&x, &y, method, &opts, 5).unwrap();
        assert_ne!(
            d.interval, a.interval,
            "another stream draws other resamples"
        );
    }
    let none = CorrOptions {
        bootstrap: Bootstrap {
            resamples: 0,
            ..Default::default()
        },
        permutations: 0,
    };
    let c = correlation(&x, &y, Method::Pearson, &none, 0).unwrap();
    assert_eq!((c.interval, c.p_value), (None, None));
}

#[test]
fn permutation_p_values() {
    let opts = CorrOptions {
        bootstrap: Bootstrap {
            resamples: 0,
            ..Default::default()
        },
        permutations: 199,
    };
    // Perfectly correlated: no permutation of 40 values reaches |r| = 1 (but for 2/40! chance).
    let x: Vec<f64> = (0..40).map(|i| i as f64).collect();
    let y: Vec<f64> = x.iter().map(|v| 3.0 * v - 2.0).collect();
    for method in [Method::Pearson, Method::Spearman] {
        let c = correlation(&x, &y, method, &opts, 0).unwrap();
        close(c.r, 1.0, 1e-12);
        assert_eq!(c.p_value, Some(1.0 / 200.0));
    }
    // r = 0 exactly (y symmetric around the middle of x): every permutation is as extreme.
    let sym: Vec<f64> = (0..41).map(|i| ((i as f64) - 20.0).powi(2)).collect();
    let x41: Vec<f64> = (0..41).map(|i| i as f64).collect();
    let c = correlation(&x41, &sym, Method::Pearson, &opts, 0).unwrap();
    close(c.r, 0.0, 1e-12);
    assert_eq!(c.p_value, Some(1.0));
    // Independent data: not significant; strongly dependent data: significant.
    let (a, b) = noisy_pair(300, 0.0, 11);
    let c = correlation(&a, &b, Method::Spearman, &opts, 0).unwrap();
    assert!(c.p_value.unwrap() > 0.05, "{c:?}");
    let (a, b) = noisy_pair(300, 0.5, 12);
    let c = correlation(&a, &b, Method::Pearson, &opts, 0).unwrap();
    assert_eq!(c.p_value, Some(1.0 / 200.0), "{c:?}");
}

#[test]
fn top_tokens_by_frequency_among_scored() {
    let freq = [5, 9, 9, 1, 7, 0];
    let s1 = [Some(1.0), Some(2.0), None, Some(0.0), Some(3.0), Some(1.0)];
    let s2 = [Some(1.0), Some(2.0), Some(1.0), Some(0.0), None, Some(1.0)];
    assert_eq!(top_tokens(&freq, 3, &[&s1]), vec![1, 4, 0]);
    assert_eq!(top_tokens(&freq, 3, &[&s1, &s2]), vec![1, 0, 3]);
    assert_eq!(top_tokens(&freq, 10, &[&s2]), vec![1, 2, 0, 3, 5]);
}

#[test]
fn correlate_uses_the_top_n_frequent_scored_tokens() {
    // Tokens 0..4 are the frequent ones and agree perfectly; 4..8 are rare and disagree.
    let freq = [100, 90, 80, 70, 60, 5, 4, 3, 2];
    let a: Vec<Option<f64>> = [1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 0.0, 1.0, 0.0]
        .map(Some)
        .to_vec();
    let mut b: Vec<Option<f64>> = [2.0, 4.0, 6.0, 8.0, 9.0, -1.0, 5.0, -3.0, 7.0]
        .map(Some)
        .to_vec();
    b[4] = None; // unseen in run b: skipped, not NaN
    let opts = CorrOptions::default();
    let c = correlate(&a, &b, &freq, 4, Method::Pearson, &opts).unwrap();
    assert_eq!(c.n, 4);
    close(c.r, 1.0, 1e-12);
    let all = correlate(&a, &b, &freq, 100, Method::Pearson, &opts).unwrap();
    assert_eq!(all.n, 8);
    assert!(all.r < 0.9);
    assert!(correlate(&a, &b[..8], &freq, 4, Method::Pearson, &opts).is_err());
    let none = vec![None; 9];
    assert!(matches!(
        correlate(&a, &none, &freq, 4, Method::Pearson, &opts),
        Err(PrefscoreError::NotEnoughData(_))
    ));
}

#[test]
fn correlation_with_frequency_rank() {
    let freq = [50, 40, 30, 30, 10];
    // Score falls with frequency: the most frequent token (rank 1) scores highest.
    let s: Vec<Option<f64>> = [5.0, 4.0, 3.0, 3.0, 1.0].map(Some).to_vec();
    let opts = CorrOptions::default();
    let c = correlate_with_frequency(&s, &freq, 5, Method::Spearman, &opts).unwrap();
    close(c.r, -1.0, 1e-12);
    // Ranks 1, 2, 3.5, 3.5, 5 vs scores: Pearson by hand.
    let p = correlate_with_frequency(&s, &freq, 5, Method::Pearson, &opts).unwrap();
    close(
        p.r,
        pearson(&[1.0, 2.0, 3.5, 3.5, 5.0], &[5.0, 4.0, 3.0, 3.0, 1.0]).unwrap(),
        1e-12,
    );
}

#[test]
fn pairwise_table() {
    let (x, y) = noisy_pair(100, 1.0, 5);
    let freq: Vec<u64> = (0..100).map(|i| 1000 - i).collect();
    let run1: Vec<Option<f64>> = x.iter().copied().map(Some).collect();
    let run2: Vec<Option<f64>> = x.iter().map(|v| Some(2.0 * v + 1.0)).collect();
    let run3: Vec<Option<f64>> = y.iter().copied().map(Some).collect();
    let runs: Vec<(String, &[Option<f64>])> = vec![
        ("seed 1".into(), &run1),
        ("seed 2".into(), &run2),
        ("other".into(), &run3),
    ];
    let opts = CorrOptions {
        bootstrap: Bootstrap {
            resamples: 100,
            ..Default::default()
        },
        permutations: 50,
    };
    let m = pairwise(&runs, &freq, 50, Method::Pearson, &opts).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m.labels, ["seed 1", "seed 2", "other"]);
    for i in 0..3 {
        assert_eq!(m.get(i, i), 1.0);
        for j in 0..3 {
            assert_eq!(m.get(i, j), m.get(j, i));
            assert_eq!(m.n[i * 3 + j], 50);
        }
    }
    close(m.get(0, 1), 1.0, 1e-12);
    let expected = pearson(&x[..50], &y[..50]).unwrap();
    close(m.get(0, 2), expected, 1e-12);
    close(m.get(1, 2), expected, 1e-12);
    assert!(m.lo[2] < m.get(0, 2) && m.get(0, 2) < m.hi[2]);
    let mean = m.mean_off_diagonal().unwrap();
    close(mean, (1.0 + 2.0 * expected) / 3.0, 1e-12);
    assert_eq!(
        m,
        pairwise(&runs, &freq, 50, Method::Pearson, &opts).unwrap()
    );
    assert!(pairwise(&runs[..1], &freq, 50, Method::Pearson, &opts).is_err());
}

#[test]
fn sorted_profile_orders_runs_by_one_run() {
    let by = [Some(0.5), Some(-1.0), None, Some(2.0), Some(0.5)];
    let other = [Some(10.0), Some(20.0), Some(30.0), None, Some(50.0)];
    let (order, curves) = sorted_profile(&by, &[&by, &other], &[0, 1, 2, 3, 4]).unwrap();
    // Token 2 is unscored in `by`, token 3 in `other`; ties (0 and 4) by id.
    assert_eq!(order, vec![1, 0, 4]);
    assert_eq!(curves, vec![vec![-1.0, 0.5, 0.5], vec![20.0, 10.0, 50.0]]);
    assert!(sorted_profile(&by, &[&other[..3]], &[0]).is_err());
}
