//! Parity with the reference implementation (`haozhg/lmd`, `lmd/cli.py`,
//! `LanguageModelDecomposition`) on a committed fixture: 4 planted models × width 8, 800 train
//! and 200 test rows, float32, as `torch.save` dicts (`train.pt`, `test.pt`), read through
//! `lmd::external`. The reference's numbers were computed by
//! `scripts/lmd_reference_parity.py` (torch 2.15 CPU) once in float32 (the embeddings' dtype:
//! what the reference does) and once in float64; this test needs no torch.
//!
//! The reference normalises its covariances by n − 1 (`torch.cov`) and adds α = 1e-6 to that;
//! ours divide by n, so the same fit is `Ridge::Fixed(α (n−1)/n)`. With it, our f64 analysis
//! equals the float64 reference to rounding, and the float32 reference differs from both by
//! its own float32 rounding only.

use std::path::{Path, PathBuf};

use lmd::analysis::{analyze, Analysis};
use lmd::external::{read_train_test, ReadOptions, TrainTest};
use lmd::fit::Ridge;
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference_parity")
}

struct Diffs {
    pairwise_r2: f64,
    pairwise_rho: f64,
    group_r2: f64,
    group_rho: f64,
}

fn diffs(a: &Analysis, reference: &Value) -> Diffs {
    let names: Vec<String> = serde_json::from_value(reference["models"].clone()).unwrap();
    assert_eq!(names, a.group.names, "model order");
    let pair: Vec<Vec<f64>> = serde_json::from_value(reference["pairwise_r2"].clone()).unwrap();
    let rho: Vec<Vec<f64>> = serde_json::from_value(reference["pairwise_rho"].clone()).unwrap();
    let group: Vec<f64> = serde_json::from_value(reference["group_r2"].clone()).unwrap();
    let mut d = Diffs {
        pairwise_r2: 0.0,
        pairwise_rho: 0.0,
        group_r2: 0.0,
        group_rho: (a.group.rho() - reference["group_rho"].as_f64().unwrap()).abs(),
    };
    for i in 0..names.len() {
        d.group_r2 = d.group_r2.max((a.group.r2[i] - group[i]).abs());
        for j in 0..names.len() {
            if i != j {
                d.pairwise_r2 = d
                    .pairwise_r2
                    .max((a.pairwise_r2.get(i, j) - pair[i][j]).abs());
                d.pairwise_rho = d
                    .pairwise_rho
                    .max((a.pairwise_rho.get(i, j) - rho[i][j]).abs());
            }
        }
    }
    d
}

fn load(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join(name)).unwrap()).unwrap()
}

fn ours(unbiased: bool) -> Analysis {
    let TrainTest { train, test, .. } =
        read_train_test(fixture(), &ReadOptions::default()).unwrap();
    assert_eq!((train.n(), test.n()), (800, 200));
    let alpha = 1e-6;
    let n = train.n() as f64;
    let lambda = if unbiased {
        alpha * (n - 1.0) / n
    } else {
        alpha
    };
    analyze(&train, &test, Ridge::Fixed(lambda)).unwrap()
}

/// Our tables against the reference's JSON of `dtype`: every |Δ| below `tol`.
fn check_against_reference(file: &str, dtype: &str, tol: f64) {
    let r = load(file);
    assert_eq!(r["dtype"], dtype);
    let d = diffs(&ours(true), &r);
    eprintln!(
        "vs {dtype} reference: pairwise R² {:.2e}, pairwise ρ {:.2e}, group R² {:.2e}, group ρ {:.2e}",
        d.pairwise_r2, d.pairwise_rho, d.group_r2, d.group_rho
    );
    for (what, v) in [
        ("pairwise R²", d.pairwise_r2),
        ("pairwise ρ", d.pairwise_rho),
        ("group R²", d.group_r2),
        ("group ρ", d.group_rho),
    ] {
        assert!(v < tol, "{what}: {v:e}");
    }
}

#[test]
fn equals_the_float64_reference_to_rounding() {
    check_against_reference("reference_float64.json", "float64", 1e-10);
}

#[test]
fn equals_the_float32_reference_to_its_rounding() {
    // The bar is 1e-4; the observed float32 rounding of the reference is far below.
    check_against_reference("reference_float32.json", "float32", 1e-6);
}

#[test]
fn n_versus_n_minus_1_normalisation_is_below_the_float32_rounding() {
    // α applied to the covariance divided by n instead of n − 1: λ differs by α/n = 1.25e-9,
    // R² by 1.4e-10 here (observed), a thousandth of the float32 rounding above.
    let (a, b) = (ours(true), ours(false));
    let mut max = 0f64;
    for i in 0..4 {
        max = max.max((a.group.r2[i] - b.group.r2[i]).abs());
        for j in 0..4 {
            max = max.max((a.pairwise_r2.get(i, j) - b.pairwise_r2.get(i, j)).abs());
        }
    }
    eprintln!("ridge α vs α(n−1)/n: max |ΔR²| {max:.2e}");
    assert!(max < 1e-8, "{max:e}");
}
