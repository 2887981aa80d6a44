//! Synthetic Laplacian mixtures with known sources, for tests, examples and benchmarks.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, StandardNormal};

use crate::error::{IcaError, Result};
use crate::matrix::Matrix;

/// Independent unit-variance Laplacian sources `S` `[n, m]` mixed by a Gaussian matrix `A`
/// `[D, m]` into observations `X = S Aᵀ` `[n, D]` (column form `x = A s`).
#[derive(Clone, Debug)]
pub struct LaplaceMixture {
    /// The sources, one sample per row.
    pub sources: Matrix,
    /// The mixing matrix, entries i.i.d. standard normal.
    pub mixing: Matrix,
    /// The observations, one sample per row.
    pub observed: Matrix,
}

impl LaplaceMixture {
    /// Draws `n` samples of `sources` Laplacian sources observed in `observed ≥ sources`
    /// dimensions; everything flows from `seed` (ChaCha8).
    pub fn generate(n: usize, sources: usize, observed: usize, seed: u64) -> Result<Self> {
        if sources == 0 || observed < sources || n == 0 {
            return Err(IcaError::Config(format!(
                "need n > 0 and 0 < sources ({sources}) <= observed ({observed})"
            )));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Laplace(0, b) with b = 1/√2 has unit variance: a signed exponential.
        let b = std::f32::consts::FRAC_1_SQRT_2;
        let source_data: Vec<f32> = (0..n * sources)
            .map(|_| {
                let e: f32 = Exp1.sample(&mut rng);
                if rng.random::<bool>() {
                    b * e
                } else {
                    -b * e
                }
            })
            .collect();
        let s = Matrix::new(n, sources, source_data)?;
        let mixing = Matrix::from_fn(observed, sources, |_, _| StandardNormal.sample(&mut rng));
        let observed = s.matmul(&mixing.transpose())?;
        Ok(Self {
            sources: s,
            mixing,
            observed,
        })
    }
}
