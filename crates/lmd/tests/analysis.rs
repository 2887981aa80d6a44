//! The paper's quantities from moments: pairwise and group R² (precision identity vs direct
//! fits vs planted truth), ρ, CKA and CCA against sample-level nalgebra references, reports.

mod mathutil;

use lmd::analysis::{analyze, group_r2, group_r2_direct, pairwise_r2, subset_r2, GroupMethod};
use lmd::cka::{cca_r2, linear_cka};
use lmd::fit::Ridge;
use lmd::synthetic::PlantedSpec;
use mathutil::*;

fn spec() -> PlantedSpec {
    PlantedSpec {
        models: 4,
        dim: 8,
        latent: 10,
        ..PlantedSpec::default()
    }
}

#[test]
fn precision_identity_equals_direct_group_fits() {
    let data = planted(spec(), 6000, 3000, 21);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 1000);
    let test = moments_of(&names, &widths, &data.test, 1000);
    for ridge in [Ridge::None, Ridge::Fixed(1e-6), Ridge::Fixed(0.05)] {
        let fast = group_r2(&train, &test, ridge).unwrap();
        assert_eq!(fast.method, GroupMethod::Precision, "{ridge:?}");
        let slow = group_r2_direct(&train, &test, ridge).unwrap();
        assert_eq!(slow.method, GroupMethod::Direct);
        for (a, b) in fast.r2.iter().zip(&slow.r2) {
            assert!((a - b).abs() < 1e-9, "{ridge:?}: {a} vs {b}");
        }
        assert!((fast.rho() - slow.rho()).abs() < 1e-9);
    }
    // A test split with fewer rows than dimensions (singular S') is scored just as exactly.
    let small = moments_of(&names, &widths, &data.test[..20 * 32], 7);
    let fast = group_r2(&train, &small, Ridge::REFERENCE).unwrap();
    let slow = group_r2_direct(&train, &small, Ridge::REFERENCE).unwrap();
    for (a, b) in fast.r2.iter().zip(&slow.r2) {
        assert!((a - b).abs() < 1e-9, "small test split: {a} vs {b}");
    }
    // The per-basis ridge cannot use the joint factorisation.
    let g = group_r2(&train, &test, Ridge::MinEigen(1e-6)).unwrap();
    assert_eq!(g.method, GroupMethod::Direct);
}

#[test]
fn pairwise_and_group_match_planted_truth_and_single_fits() {
    let data = planted(spec(), 100_000, 100_000, 22);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 4096);
    let test = moments_of(&names, &widths, &data.test, 4096);
    let pr = pairwise_r2(&train, &test, Ridge::REFERENCE).unwrap();
    let truth = p.pairwise_r2().unwrap();
    for i in 0..4 {
        for j in 0..4 {
            assert!(
                (pr.get(i, j) - truth.get(i, j)).abs() < 5e-3,
                "({i},{j}) {} vs {}",
                pr.get(i, j),
                truth.get(i, j)
            );
            if i != j {
                let single =
                    subset_r2(&train, &test, &names[i], &[&names[j]], Ridge::REFERENCE).unwrap();
                assert!((single - pr.get(i, j)).abs() < 1e-10);
            }
        }
    }
    let rho = pr.symmetrized();
    assert!((rho.get(0, 2) - rho.get(2, 0)).abs() == 0.0);
    assert!((rho.get(0, 2) - 0.5 * (pr.get(0, 2) + pr.get(2, 0))).abs() < 1e-15);
    let g = group_r2(&train, &test, Ridge::REFERENCE).unwrap();
    let gt = p.group_r2().unwrap();
    for (a, b) in g.r2.iter().zip(&gt) {
        assert!((a - b).abs() < 5e-3, "{a} vs {b}");
    }
}

#[test]
fn duplicated_model_in_the_zoo() {
    let data = planted(spec(), 5000, 3000, 23);
    let p = &data.planted;
    let (tr, names, widths) = with_copy(&data.train, &p.names(), &p.widths(), 2, 1.0, 0.0, "dup");
    let (te, _, _) = with_copy(&data.test, &p.names(), &p.widths(), 2, 1.0, 0.0, "dup");
    let train = moments_of(&names, &widths, &tr, 1000);
    let test = moments_of(&names, &widths, &te, 1000);
    // Singular joint covariance: the pseudo-inverse path falls back to direct fits.
    let g = group_r2(&train, &test, Ridge::None).unwrap();
    assert_eq!(g.method, GroupMethod::Direct);
    assert!((g.r2[2] - 1.0).abs() < 1e-9 && (g.r2[4] - 1.0).abs() < 1e-9);
    // A fixed ridge keeps the joint factorisation valid.
    let f = group_r2(&train, &test, Ridge::REFERENCE).unwrap();
    assert_eq!(f.method, GroupMethod::Precision);
    assert!(f.r2.iter().all(|r| r.is_finite()));
    assert!((f.r2[2] - 1.0).abs() < 1e-4 && (f.r2[4] - 1.0).abs() < 1e-4);
    let direct = group_r2_direct(&train, &test, Ridge::REFERENCE).unwrap();
    for (a, b) in f.r2.iter().zip(&direct.r2) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
    let pr = pairwise_r2(&train, &test, Ridge::MinEigen(1e-6)).unwrap();
    assert!((pr.get(2, 4) - 1.0).abs() < 1e-6 && (pr.get(4, 2) - 1.0).abs() < 1e-6);
}

#[test]
fn cka_and_cca_match_sample_references() {
    let data = planted(spec(), 3000, 10, 24);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let m = moments_of(&names, &widths, &data.train, 700);
    let x = to_na(&data.train, 32);
    let c = cov_na(&x);
    let block = |i: usize, j: usize| {
        let (ri, cj) = (cols_of(&widths, &[i]), cols_of(&widths, &[j]));
        nalgebra::DMatrix::from_fn(8, 8, |r, k| c[(ri[r], cj[k])])
    };
    let cka = linear_cka(&m).unwrap();
    let cca = cca_r2(&m, 0.0).unwrap();
    for i in 0..4 {
        for j in 0..4 {
            // CKA from explicit centred Grams: ‖XᵀY‖² / (‖XᵀX‖ ‖YᵀY‖).
            let want = block(i, j).norm_squared() / (block(i, i).norm() * block(j, j).norm());
            assert!((cka.get(i, j) - want).abs() < 1e-9);
            // Mean squared canonical correlation from the SVD of the whitened cross-covariance.
            let wi = block(i, i)
                .cholesky()
                .unwrap()
                .inverse()
                .cholesky()
                .unwrap()
                .l();
            let wj = block(j, j)
                .cholesky()
                .unwrap()
                .inverse()
                .cholesky()
                .unwrap()
                .l();
            let k = wi.transpose() * block(i, j) * wj;
            let sv = k.singular_values();
            let want = sv.iter().map(|s| s * s).sum::<f64>() / 8.0;
            assert!(
                (cca.get(i, j) - want).abs() < 1e-9,
                "{} vs {want}",
                cca.get(i, j)
            );
            assert!(sv.iter().all(|&s| s <= 1.0 + 1e-9));
        }
    }
    assert!(cca_r2(&m, -1.0).is_err());
}

#[test]
fn analysis_bundle_and_reports() {
    let data = planted(spec(), 4000, 2000, 25);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let train = moments_of(&names, &widths, &data.train, 1000);
    let test = moments_of(&names, &widths, &data.test, 1000);
    let a = analyze(&train, &test, Ridge::REFERENCE).unwrap();
    assert_eq!(a.pairwise_rho, a.pairwise_r2.symmetrized());
    assert!((a.group.rho() - a.group.r2.iter().sum::<f64>() / 4.0).abs() < 1e-15);
    let dir = tempfile::tempdir().unwrap();
    let files = lmd::tables::write_analysis(dir.path(), &a).unwrap();
    for stem in ["pairwise_r2", "pairwise_rho", "cka", "group_r2"] {
        for ext in ["csv", "md", "json"] {
            assert!(
                dir.path().join(format!("{stem}.{ext}")).exists(),
                "{stem}.{ext}"
            );
        }
    }
    assert!(files.iter().any(|f| f.ends_with("pairwise_r2.png")));
    let md = std::fs::read_to_string(dir.path().join("pairwise_r2.md")).unwrap();
    assert!(md.contains("rows = target, columns = basis") && md.contains("m3"));
    let csv = std::fs::read_to_string(dir.path().join("group_r2.csv")).unwrap();
    assert!(csv.lines().last().unwrap().contains("group ρ"));
    assert_eq!(
        csv.lines().count(),
        1 + 4 + 1,
        "header, one row per model, group ρ"
    );
    // Splits over different models are refused.
    let other = moments_of(&names[..3], &widths[..3], &data.test[..0], 10);
    assert!(analyze(&train, &other, Ridge::None).is_err());
}

#[test]
fn population_moments_give_the_closed_form_exactly() {
    // Fit and score on the exact population moments: every R² must equal the Woodbury closed
    // form to rounding (no sampling error at all), through every path.
    let p = lmd::synthetic::Planted::new(PlantedSpec {
        models: 5,
        dim: 12,
        latent: 9,
        ..PlantedSpec::default()
    })
    .unwrap();
    let m = p.population_moments(10_000).unwrap();
    let truth = p.pairwise_r2().unwrap();
    let pr = pairwise_r2(&m, &m, Ridge::None).unwrap();
    for k in 0..25 {
        assert!(
            (pr.values[k] - truth.values[k]).abs() < 1e-10,
            "{k}: {} vs {}",
            pr.values[k],
            truth.values[k]
        );
    }
    let gt = p.group_r2().unwrap();
    for ridge in [Ridge::None, Ridge::MinEigen(1e-9)] {
        let g = group_r2(&m, &m, ridge).unwrap();
        for (a, b) in g.r2.iter().zip(&gt) {
            assert!((a - b).abs() < 1e-10, "{ridge:?}: {a} vs {b}");
        }
    }
    let subset = subset_r2(&m, &m, "m4", &["m0", "m2"], Ridge::None).unwrap();
    assert!((subset - p.r2(4, &[0, 2]).unwrap()).abs() < 1e-10);
    // from_parts validates its input.
    let bad = faer::Mat::<f64>::from_fn(2, 2, |r, c| if r == 0 && c == 1 { 1.0 } else { 0.0 });
    assert!(
        lmd::moments::Moments::from_parts(vec!["a".into()], vec![2], 5, vec![0.0; 2], &bad)
            .is_err()
    );
}
