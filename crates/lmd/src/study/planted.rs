//! The planted LMD check: the closed-form analysis of [`crate::study`] run on synthetic
//! embeddings with a planted linear structure whose population group R² is known in closed
//! form, so the estimate can be compared with the truth.

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::analysis::analyze;
use crate::fit::Ridge;
use crate::moments::Moments;
use crate::synthetic::{Planted, PlantedSpec};
use crate::tables::write_analysis;
use crate::Result;

/// What [`planted_check`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlantedOutcome {
    /// Held-out group R² of each planted model on all the others, estimated from moments.
    pub group_r2: Vec<f64>,
    /// The planted (population) group R² of each model, in closed form.
    pub planted: Vec<f64>,
    /// Group ρ of the estimate.
    pub group_rho: f64,
    /// Largest |estimated − planted| group R² (includes the finite-sample bias, about
    /// (1 − R²)(p + 2)/n_train for p basis dimensions).
    pub max_error: f64,
    /// The analysis' tables and heatmaps.
    pub files: Vec<PathBuf>,
}

/// The planted LMD check: four synthetic "models" sharing a latent ([`PlantedSpec::default`]),
/// `n_train` and `n_test` rows drawn with `seed` and streamed into moments, analysed with the
/// reference ridge, the group R² compared with the planted truth, the analysis written to `out`.
pub fn planted_check(
    seed: u64,
    n_train: usize,
    n_test: usize,
    out: &Path,
) -> Result<PlantedOutcome> {
    let planted = Planted::new(PlantedSpec::default())?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut split = |n: usize| -> Result<Moments> {
        let mut m = Moments::new(planted.names(), planted.widths())?;
        m.update_stacked(&planted.sample(n, &mut rng))?;
        Ok(m)
    };
    let (train, test) = (split(n_train)?, split(n_test)?);
    let analysis = analyze(&train, &test, Ridge::REFERENCE)?;
    let truth = planted.group_r2()?;
    let max_error = analysis
        .group
        .r2
        .iter()
        .zip(&truth)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let files = write_analysis(out, &analysis)?;
    Ok(PlantedOutcome {
        group_r2: analysis.group.r2.clone(),
        planted: truth,
        group_rho: analysis.group.rho(),
        max_error,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_check_recovers_the_planted_group_r2() {
        let dir = tempfile::tempdir().unwrap();
        let o = planted_check(0, 4000, 1000, dir.path()).unwrap();
        assert_eq!(o.group_r2.len(), 4);
        // Each target (16 dims) is fit on p = 48 basis dims from n = 4000 rows: the expected
        // held-out R² sits (1 − R²)(n+1)(n−2)/(n(n−p−2)) − (1 − R²) ≈ (1 − R²)·0.0126 below the
        // population value (≤ 0.01 for R² ≥ 0.2), and 1000 test rows × 16 dims add a sampling
        // error of about (1 − R²)·√(2/16000) ≈ 0.01 (one sd). 0.03 covers bias + 2 sd.
        assert!(o.max_error < 0.03, "{o:?}");
        let rho = o.group_r2.iter().sum::<f64>() / 4.0;
        assert!((o.group_rho - rho).abs() < 1e-12);
        assert!(o.files.iter().all(|f| f.is_file()), "{:?}", o.files);
    }
}
