//! Closed-form fits from moments: known answers, exactness against explicit residuals and a
//! nalgebra oracle, duplicated and collinear bases under every ridge, and the typed errors.

mod mathutil;

use lmd::fit::{fit, r2, score, Ridge};
use lmd::moments::Moments;
use lmd::synthetic::PlantedSpec;
use lmd::LmdError;
use mathutil::*;

const RIDGES: [Ridge; 3] = [Ridge::None, Ridge::Fixed(1e-6), Ridge::MinEigen(1e-6)];

#[test]
fn planted_r2_is_recovered_at_large_n() {
    let spec = PlantedSpec {
        models: 4,
        dim: 16,
        latent: 12,
        ..PlantedSpec::default()
    };
    let data = planted(spec, 200_000, 200_000, 11);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 4096);
    let test = moments_of(&names, &widths, &data.test, 4096);
    let cases: [(usize, &[usize]); 4] = [(0, &[1]), (3, &[0]), (1, &[0, 2, 3]), (2, &[0, 3])];
    for (t, basis) in cases {
        let truth = p.r2(t, basis).unwrap();
        let bnames: Vec<&str> = basis.iter().map(|&j| names[j].as_str()).collect();
        for ridge in RIDGES {
            let d = fit(&train, &[&names[t]], &bnames, ridge).unwrap();
            let got = r2(&test, &d).unwrap();
            assert!(
                (got - truth).abs() < 1e-3,
                "{t} on {basis:?} {ridge:?}: {got} vs {truth}"
            );
        }
    }
}

#[test]
fn moment_r2_equals_explicit_residual_r2() {
    let spec = PlantedSpec {
        models: 3,
        dim: 8,
        latent: 5,
        ..PlantedSpec::default()
    };
    let data = planted(spec, 3000, 2000, 12);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 512);
    let test = moments_of(&names, &widths, &data.test, 512);
    let x = to_na(&data.test, 24);
    for ridge in RIDGES {
        let d = fit(&train, &["m2"], &["m0", "m1"], ridge).unwrap();
        let s = score(&test, &d).unwrap();
        let explicit = explicit_r2(
            &x,
            &cols_of(&widths, &[2]),
            &cols_of(&widths, &[0, 1]),
            &d.w,
            &d.b,
        );
        assert!(
            (s.r2 - explicit).abs() < 1e-9,
            "{ridge:?}: {} vs {explicit}",
            s.r2
        );
        // Per-dimension R² pooled with SST weights gives the pooled R².
        let sst_dims: Vec<f64> = (16..24)
            .map(|c| test.covariance().unwrap()[(c, c)])
            .collect();
        let pooled: f64 = s
            .per_dim
            .iter()
            .zip(&sst_dims)
            .map(|(r, t)| (1.0 - r.unwrap()) * t)
            .sum::<f64>()
            / sst_dims.iter().sum::<f64>();
        assert!((1.0 - pooled - s.r2).abs() < 1e-12);
        // The fit predicts rows as W v + b.
        let v: Vec<f64> = (0..16).map(|c| x[(0, c)]).collect();
        let pred = d.predict(&v).unwrap();
        assert_eq!(pred.len(), 8);
    }
}

#[test]
fn faer_fit_equals_nalgebra_oracle() {
    let spec = PlantedSpec {
        models: 3,
        dim: 10,
        latent: 4,
        ..PlantedSpec::default()
    };
    let data = planted(spec, 4000, 10, 13);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 1000);
    let x = to_na(&data.train, 30);
    let c = cov_na(&x);
    let (tc, bc) = (cols_of(&widths, &[0]), cols_of(&widths, &[1, 2]));
    let c_bb = nalgebra::DMatrix::from_fn(20, 20, |r, k| c[(bc[r], bc[k])]);
    let c_tb = nalgebra::DMatrix::from_fn(10, 20, |r, k| c[(tc[r], bc[k])]);
    let sym_eig = c_bb.clone().symmetric_eigen();
    let lmin = sym_eig.eigenvalues.min();
    let oracle = |lambda: f64, pinv: bool| {
        let a = &c_bb + nalgebra::DMatrix::identity(20, 20) * lambda;
        let inv = if pinv {
            a.pseudo_inverse(1e-300).unwrap()
        } else {
            a.cholesky().unwrap().inverse()
        };
        &c_tb * inv
    };
    let expect = [
        oracle(0.0, true),
        oracle(1e-6, false),
        oracle((1e-6 - lmin).max(0.0), false),
    ];
    for (ridge, want) in RIDGES.into_iter().zip(expect) {
        let d = fit(&train, &["m0"], &["m1", "m2"], ridge).unwrap();
        let mut err: f64 = 0.0;
        for r in 0..10 {
            for k in 0..20 {
                err = err.max((d.w[(r, k)] - want[(r, k)]).abs());
            }
        }
        assert!(err < 1e-9, "{ridge:?}: max |W - W_oracle| = {err}");
        assert_eq!(d.rank, 20);
    }
}

#[test]
fn duplicated_model_gives_r2_one() {
    let data = planted(PlantedSpec::default(), 5000, 3000, 14);
    let p = &data.planted;
    let (train_rows, names, widths) =
        with_copy(&data.train, &p.names(), &p.widths(), 1, 1.0, 0.0, "dup");
    let (test_rows, _, _) = with_copy(&data.test, &p.names(), &p.widths(), 1, 1.0, 0.0, "dup");
    let train = moments_of(&names, &widths, &train_rows, 1000);
    let test = moments_of(&names, &widths, &test_rows, 1000);
    for ridge in RIDGES {
        let d = fit(&train, &["m1"], &["dup"], ridge).unwrap();
        let got = r2(&test, &d).unwrap();
        assert!((got - 1.0).abs() < 1e-6, "{ridge:?}: {got}");
    }
}

#[test]
fn duplicated_or_collinear_basis_is_finite_and_correct_under_every_ridge() {
    let data = planted(PlantedSpec::default(), 6000, 3000, 15);
    let p = &data.planted;
    for (scale, shift) in [(1.0, 0.0), (-2.0, 3.0)] {
        let (train_rows, names, widths) = with_copy(
            &data.train,
            &p.names(),
            &p.widths(),
            1,
            scale,
            shift,
            "copy",
        );
        let (test_rows, _, _) =
            with_copy(&data.test, &p.names(), &p.widths(), 1, scale, shift, "copy");
        let train = moments_of(&names, &widths, &train_rows, 1000);
        let test = moments_of(&names, &widths, &test_rows, 1000);
        for ridge in RIDGES {
            let alone = r2(&test, &fit(&train, &["m0"], &["m1"], ridge).unwrap()).unwrap();
            let both = fit(&train, &["m0"], &["m1", "copy"], ridge).unwrap();
            let got = r2(&test, &both).unwrap();
            assert!(got.is_finite() && both.w.norm_l2().is_finite());
            // The copy adds nothing: same R² (the ridge shrinks both by O(λ)).
            assert!(
                (got - alone).abs() < 1e-5,
                "{ridge:?} scale {scale}: {got} vs {alone}"
            );
            if ridge == Ridge::None {
                assert_eq!(
                    both.rank, 16,
                    "pinv keeps exactly the independent directions"
                );
            }
            // Listing the same model twice is the same situation.
            let twice = fit(&train, &["m0"], &["m1", "m1"], ridge).unwrap();
            assert!((r2(&test, &twice).unwrap() - alone).abs() < 1e-5);
        }
    }
}

#[test]
fn bad_fits_are_typed_errors() {
    let data = planted(PlantedSpec::default(), 40, 40, 16);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 40);
    assert!(matches!(
        fit(&train, &["m0"], &["nope"], Ridge::None),
        Err(LmdError::UnknownModel { .. })
    ));
    assert!(matches!(
        fit(&train, &["m0"], &[], Ridge::None),
        Err(LmdError::InvalidArgument(_))
    ));
    // 40 samples cannot support a 48-dimensional basis.
    assert!(matches!(
        fit(&train, &["m0"], &["m1", "m2", "m3"], Ridge::Fixed(1e-6)),
        Err(LmdError::TooFewSamples { n: 40, .. })
    ));
    assert!(matches!(
        fit(&train, &["m0"], &["m1"], Ridge::Fixed(-1.0)),
        Err(LmdError::InvalidArgument(_))
    ));
    assert!(fit(&train, &["m0"], &["m1"], Ridge::MinEigen(f64::NAN)).is_err());

    // A constant basis: rank 0 under the pseudo-inverse; a fixed λ = 0 is singular too.
    let names2 = vec!["u".to_string(), "flat".to_string()];
    let mut m = Moments::new(names2, vec![2, 2]).unwrap();
    let rows: Vec<f32> = (0..50)
        .flat_map(|i| [i as f32, (i * i % 7) as f32, 3.0, 3.0])
        .collect();
    m.update_stacked(&rows).unwrap();
    assert!(matches!(
        fit(&m, &["u"], &["flat"], Ridge::None),
        Err(LmdError::Singular {
            rank: 0,
            dim: 2,
            ..
        })
    ));
    assert!(matches!(
        fit(&m, &["u"], &["flat"], Ridge::Fixed(0.0)),
        Err(LmdError::Singular { .. })
    ));
    // A zero-variance target cannot be scored.
    let d = fit(&m, &["flat"], &["u"], Ridge::None).unwrap();
    assert!(matches!(r2(&m, &d), Err(LmdError::InvalidArgument(_))));
    // Scoring on a split without the fit's models.
    let other = Moments::new(vec!["x".into()], vec![2]).unwrap();
    assert!(r2(&other, &d).is_err());
}
