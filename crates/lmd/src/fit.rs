//! The closed-form linear decomposition u ≈ W v + b fitted from moments alone, and its held-out
//! pooled R² scored from another split's moments (paper eqs. 1–3).
//!
//! With C the train covariance, the least-squares fit of target block t on basis block b is
//! W = C_tb (C_bb + λI)⁻¹ and b = μ_t − W μ_b. On a test split with mean μ' and covariance C',
//! the residual e = u − W v − b has per-sample second moment
//! tr(C'_tt) − 2 tr(W C'_bt) + tr(W C'_bb Wᵀ) + ‖μ'_t − W μ'_b − b‖², and
//! R² = 1 − SSR / SST with SST = n' tr(C'_tt) (about the test split's own mean).

use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::{Mat, MatRef, Side};

use crate::error::{LmdError, Result};
use crate::moments::Moments;

/// How the basis covariance is regularised before it is inverted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ridge {
    /// No ridge: the minimum-norm least-squares solution through the pseudo-inverse of the
    /// basis covariance, computed by a symmetric eigendecomposition. Eigenvalues at or below
    /// [`pinv_tolerance`] (dim · ε · λ_max) count as zero; the fit reports the rank it kept.
    None,
    /// λI added to the basis covariance (λ ≥ 0). The reference code uses λ = 1e-6.
    Fixed(f64),
    /// λ chosen so the smallest eigenvalue of λI + Cov equals the given value (the paper's
    /// wording, 1e-6). λ is clamped at 0: a covariance whose smallest eigenvalue already
    /// exceeds the value is left as it is (a negative ridge would only worsen conditioning).
    MinEigen(f64),
}

impl Ridge {
    /// The reference implementation's setting: λ = 1e-6 on the covariance.
    pub const REFERENCE: Ridge = Ridge::Fixed(1e-6);

    /// A short label for tables ("pinv", "ridge 1e-6", "min-eig 1e-6").
    pub fn label(&self) -> String {
        match self {
            Ridge::None => "pinv".into(),
            Ridge::Fixed(l) => format!("ridge {l:e}"),
            Ridge::MinEigen(m) => format!("min-eig {m:e}"),
        }
    }

    fn validate(&self) -> Result<()> {
        match *self {
            Ridge::None => Ok(()),
            Ridge::Fixed(l) if l.is_finite() && l >= 0.0 => Ok(()),
            Ridge::MinEigen(m) if m.is_finite() && m > 0.0 => Ok(()),
            r => Err(LmdError::InvalidArgument(format!(
                "ridge {r:?}: λ must be finite and ≥ 0 (min-eigen target > 0)"
            ))),
        }
    }
}

/// The eigenvalue threshold of [`Ridge::None`]: dim · f64::EPSILON · λ_max (the numerical-rank
/// convention of LAPACK/NumPy), eigenvalues at or below it are treated as zero.
pub fn pinv_tolerance(dim: usize, lambda_max: f64) -> f64 {
    dim as f64 * f64::EPSILON * lambda_max.max(0.0)
}

/// A fitted decomposition û = W v + b of the target models' stacked embedding u on the basis
/// models' stacked embedding v.
#[derive(Clone, Debug)]
pub struct Decomposition {
    /// Target model names (stacked in this order).
    pub target: Vec<String>,
    /// Basis model names (stacked in this order).
    pub basis: Vec<String>,
    /// Coefficients, d_target × d_basis.
    pub w: Mat<f64>,
    /// Intercept, length d_target.
    pub b: Vec<f64>,
    /// The ridge mode asked for.
    pub ridge: Ridge,
    /// The λ actually added to the basis covariance (0 under [`Ridge::None`]).
    pub lambda: f64,
    /// Numerical rank of the (regularised) basis covariance that was inverted.
    pub rank: usize,
}

impl Decomposition {
    /// Prediction û = W v + b for one stacked basis row v.
    pub fn predict(&self, v: &[f64]) -> Result<Vec<f64>> {
        if v.len() != self.w.ncols() {
            return Err(LmdError::WidthMismatch {
                what: "basis row".into(),
                expected: self.w.ncols(),
                got: v.len(),
            });
        }
        Ok((0..self.w.nrows())
            .map(|r| self.b[r] + (0..v.len()).map(|c| self.w[(r, c)] * v[c]).sum::<f64>())
            .collect())
    }
}

/// A held-out score of a decomposition.
#[derive(Clone, Debug)]
pub struct Score {
    /// Pooled R² = 1 − SSR / SST over all target dimensions.
    pub r2: f64,
    /// Σ‖e‖² / n' (per sample).
    pub ssr: f64,
    /// Σ‖u − ū‖² / n' (per sample, about the scored split's mean).
    pub sst: f64,
    /// R² of every target dimension (`None` where that dimension has zero variance).
    pub per_dim: Vec<Option<f64>>,
}

/// A factorisation of a (regularised) symmetric basis covariance that applies its inverse.
pub(crate) struct Solver {
    kind: SolverKind,
    /// Numerical rank kept.
    pub rank: usize,
    /// The λ added.
    pub lambda: f64,
}

enum SolverKind {
    Chol(faer::linalg::solvers::Llt<f64>),
    /// U diag(inv) Uᵀ, inv = 1/(s + λ) or 0 for dropped directions.
    Eigen {
        u: Mat<f64>,
        inv: Vec<f64>,
    },
}

impl Solver {
    /// Factorises `cov` (symmetric, dim × dim) under `ridge`; `what` names it in errors.
    pub fn new(cov: MatRef<'_, f64>, ridge: Ridge, what: &str) -> Result<Self> {
        ridge.validate()?;
        let dim = cov.nrows();
        if let Ridge::Fixed(lambda) = ridge {
            let mut a = cov.to_owned();
            for k in 0..dim {
                a[(k, k)] += lambda;
            }
            if let Ok(llt) = a.llt(Side::Lower) {
                return Ok(Self {
                    kind: SolverKind::Chol(llt),
                    rank: dim,
                    lambda,
                });
            }
            // Not positive definite even with the ridge: report the rank it has.
            let s = eigen(a.as_ref(), what)?.1;
            let tol = pinv_tolerance(dim, s.last().copied().unwrap_or(0.0));
            let rank = s.iter().filter(|&&x| x > tol).count();
            return Err(LmdError::Singular {
                what: format!("{what} with ridge {lambda:e}"),
                rank,
                dim,
            });
        }
        let (u, s) = eigen(cov, what)?;
        let s_max = s.last().copied().unwrap_or(0.0);
        let (inv, lambda): (Vec<f64>, f64) = match ridge {
            Ridge::MinEigen(target) => {
                let lambda = (target - s.first().copied().unwrap_or(0.0)).max(0.0);
                (s.iter().map(|&x| 1.0 / (x + lambda)).collect(), lambda)
            }
            _ => {
                let tol = pinv_tolerance(dim, s_max);
                (
                    s.iter()
                        .map(|&x| if x > tol { 1.0 / x } else { 0.0 })
                        .collect(),
                    0.0,
                )
            }
        };
        let rank = inv.iter().filter(|&&x| x != 0.0).count();
        if rank == 0 {
            return Err(LmdError::Singular {
                what: format!("{what} (zero variance)"),
                rank,
                dim,
            });
        }
        Ok(Self {
            kind: SolverKind::Eigen { u, inv },
            rank,
            lambda,
        })
    }

    /// (Cov + λI)⁻¹ rhs (or the pseudo-inverse applied to rhs).
    pub fn solve(&self, rhs: MatRef<'_, f64>) -> Mat<f64> {
        match &self.kind {
            SolverKind::Chol(llt) => llt.solve(rhs),
            SolverKind::Eigen { u, inv } => {
                let mut t = u.transpose() * rhs;
                for (r, &s) in inv.iter().enumerate() {
                    for c in 0..t.ncols() {
                        t[(r, c)] *= s;
                    }
                }
                u * t
            }
        }
    }

    /// The explicit inverse (or pseudo-inverse).
    #[allow(dead_code)]
    pub fn inverse(&self) -> Mat<f64> {
        match &self.kind {
            SolverKind::Chol(llt) => llt.inverse(),
            SolverKind::Eigen { u, .. } => {
                self.solve(Mat::<f64>::identity(u.nrows(), u.nrows()).as_ref())
            }
        }
    }
}

/// Symmetric eigendecomposition (eigenvalues ascending) with a typed error.
pub(crate) fn eigen(a: MatRef<'_, f64>, what: &str) -> Result<(Mat<f64>, Vec<f64>)> {
    let evd = a
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| LmdError::Singular {
            what: format!("eigendecomposition of {what} did not converge ({e:?})"),
            rank: 0,
            dim: a.nrows(),
        })?;
    let s = evd.S().column_vector().iter().copied().collect();
    Ok((evd.U().to_owned(), s))
}

/// Stacked column indices and names of a model list, checked against the moments.
pub(crate) fn resolve(m: &Moments, names: &[&str], role: &str) -> Result<(Vec<usize>, Vec<usize>)> {
    if names.is_empty() {
        return Err(LmdError::InvalidArgument(format!(
            "empty {role} model list"
        )));
    }
    let models = m.indices(names)?;
    let cols = m.columns(&models);
    Ok((models, cols))
}

/// W (d_t × d_b) and b from the train moments and a factorised basis covariance.
pub(crate) fn solve_w(
    train: &Moments,
    tcols: &[usize],
    bcols: &[usize],
    solver: &Solver,
) -> Result<(Mat<f64>, Vec<f64>)> {
    let c_bt = train.cov_block(bcols, tcols);
    let w = solver.solve(c_bt.as_ref()).transpose().to_owned();
    let mean = train.mean()?;
    let b = tcols
        .iter()
        .enumerate()
        .map(|(r, &t)| {
            mean[t]
                - bcols
                    .iter()
                    .enumerate()
                    .map(|(c, &j)| w[(r, c)] * mean[j])
                    .sum::<f64>()
        })
        .collect();
    Ok((w, b))
}

/// Fits the target models' stacked embedding on the basis models' stacked embedding from the
/// train split's moments (paper eq. 2: W = C_tb (C_bb + λI)⁻¹, b = μ_t − W μ_b).
///
/// Errors: unknown names, an empty list, n ≤ d_basis (too few samples), a non-finite ridge, a
/// basis of zero variance without a ridge (`Ridge::None`, `Fixed(0)`; a positive ridge fits it
/// with W = 0, so R² ≤ 0), or a system that stays singular under a fixed ridge.
pub fn fit(
    train: &Moments,
    target: &[&str],
    basis: &[&str],
    ridge: Ridge,
) -> Result<Decomposition> {
    let (_, tcols) = resolve(train, target, "target")?;
    let (_, bcols) = resolve(train, basis, "basis")?;
    if train.n() <= bcols.len() as u64 {
        return Err(LmdError::TooFewSamples {
            what: format!("fit on basis {basis:?}"),
            n: train.n(),
            dim: bcols.len() + 1,
        });
    }
    let c_bb = train.cov_block(&bcols, &bcols);
    let solver = Solver::new(
        c_bb.as_ref(),
        ridge,
        &format!("basis covariance of {basis:?}"),
    )?;
    let (w, b) = solve_w(train, &tcols, &bcols, &solver)?;
    Ok(Decomposition {
        target: target.iter().map(|s| s.to_string()).collect(),
        basis: basis.iter().map(|s| s.to_string()).collect(),
        w,
        b,
        ridge,
        lambda: solver.lambda,
        rank: solver.rank,
    })
}

/// Per target dimension (SSR/n', SST/n') of the fit û = W v + b on the split `test`.
pub(crate) fn residual_ss(
    test: &Moments,
    tcols: &[usize],
    bcols: &[usize],
    w: MatRef<'_, f64>,
    b: &[f64],
) -> Result<Vec<(f64, f64)>> {
    test.require_samples(1, "held-out scoring")?;
    let mean = test.mean()?;
    let c_bb = test.cov_block(bcols, bcols);
    let c_bt = test.cov_block(bcols, tcols);
    let wc = w * c_bb.as_ref();
    let var = test.variances();
    Ok(tcols
        .iter()
        .enumerate()
        .map(|(r, &t)| {
            let sst = var[t];
            let mut cross = 0.0;
            let mut quad = 0.0;
            let mut pred = b[r];
            for (c, &j) in bcols.iter().enumerate() {
                cross += w[(r, c)] * c_bt[(c, r)];
                quad += wc[(r, c)] * w[(r, c)];
                pred += w[(r, c)] * mean[j];
            }
            let bias = mean[t] - pred;
            // Rounding can take an exact fit a hair below zero.
            ((sst - 2.0 * cross + quad + bias * bias).max(0.0), sst)
        })
        .collect())
}

/// Pools per-dimension (SSR, SST) into a [`Score`]; zero total variance is an error.
pub(crate) fn pool(parts: &[(f64, f64)], what: &str) -> Result<Score> {
    let ssr: f64 = parts.iter().map(|p| p.0).sum();
    let sst: f64 = parts.iter().map(|p| p.1).sum();
    if sst.is_nan() || sst <= 0.0 || !ssr.is_finite() {
        return Err(LmdError::InvalidArgument(format!(
            "{what}: the target has zero (or non-finite) variance on the scored split (SST = {sst})"
        )));
    }
    Ok(Score {
        r2: 1.0 - ssr / sst,
        ssr,
        sst,
        per_dim: parts
            .iter()
            .map(|&(r, t)| (t > 0.0).then(|| 1.0 - r / t))
            .collect(),
    })
}

/// Held-out score of `fit` on the split `test` (pooled R², SSR, SST, per-dimension R²), from
/// moments only. The test moments must hold the fit's models with the same widths.
pub fn score(test: &Moments, fit: &Decomposition) -> Result<Score> {
    let t: Vec<&str> = fit.target.iter().map(String::as_str).collect();
    let b: Vec<&str> = fit.basis.iter().map(String::as_str).collect();
    let (_, tcols) = resolve(test, &t, "target")?;
    let (_, bcols) = resolve(test, &b, "basis")?;
    if tcols.len() != fit.w.nrows() || bcols.len() != fit.w.ncols() {
        return Err(LmdError::WidthMismatch {
            what: "scored split's widths vs the fit".into(),
            expected: fit.w.nrows() + fit.w.ncols(),
            got: tcols.len() + bcols.len(),
        });
    }
    let parts = residual_ss(test, &tcols, &bcols, fit.w.as_ref(), &fit.b)?;
    pool(
        &parts,
        &format!("R² of {:?} on {:?}", fit.target, fit.basis),
    )
}

/// Held-out pooled R² = 1 − SSR/SST of `fit` on the split `test` (paper eq. 3).
pub fn r2(test: &Moments, fit: &Decomposition) -> Result<f64> {
    Ok(score(test, fit)?.r2)
}
