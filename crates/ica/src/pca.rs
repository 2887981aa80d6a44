//! PCA by the eigen-decomposition of the second moment, with whitening (paper §5.3).
//!
//! For data `X` `[n, D]` (one word vector per row) the second moment is
//! `M = (X − μ)ᵀ(X − μ) / n` (μ = 0 when not centring). With `M = V S Vᵀ` and the `d` largest
//! eigenvalues `S_d`, the whitened data are `P = (X − μ) V_d S_d^(−1/2)`, whose second moment
//! is the identity. (The paper prints `sqrt(S_d)`; the authors' code whitens.)

use faer::{Mat, Side};
use serde::{Deserialize, Serialize};

use crate::error::{IcaError, Result};
use crate::matrix::Matrix;

/// How to fit a [`Pca`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PcaConfig {
    /// Number of principal directions kept (`d`; the paper uses 128).
    pub dim: usize,
    /// Subtract the mean before the second moment (`true`), or use the raw second moment.
    pub centre: bool,
    /// A kept direction whose variance is at most this fraction of the largest is an error
    /// ([`IcaError::ZeroVariance`]): whitening would amplify noise without bound.
    pub min_relative_variance: f64,
}

impl PcaConfig {
    /// `dim` directions, centred, zero-variance tolerance `1e-10`.
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            centre: true,
            min_relative_variance: 1e-10,
        }
    }
}

/// A fitted PCA: mean, top-`d` eigenvectors and eigenvalues of the second moment, and the
/// whitening matrix `K = V_d S_d^(−1/2)` (`[D, d]`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pca {
    mean: Vec<f64>,
    components: Matrix,
    variances: Vec<f64>,
    total_variance: f64,
    whitening: Matrix,
}

/// Rows converted to f64 per block when accumulating the second moment (bounds memory).
const BLOCK_ROWS: usize = 2048;

impl Pca {
    /// Fits on `x` `[n, D]`.
    ///
    /// Errors: `dim == 0` or `dim > D` ([`IcaError::Config`]), `n < dim`
    /// ([`IcaError::TooFewSamples`]), NaN/Inf ([`IcaError::NonFinite`]), a kept direction with
    /// (numerically) zero variance ([`IcaError::ZeroVariance`]).
    pub fn fit(x: &Matrix, config: &PcaConfig) -> Result<Self> {
        let (n, big_d) = x.shape();
        let d = config.dim;
        if d == 0 || d > big_d {
            return Err(IcaError::Config(format!(
                "PCA dimension {d} must be in 1..={big_d} (the data width)"
            )));
        }
        if n < d {
            return Err(IcaError::TooFewSamples { samples: n, dim: d });
        }
        x.check_finite()?;

        let mean = if config.centre {
            column_means(x)
        } else {
            vec![0.0; big_d]
        };
        let moment = second_moment(x, &mean);
        let eig = moment
            .self_adjoint_eigen(Side::Lower)
            .map_err(|e| IcaError::Eigen(format!("{e:?}")))?;
        let (u, s) = (eig.U(), eig.S().column_vector());
        let total_variance: f64 = (0..big_d).map(|i| moment[(i, i)]).sum();

        // faer sorts eigenvalues ascending: the kept directions are the last `d`, reversed.
        let largest = s[big_d - 1];
        let mut variances = Vec::with_capacity(d);
        let mut components = Matrix::zeros(big_d, d);
        let mut whitening = Matrix::zeros(big_d, d);
        for k in 0..d {
            let src = big_d - 1 - k;
            let variance = s[src];
            if variance.is_nan() || variance <= config.min_relative_variance * largest {
                return Err(IcaError::ZeroVariance {
                    index: k,
                    variance,
                    largest,
                    dim: d,
                });
            }
            // Deterministic sign: the entry of largest magnitude is positive.
            let pivot = (0..big_d)
                .max_by(|&a, &b| u[(a, src)].abs().total_cmp(&u[(b, src)].abs()))
                .unwrap_or(0);
            let sign = if u[(pivot, src)] < 0.0 { -1.0 } else { 1.0 };
            let inv_sqrt = 1.0 / variance.sqrt();
            for r in 0..big_d {
                let v = sign * u[(r, src)];
                components.as_mut_slice()[r * d + k] = v as f32;
                whitening.as_mut_slice()[r * d + k] = (v * inv_sqrt) as f32;
            }
            variances.push(variance);
        }
        Ok(Self {
            mean,
            components,
            variances,
            total_variance,
            whitening,
        })
    }

    /// Whitened projection `(x − μ) K` of new data `x` `[m, D]` -> `[m, d]`.
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        if x.cols() != self.mean.len() {
            return Err(IcaError::Shape(format!(
                "PCA was fitted on {} columns, got {}",
                self.mean.len(),
                x.cols()
            )));
        }
        x.check_finite()?;
        let centred = if self.mean.iter().any(|&m| m != 0.0) {
            let mean: Vec<f32> = self.mean.iter().map(|&m| m as f32).collect();
            let mut c = x.clone();
            for row in c.as_mut_slice().chunks_exact_mut(mean.len()) {
                for (v, m) in row.iter_mut().zip(&mean) {
                    *v -= m;
                }
            }
            c
        } else {
            x.clone()
        };
        centred.matmul(&self.whitening)
    }

    /// Output width `d`.
    pub fn dim(&self) -> usize {
        self.variances.len()
    }

    /// The mean that was subtracted (zeros when not centring).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Unit eigenvectors `V_d` `[D, d]`, largest variance first.
    pub fn components(&self) -> &Matrix {
        &self.components
    }

    /// Eigenvalues `S_d` (variances along the kept directions), largest first.
    pub fn variances(&self) -> &[f64] {
        &self.variances
    }

    /// Fraction of the total variance (trace of the second moment) each kept direction explains.
    pub fn explained_variance_ratio(&self) -> Vec<f64> {
        self.variances
            .iter()
            .map(|v| v / self.total_variance)
            .collect()
    }

    /// Whitening matrix `K = V_d S_d^(−1/2)` `[D, d]`: whitened = `(x − μ) K`.
    pub fn whitening(&self) -> &Matrix {
        &self.whitening
    }
}

fn column_means(x: &Matrix) -> Vec<f64> {
    let mut mean = vec![0.0f64; x.cols()];
    for r in 0..x.rows() {
        for (m, &v) in mean.iter_mut().zip(x.row(r)) {
            *m += f64::from(v);
        }
    }
    let n = x.rows() as f64;
    mean.iter_mut().for_each(|m| *m /= n);
    mean
}

/// `(X − μ)ᵀ(X − μ) / n` in f64, accumulated over row blocks with faer.
fn second_moment(x: &Matrix, mean: &[f64]) -> Mat<f64> {
    let (n, big_d) = x.shape();
    let mut moment = Mat::<f64>::zeros(big_d, big_d);
    let mut start = 0;
    while start < n {
        let rows = BLOCK_ROWS.min(n - start);
        let block =
            Mat::<f64>::from_fn(rows, big_d, |r, c| f64::from(x.get(start + r, c)) - mean[c]);
        faer::linalg::matmul::matmul(
            moment.as_mut(),
            faer::Accum::Add,
            block.transpose(),
            block.as_ref(),
            1.0 / n as f64,
            faer::Par::rayon(0),
        );
        start += rows;
    }
    moment
}
