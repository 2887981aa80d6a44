//! Synthetic embeddings with a planted linear structure whose population R² is known in closed
//! form: model i emits u_i = A_i s + σ_i ε_i + c_i with a shared latent s ~ N(0, I_k),
//! independent noise ε_i ~ N(0, I_{d_i}), loadings A_i (d_i × k) and an offset c_i.
//!
//! For a basis B of models, Woodbury's identity gives the population least-squares fit in the
//! latent space: with G = Σ_{j∈B} A_jᵀA_j / σ_j², the explained variance of u_i is
//! tr(A_iᵀA_i G (I + G)⁻¹) and R² = that / (‖A_i‖²_F + d_i σ_i²). This closed form never touches
//! a sample, so it checks the moment-based fits independently.

use faer::linalg::solvers::Solve;
use faer::{Mat, Side};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use crate::error::{LmdError, Result};
use crate::moments::Moments;
use crate::pair_matrix::PairMatrix;

/// The shape of a planted structure.
#[derive(Clone, Debug)]
pub struct PlantedSpec {
    /// Number of models M.
    pub models: usize,
    /// Embedding width of every model.
    pub dim: usize,
    /// Latent width k shared by all models.
    pub latent: usize,
    /// Noise standard deviations from the first model to the last (interpolated linearly).
    pub noise: (f64, f64),
    /// Size of the common offset c_i (exercises the shift against cancellation).
    pub offset: f64,
    /// Seed of the loadings and offsets.
    pub seed: u64,
}

/// The expected held-out R² of an OLS fit with intercept on `p` Gaussian regressors from `n`
/// training rows, when the population R² is `population`: 1 − (1 − R²)(n + 1)(n − 2) / (n (n − p
/// − 2)) (the finite-sample shrinkage a planted check must expect; NaN when n ≤ p + 2).
pub fn expected_held_out_r2(population: f64, n: usize, p: usize) -> f64 {
    let (n, p) = (n as f64, p as f64);
    if n <= p + 2.0 {
        return f64::NAN;
    }
    1.0 - (1.0 - population) * (n + 1.0) * (n - 2.0) / (n * (n - p - 2.0))
}

impl Default for PlantedSpec {
    fn default() -> Self {
        Self {
            models: 4,
            dim: 16,
            latent: 12,
            noise: (0.3, 1.0),
            offset: 10.0,
            seed: 7,
        }
    }
}

/// A planted structure: loadings, noise levels and offsets, able to sample rows and to give
/// the population R² of any target on any basis.
#[derive(Clone, Debug)]
pub struct Planted {
    /// The spec it was built from.
    pub spec: PlantedSpec,
    /// A_i, d × k, one per model.
    pub loadings: Vec<Mat<f64>>,
    /// σ_i.
    pub noise_sd: Vec<f64>,
    /// c_i.
    pub offsets: Vec<Vec<f64>>,
}

impl Planted {
    /// Draws loadings N(0, 1/k) and offsets from the spec's seed.
    pub fn new(spec: PlantedSpec) -> Result<Self> {
        if spec.models == 0
            || spec.dim == 0
            || spec.latent == 0
            || spec.noise.0.is_nan()
            || spec.noise.1.is_nan()
            || spec.noise.0 <= 0.0
            || spec.noise.1 <= 0.0
        {
            return Err(LmdError::InvalidArgument(format!(
                "planted spec needs models, dim, latent > 0 and positive noise: {spec:?}"
            )));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let scale = 1.0 / (spec.latent as f64).sqrt();
        let loadings = (0..spec.models)
            .map(|_| {
                Mat::from_fn(spec.dim, spec.latent, |_, _| {
                    scale * rng.sample::<f64, _>(StandardNormal)
                })
            })
            .collect();
        let noise_sd = (0..spec.models)
            .map(|i| {
                let t = if spec.models > 1 {
                    i as f64 / (spec.models - 1) as f64
                } else {
                    0.0
                };
                spec.noise.0 + t * (spec.noise.1 - spec.noise.0)
            })
            .collect();
        let offsets = (0..spec.models)
            .map(|_| {
                (0..spec.dim)
                    .map(|_| spec.offset * (1.0 + rng.random::<f64>()))
                    .collect()
            })
            .collect();
        Ok(Self {
            spec,
            loadings,
            noise_sd,
            offsets,
        })
    }

    /// Model names "m0", "m1", ….
    pub fn names(&self) -> Vec<String> {
        (0..self.spec.models).map(|i| format!("m{i}")).collect()
    }

    /// Widths of all models.
    pub fn widths(&self) -> Vec<usize> {
        vec![self.spec.dim; self.spec.models]
    }

    /// `n` rows, row-major [n, D] with the models side by side, drawn from `rng`.
    pub fn sample(&self, n: usize, rng: &mut impl Rng) -> Vec<f32> {
        let (m, d, k) = (self.spec.models, self.spec.dim, self.spec.latent);
        let s = Mat::<f64>::from_fn(n, k, |_, _| rng.sample(StandardNormal));
        let dd = m * d;
        let mut out = vec![0.0f32; n * dd];
        for i in 0..m {
            let clean = &s * self.loadings[i].transpose();
            for r in 0..n {
                for c in 0..d {
                    let e: f64 = rng.sample(StandardNormal);
                    out[r * dd + i * d + c] =
                        (clean[(r, c)] + self.noise_sd[i] * e + self.offsets[i][c]) as f32;
                }
            }
        }
        out
    }

    /// Population R² of model `target` on the stacked basis `basis` (model indices).
    pub fn r2(&self, target: usize, basis: &[usize]) -> Result<f64> {
        let k = self.spec.latent;
        let mut g = Mat::<f64>::zeros(k, k);
        for &j in basis {
            let a = &self.loadings[j];
            let ata = a.transpose() * a;
            let w = 1.0 / (self.noise_sd[j] * self.noise_sd[j]);
            g = Mat::from_fn(k, k, |r, c| g[(r, c)] + w * ata[(r, c)]);
        }
        let mut ig = g.clone();
        for t in 0..k {
            ig[(t, t)] += 1.0;
        }
        // G (I + G)⁻¹ = ((I + G)⁻¹ G)ᵀ; both symmetric-PD-friendly.
        let proj = ig
            .llt(Side::Lower)
            .map_err(|_| LmdError::Singular {
                what: "I + G of the planted structure".into(),
                rank: 0,
                dim: k,
            })?
            .solve(g.as_ref());
        let ai = &self.loadings[target];
        let ata = ai.transpose() * ai;
        let explained: f64 = (0..k)
            .flat_map(|r| (0..k).map(move |c| (r, c)))
            .map(|(r, c)| ata[(r, c)] * proj[(c, r)])
            .sum();
        let total = ata.diagonal().column_vector().iter().sum::<f64>()
            + self.spec.dim as f64 * self.noise_sd[target] * self.noise_sd[target];
        Ok(explained / total)
    }

    /// The population moments (mean c, covariance A Aᵀ + σ²I per block pair) as if from `n`
    /// samples: exact inputs for the analysis without sampling.
    pub fn population_moments(&self, n: u64) -> Result<Moments> {
        let (m, d) = (self.spec.models, self.spec.dim);
        let stacked = Mat::from_fn(m * d, self.spec.latent, |r, c| {
            self.loadings[r / d][(r % d, c)]
        });
        let mut cov = &stacked * stacked.transpose();
        for r in 0..m * d {
            cov[(r, r)] += self.noise_sd[r / d] * self.noise_sd[r / d];
        }
        // Symmetrise exactly (the product is symmetric up to rounding).
        let cov = Mat::from_fn(
            m * d,
            m * d,
            |r, c| if r >= c { cov[(r, c)] } else { cov[(c, r)] },
        );
        let mean = self.offsets.iter().flatten().copied().collect();
        Moments::from_parts(self.names(), self.widths(), n, mean, &cov)
    }

    /// Population pairwise R² (rows = target, columns = basis; diagonal 1).
    pub fn pairwise_r2(&self) -> Result<PairMatrix> {
        let m = self.spec.models;
        Ok(PairMatrix {
            names: self.names(),
            values: (0..m * m)
                .map(|x| {
                    if x / m == x % m {
                        Ok(1.0)
                    } else {
                        self.r2(x / m, &[x % m])
                    }
                })
                .collect::<Result<_>>()?,
        })
    }

    /// Population group R² of every model on all the others.
    pub fn group_r2(&self) -> Result<Vec<f64>> {
        let m = self.spec.models;
        (0..m)
            .map(|i| self.r2(i, &(0..m).filter(|&j| j != i).collect::<Vec<_>>()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_held_out_r2_shrinks_with_p_over_n_and_vanishes_at_large_n() {
        // A perfect fit stays perfect; no signal goes negative by about p/n:
        // 1 − 1001 · 998 / (1000 · 950) = −0.051577.
        assert_eq!(expected_held_out_r2(1.0, 100, 10), 1.0);
        let none = expected_held_out_r2(0.0, 1000, 48);
        assert!((none + 0.051577).abs() < 1e-6, "{none}");
        // Large n: the population value.
        assert!((expected_held_out_r2(0.6, 10_000_000, 48) - 0.6).abs() < 1e-5);
        assert!(expected_held_out_r2(0.6, 50, 48).is_nan());
    }
}
