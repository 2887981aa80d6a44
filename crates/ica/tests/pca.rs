//! PCA against an independent nalgebra eigen-decomposition, and whitening.

use ica::{IcaError, Matrix, Pca, PcaConfig};
use nalgebra::{DMatrix, SymmetricEigen};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Correlated data `[n, big_d]` with distinct variances and a non-zero mean.
fn correlated(n: usize, big_d: usize, seed: u64) -> Matrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mix: Vec<f32> = (0..big_d * big_d)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let scales: Vec<f32> = (0..big_d).map(|k| 3.0 / (1.0 + k as f32)).collect();
    let mut x = Matrix::zeros(n, big_d);
    for i in 0..n {
        let z: Vec<f32> = (0..big_d)
            .map(|k| scales[k] * rng.random_range(-1.0f32..1.0))
            .collect();
        for c in 0..big_d {
            let v: f32 = (0..big_d).map(|k| z[k] * mix[k * big_d + c]).sum();
            x.as_mut_slice()[i * big_d + c] = v + 0.5 * c as f32;
        }
    }
    x
}

/// nalgebra oracle: eigenpairs of the (centred or raw) second moment, largest first.
fn oracle(x: &Matrix, centre: bool) -> (Vec<f64>, DMatrix<f64>, f64) {
    let (n, big_d) = x.shape();
    let mut m = DMatrix::<f64>::from_fn(n, big_d, |i, j| f64::from(x.get(i, j)));
    if centre {
        for j in 0..big_d {
            let mean = m.column(j).mean();
            m.column_mut(j).add_scalar_mut(-mean);
        }
    }
    let moment = m.transpose() * &m / n as f64;
    let trace = moment.trace();
    let eig = SymmetricEigen::new(moment);
    let mut order: Vec<usize> = (0..big_d).collect();
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    let values = order.iter().map(|&k| eig.eigenvalues[k]).collect();
    let vectors = DMatrix::from_fn(big_d, big_d, |r, c| eig.eigenvectors[(r, order[c])]);
    (values, vectors, trace)
}

#[test]
fn matches_nalgebra_oracle_centred_and_raw() {
    let x = correlated(400, 9, 11);
    for centre in [true, false] {
        let cfg = PcaConfig {
            centre,
            ..PcaConfig::new(5)
        };
        let pca = Pca::fit(&x, &cfg).unwrap();
        let (values, vectors, trace) = oracle(&x, centre);
        for k in 0..5 {
            let rel = (pca.variances()[k] - values[k]).abs() / values[k];
            assert!(
                rel < 1e-10,
                "centre={centre} k={k}: {} vs {}",
                pca.variances()[k],
                values[k]
            );
            assert!((pca.explained_variance_ratio()[k] - values[k] / trace).abs() < 1e-10);
            // Same direction up to sign (f32 storage of the vectors).
            let dot: f64 = (0..9)
                .map(|r| f64::from(pca.components().get(r, k)) * vectors[(r, k)])
                .sum();
            assert!(
                (dot.abs() - 1.0).abs() < 1e-6,
                "centre={centre} k={k}: dot {dot}"
            );
        }
        let means_zero = pca.mean().iter().all(|&m| m == 0.0);
        assert_eq!(means_zero, !centre);
    }
}

#[test]
fn whitening_gives_identity_covariance() {
    let x = correlated(2000, 8, 5);
    let pca = Pca::fit(&x, &PcaConfig::new(6)).unwrap();
    let white = pca.transform(&x).unwrap();
    assert_eq!(white.shape(), (2000, 6));
    for a in 0..6 {
        let mean: f64 = (0..2000).map(|i| f64::from(white.get(i, a))).sum::<f64>() / 2000.0;
        assert!(mean.abs() < 1e-4, "mean {a}: {mean}");
        for b in 0..6 {
            let cov: f64 = (0..2000)
                .map(|i| f64::from(white.get(i, a)) * f64::from(white.get(i, b)))
                .sum::<f64>()
                / 2000.0;
            let expected = if a == b { 1.0 } else { 0.0 };
            assert!((cov - expected).abs() < 1e-4, "cov[{a},{b}] = {cov}");
        }
    }
}

#[test]
fn transform_of_new_rows_matches_fitted_rows() {
    let x = correlated(300, 6, 2);
    let pca = Pca::fit(&x, &PcaConfig::new(4)).unwrap();
    let all = pca.transform(&x).unwrap();
    let some = Matrix::new(2, 6, [x.row(10), x.row(200)].concat()).unwrap();
    let part = pca.transform(&some).unwrap();
    for (r, src) in [10, 200].into_iter().enumerate() {
        for c in 0..4 {
            assert!((part.get(r, c) - all.get(src, c)).abs() < 1e-5);
        }
    }
    assert!(matches!(
        pca.transform(&Matrix::zeros(2, 5)),
        Err(IcaError::Shape(_))
    ));
}

#[test]
fn errors_are_typed() {
    let x = correlated(50, 6, 3);
    assert!(matches!(
        Pca::fit(
            &Matrix::new(3, 6, x.as_slice()[..18].to_vec()).unwrap(),
            &PcaConfig::new(4)
        ),
        Err(IcaError::TooFewSamples { samples: 3, dim: 4 })
    ));
    let mut bad = x.clone();
    bad.as_mut_slice()[6 * 7 + 2] = f32::NAN;
    assert!(matches!(
        Pca::fit(&bad, &PcaConfig::new(3)),
        Err(IcaError::NonFinite { row: 7, col: 2, .. })
    ));
    // Column 5 = column 0 + column 1: only 5 independent directions.
    let dependent = Matrix::from_fn(50, 6, |i, c| {
        if c == 5 {
            x.get(i, 0) + x.get(i, 1)
        } else {
            x.get(i, c)
        }
    });
    assert!(Pca::fit(&dependent, &PcaConfig::new(5)).is_ok());
    assert!(matches!(
        Pca::fit(&dependent, &PcaConfig::new(6)),
        Err(IcaError::ZeroVariance { index: 5, .. })
    ));
    assert!(matches!(
        Pca::fit(&x, &PcaConfig::new(0)),
        Err(IcaError::Config(_))
    ));
    assert!(matches!(
        Pca::fit(&x, &PcaConfig::new(7)),
        Err(IcaError::Config(_))
    ));
}

#[test]
fn a_serialised_matrix_is_checked_like_a_new_one() {
    let x = correlated(5, 3, 1);
    let json = serde_json::to_string(&x).unwrap();
    assert_eq!(serde_json::from_str::<Matrix>(&json).unwrap(), x);
    // Two values cannot fill 2x2: refused when read, not at a later product or index.
    let short = r#"{"rows":2,"cols":2,"data":[1.0,2.0]}"#;
    let e = serde_json::from_str::<Matrix>(short).unwrap_err();
    assert!(e.to_string().contains("cannot fill a 2x2 matrix"), "{e}");
}
