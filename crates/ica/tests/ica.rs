//! Known-answer tests of Amari's natural-gradient ICA on Laplacian mixtures, the fixed point,
//! determinism, the device path, and the error cases.

use ica::{
    amari_index, analysis, AmariConfig, AmariIca, Batch, Gemm, IcaError, LaplaceMixture, Matrix,
    Pca, PcaConfig, StopRule,
};

/// PCA-whitens a mixture, runs `config`, returns (Amari index, result).
fn separate(mix: &LaplaceMixture, d: usize, config: AmariConfig) -> (f64, ica::IcaResult) {
    let pca = Pca::fit(&mix.observed, &PcaConfig::new(d)).unwrap();
    let white = pca.transform(&mix.observed).unwrap();
    let fit = AmariIca::new(config).fit(&white).unwrap();
    let w_total = fit.unmixing.matmul(&pca.whitening().transpose()).unwrap();
    (amari_index(&w_total, &mix.mixing).unwrap(), fit)
}

#[test]
fn separates_ten_laplacian_sources() {
    let mix = LaplaceMixture::generate(10_000, 10, 10, 1).unwrap();
    let (ai, fit) = separate(&mix, 10, AmariConfig::default());
    assert!(fit.converged, "{fit:?}");
    assert!(fit.steps < 2_000, "{} steps", fit.steps);
    // Its trajectory: about 100 points of the default cap, ending at the converged step, whose
    // residual met the rule while the first did not.
    let (first, last) = (fit.trajectory[0], *fit.trajectory.last().unwrap());
    assert_eq!((first.step, last.step), (1, fit.steps));
    assert!(fit.trajectory.windows(2).all(|w| w[0].step < w[1].step));
    assert!(
        last.residual < 1e-5 && first.residual > 1e-5,
        "{first:?} {last:?}"
    );
    assert!(ai < 0.05, "Amari index {ai}");
    // Renormalised: ‖W‖_F = √d.
    assert!((fit.unmixing.frobenius_norm() - 10f64.sqrt()).abs() < 1e-4);

    // The recovered sources are unit Laplacians, so the analysis has closed-form answers:
    // P(|y| ≤ 1) = 1 − e^(−√2) ≈ 0.757 and P(|y| > 2.5) = e^(−2.5√2) ≈ 0.0291 per component.
    let pca = Pca::fit(&mix.observed, &PcaConfig::new(10)).unwrap();
    let sources = fit.sources(&pca.transform(&mix.observed).unwrap()).unwrap();
    let within = analysis::fraction_within(sources.as_slice(), 1.0);
    assert!(
        (within - (1.0 - (-2f64.sqrt()).exp())).abs() < 0.01,
        "{within}"
    );
    let per_word = analysis::clusters(&sources, analysis::PAPER_THRESHOLD).unwrap();
    let counts = analysis::cluster_counts(&per_word);
    let tail = (-2.5 * 2f64.sqrt()).exp();
    assert!((counts.mean - 10.0 * tail).abs() < 0.03, "{counts:?}");
    assert!(
        (counts.none - (1.0 - tail).powi(10)).abs() < 0.02,
        "{counts:?}"
    );
}

#[test]
fn separates_128_sources_from_5000_samples() {
    let mix = LaplaceMixture::generate(5_000, 128, 128, 7).unwrap();
    let before = {
        let pca = Pca::fit(&mix.observed, &PcaConfig::new(128)).unwrap();
        amari_index(&pca.whitening().transpose(), &mix.mixing).unwrap()
    };
    // Capped so the test stays short; the default separates well before it converges.
    let config = AmariConfig {
        max_steps: 1_000,
        ..AmariConfig::default()
    };
    let (ai, fit) = separate(&mix, 128, config);
    assert!(fit.steps <= 1_000);
    assert!(ai < 0.1, "Amari index {ai} (whitening alone: {before})");
    assert!(before > 0.2, "whitening alone already separates: {before}");
}

/// Data on which `W = I` is an exact fixed point: all sign flips of the cyclic shifts of
/// (a, b, c) make `C = g(X)Xᵀ/n` exactly diagonal with equal diagonal entries.
fn symmetric_data() -> Matrix {
    let base = [0.3f32, 1.1, 2.0];
    let mut rows = Vec::new();
    for shift in 0..3 {
        for signs in 0..8u32 {
            for k in 0..3 {
                let v = base[(k + shift) % 3];
                rows.push(if signs >> k & 1 == 1 { -v } else { v });
            }
        }
    }
    Matrix::new(24, 3, rows).unwrap()
}

#[test]
fn fixed_point_stays_fixed() {
    let x = symmetric_data();
    for renormalize in [true, false] {
        let config = AmariConfig {
            max_steps: 50,
            renormalize,
            stop: StopRule::StepCap,
            learning_rate: 0.5,
            ..AmariConfig::default()
        };
        let fit = AmariIca::new(config).fit(&x).unwrap();
        assert_eq!(fit.steps, 50);
        assert!(
            fit.residual < 1e-6,
            "off-diagonal residual {}",
            fit.residual
        );
        // Renormalised, W = I exactly stays put; without, W stays diagonal (rows rescale).
        for i in 0..3 {
            for j in 0..3 {
                let w = fit.unmixing.get(i, j);
                if i != j {
                    assert!(w.abs() < 1e-6, "W[{i},{j}] = {w}");
                } else if renormalize {
                    assert!((w - 1.0).abs() < 1e-5, "W[{i},{i}] = {w}");
                }
            }
        }
    }
}

#[test]
fn same_seed_same_unmixing() {
    let mix = LaplaceMixture::generate(3_000, 6, 6, 4).unwrap();
    let white = Pca::fit(&mix.observed, &PcaConfig::new(6))
        .unwrap()
        .transform(&mix.observed)
        .unwrap();
    let run = |seed| {
        let config = AmariConfig {
            batch: Batch::Mini { size: 700, seed },
            max_steps: 60,
            stop: StopRule::StepCap,
            ..AmariConfig::default()
        };
        AmariIca::new(config).fit(&white).unwrap().unmixing
    };
    assert_eq!(run(3).as_slice(), run(3).as_slice());
    assert_ne!(run(3).as_slice(), run(4).as_slice());
    // The synthetic data are seeded too.
    let again = LaplaceMixture::generate(3_000, 6, 6, 4).unwrap();
    assert_eq!(again.observed, mix.observed);
}

#[test]
fn minibatches_separate_too() {
    let mix = LaplaceMixture::generate(8_000, 8, 8, 9).unwrap();
    let config = AmariConfig {
        batch: Batch::Mini {
            size: 2_000,
            seed: 1,
        },
        max_steps: 600,
        stop: StopRule::StepCap,
        ..AmariConfig::default()
    };
    let (ai, _) = separate(&mix, 8, config);
    assert!(ai < 0.1, "Amari index {ai}");
}

#[test]
fn candle_device_path_matches_faer() {
    let mix = LaplaceMixture::generate(2_000, 8, 8, 2).unwrap();
    let white = Pca::fit(&mix.observed, &PcaConfig::new(8))
        .unwrap()
        .transform(&mix.observed)
        .unwrap();
    let config = AmariConfig {
        max_steps: 30,
        stop: StopRule::StepCap,
        ..AmariConfig::default()
    };
    let faer = AmariIca::new(config.clone())
        .with_gemm(Gemm::Faer)
        .fit(&white)
        .unwrap();
    let candle = AmariIca::new(config)
        .with_gemm(Gemm::Candle)
        .with_device(candle_core::Device::Cpu)
        .fit(&white)
        .unwrap();
    for (a, b) in faer
        .unmixing
        .as_slice()
        .iter()
        .zip(candle.unmixing.as_slice())
    {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    assert!((faer.residual - candle.residual).abs() < 1e-4);
}

#[test]
fn paper_preset_runs_to_the_cap_without_stopping() {
    let config = AmariConfig::paper();
    assert_eq!(config.learning_rate, 0.01);
    assert_eq!(config.max_steps, 10_000);
    assert!(config.renormalize);
    let mix = LaplaceMixture::generate(1_000, 4, 4, 3).unwrap();
    let (_, fit) = separate(
        &mix,
        4,
        AmariConfig {
            max_steps: 40,
            ..config
        },
    );
    assert_eq!(fit.steps, 40);
    assert!(!fit.converged);
    // The trajectory: every step of a 40-step run (fewer than 100), ending at the last one.
    let steps: Vec<usize> = fit.trajectory.iter().map(|p| p.step).collect();
    assert_eq!(steps, (1..=40).collect::<Vec<_>>());
    assert_eq!(fit.trajectory.last().unwrap().residual, fit.residual);
}

#[test]
fn weight_change_rule_stops() {
    let mix = LaplaceMixture::generate(4_000, 5, 5, 6).unwrap();
    let config = AmariConfig {
        stop: StopRule::WeightChange { tol: 1e-6 },
        ..AmariConfig::default()
    };
    let (ai, fit) = separate(&mix, 5, config);
    assert!(fit.converged && fit.weight_change < 1e-6, "{fit:?}");
    assert!(ai < 0.05, "{ai}");
}

#[test]
fn errors_are_typed() {
    let mix = LaplaceMixture::generate(500, 4, 4, 8).unwrap();
    let white = Pca::fit(&mix.observed, &PcaConfig::new(4))
        .unwrap()
        .transform(&mix.observed)
        .unwrap();
    let ica = AmariIca::new(AmariConfig::default());
    let short = Matrix::new(3, 4, white.as_slice()[..12].to_vec()).unwrap();
    assert!(matches!(
        ica.fit(&short),
        Err(IcaError::TooFewSamples { samples: 3, dim: 4 })
    ));
    let mut bad = white.clone();
    bad.as_mut_slice()[4 * 9 + 1] = f32::INFINITY;
    assert!(matches!(
        ica.fit(&bad),
        Err(IcaError::NonFinite { row: 9, col: 1, .. })
    ));

    // Without renormalisation a huge step makes W blow up: a typed error, not NaN.
    let wild = AmariConfig {
        learning_rate: 50.0,
        renormalize: false,
        ..AmariConfig::default()
    };
    assert!(matches!(
        AmariIca::new(wild).fit(&white),
        Err(IcaError::Diverged { .. })
    ));

    for config in [
        AmariConfig {
            learning_rate: 0.0,
            ..AmariConfig::default()
        },
        AmariConfig {
            batch: Batch::Mini { size: 501, seed: 0 },
            ..AmariConfig::default()
        },
        AmariConfig {
            stop: StopRule::OffDiagonal { tol: 0.0 },
            ..AmariConfig::default()
        },
        // No step at all would report W = I, the PCA directions, as a fit.
        AmariConfig {
            max_steps: 0,
            ..AmariConfig::default()
        },
    ] {
        assert!(matches!(
            AmariIca::new(config).fit(&white),
            Err(IcaError::Config(_))
        ));
    }
}
