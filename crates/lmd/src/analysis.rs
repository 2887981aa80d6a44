//! The paper's quantities from two splits' moments: pairwise R² (rows = target, columns =
//! basis), symmetric pairwise ρ, group R²(u_i, {u_-i}) for every model and group ρ, any chosen
//! basis subset, and the whole bundle with linear CKA beside it ([`analyze`]).
//!
//! Group fits use the block structure of the joint covariance: with P = (C + λI)⁻¹ from ONE
//! Cholesky factorisation, the regression of block i on all the others is
//! W_i = −P_ii⁻¹ P_i,−i (the precision-matrix identity; it holds for the ridge too, because λI
//! only touches diagonal blocks). Where the ridge must be computed for each basis block alone
//! ([`Ridge::MinEigen`]) or the joint covariance is numerically singular under [`Ridge::None`],
//! every group fit is done directly instead ([`group_r2_direct`]).

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::{Accum, Mat, Side};

use crate::cka;
use crate::error::{LmdError, Result};
use crate::fit::{self, pinv_tolerance, pool, residual_ss, solve_w, Ridge, Solver};
use crate::moments::Moments;

/// A square matrix over models, row-major; for R², rows = target and columns = basis.
#[derive(Clone, Debug, PartialEq)]
pub struct PairMatrix {
    /// Model names (row and column order).
    pub names: Vec<String>,
    /// Values, row-major, names.len()².
    pub values: Vec<f64>,
}

impl PairMatrix {
    /// Number of models.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when there are no models.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Value at (row, column).
    pub fn get(&self, row: usize, col: usize) -> f64 {
        self.values[row * self.len() + col]
    }

    /// (M + Mᵀ) / 2: pairwise ρ(u, v) = (R²(u, v) + R²(v, u)) / 2 when self holds pairwise R².
    pub fn symmetrized(&self) -> PairMatrix {
        let m = self.len();
        PairMatrix {
            names: self.names.clone(),
            values: (0..m * m)
                .map(|k| 0.5 * (self.values[k] + self.values[(k % m) * m + k / m]))
                .collect(),
        }
    }
}

/// How the group fits were computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupMethod {
    /// One Cholesky factorisation of the joint covariance, W_i = −P_ii⁻¹ P_i,−i.
    Precision,
    /// One fit per model on the basis of all others.
    Direct,
}

/// Group R²(u_i, {u_-i}) of every model and how it was computed.
#[derive(Clone, Debug)]
pub struct GroupR2 {
    /// Model names.
    pub names: Vec<String>,
    /// Held-out pooled R² of each model on all the others.
    pub r2: Vec<f64>,
    /// The ridge used.
    pub ridge: Ridge,
    /// The path taken.
    pub method: GroupMethod,
}

impl GroupR2 {
    /// Group ρ: the mean over targets of R²(u_i, {u_-i}).
    pub fn rho(&self) -> f64 {
        self.r2.iter().sum::<f64>() / self.r2.len().max(1) as f64
    }
}

/// Everything of the paper for one train/test pair of splits and one ridge.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// The ridge used for every fit.
    pub ridge: Ridge,
    /// Pairwise held-out R² (rows = target, columns = basis; diagonal 1 by definition).
    pub pairwise_r2: PairMatrix,
    /// Pairwise ρ = symmetrised pairwise R².
    pub pairwise_rho: PairMatrix,
    /// Group R² of every model on all others, with group ρ.
    pub group: GroupR2,
    /// Linear CKA of every pair on the test split.
    pub cka: PairMatrix,
}

/// Checks that two splits hold the same models with the same widths.
pub fn check_compatible(train: &Moments, test: &Moments) -> Result<()> {
    if train.names() != test.names() || train.widths() != test.widths() {
        return Err(LmdError::WidthMismatch {
            what: format!("splits {:?} vs {:?}", train.names(), test.names()),
            expected: train.dim(),
            got: test.dim(),
        });
    }
    Ok(())
}

/// Held-out R² of `target` on any chosen basis subset (fit on `train`, scored on `test`).
pub fn subset_r2(
    train: &Moments,
    test: &Moments,
    target: &str,
    basis: &[&str],
    ridge: Ridge,
) -> Result<f64> {
    let d = fit::fit(train, &[target], basis, ridge)?;
    fit::r2(test, &d)
}

/// Pairwise held-out R² of every ordered pair (rows = target, columns = basis). Each basis
/// covariance is factorised once and serves all targets; the diagonal is 1 by definition.
pub fn pairwise_r2(train: &Moments, test: &Moments, ridge: Ridge) -> Result<PairMatrix> {
    check_compatible(train, test)?;
    let m = train.names().len();
    let mut values = vec![1.0; m * m];
    for j in 0..m {
        let bcols: Vec<usize> = train.range(j).collect();
        let targets: Vec<usize> = (0..m).filter(|&i| i != j).collect();
        if targets.is_empty() {
            continue;
        }
        if train.n() <= bcols.len() as u64 {
            return Err(LmdError::TooFewSamples {
                what: format!("pairwise fits on basis {}", train.names()[j]),
                n: train.n(),
                dim: bcols.len() + 1,
            });
        }
        let tcols = train.columns(&targets);
        let c_bb = train.cov_block(&bcols, &bcols);
        let solver = Solver::new(
            c_bb.as_ref(),
            ridge,
            &format!("covariance of {}", train.names()[j]),
        )?;
        let (w, b) = solve_w(train, &tcols, &bcols, &solver)?;
        let parts = residual_ss(test, &tcols, &bcols, w.as_ref(), &b)?;
        let mut start = 0;
        for &i in &targets {
            let wi = train.widths()[i];
            let what = format!("R² of {} on {}", train.names()[i], train.names()[j]);
            values[i * m + j] = pool(&parts[start..start + wi], &what)?.r2;
            start += wi;
        }
    }
    Ok(PairMatrix {
        names: train.names().to_vec(),
        values,
    })
}

/// Group R²(u_i, {u_-i}) for every model: through the precision identity when the ridge allows
/// it (and, under [`Ridge::None`], the joint covariance is numerically full rank), otherwise
/// directly ([`group_r2_direct`]).
pub fn group_r2(train: &Moments, test: &Moments, ridge: Ridge) -> Result<GroupR2> {
    check_compatible(train, test)?;
    let lambda = match ridge {
        Ridge::None => Some(0.0),
        Ridge::Fixed(l) => Some(l),
        Ridge::MinEigen(_) => None,
    };
    if let Some(lambda) = lambda {
        if let Some(r2) = group_precision(train, test, lambda, ridge == Ridge::None)? {
            return Ok(GroupR2 {
                names: train.names().to_vec(),
                r2,
                ridge,
                method: GroupMethod::Precision,
            });
        }
    }
    group_r2_direct(train, test, ridge)
}

/// Group R² of every model by one direct fit per model on all the others (the fallback; also
/// the oracle the precision path is tested against).
pub fn group_r2_direct(train: &Moments, test: &Moments, ridge: Ridge) -> Result<GroupR2> {
    check_compatible(train, test)?;
    let names: Vec<&str> = train.names().iter().map(String::as_str).collect();
    if names.len() < 2 {
        return Err(LmdError::InvalidArgument(
            "group fits need at least two models".into(),
        ));
    }
    let r2 = (0..names.len())
        .map(|i| {
            let basis: Vec<&str> = names
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != i)
                .map(|(_, n)| *n)
                .collect();
            subset_r2(train, test, names[i], &basis, ridge)
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(GroupR2 {
        names: train.names().to_vec(),
        r2,
        ridge,
        method: GroupMethod::Direct,
    })
}

/// The precision path; `None` when it cannot stand in for the direct fits.
fn group_precision(
    train: &Moments,
    test: &Moments,
    lambda: f64,
    check_rank: bool,
) -> Result<Option<Vec<f64>>> {
    let m = train.names().len();
    let d = train.dim();
    if m < 2 {
        return Err(LmdError::InvalidArgument(
            "group fits need at least two models".into(),
        ));
    }
    if train.n() <= d as u64 {
        // Each basis has fewer columns than the joint: let the direct fits judge n against them.
        return Ok(None);
    }
    let mut c = train.covariance()?;
    for k in 0..d {
        c[(k, k)] += lambda;
    }
    let Ok(llt) = c.llt(Side::Lower) else {
        return Ok(None);
    };
    let mut p = llt.inverse();
    drop(llt);
    if check_rank && !full_rank(&c, &p) {
        return Ok(None);
    }
    drop(c);
    // Rows of block i become A_i = P_ii⁻¹ P_i,: so that e_i = A_i (z − μ_train).
    for i in 0..m {
        let r = train.range(i);
        let pii = p
            .as_ref()
            .submatrix(r.start, r.start, r.len(), r.len())
            .to_owned();
        let Ok(f) = pii.llt(Side::Lower) else {
            return Ok(None);
        };
        let rows = p.as_ref().subrows(r.start, r.len()).to_owned();
        let a = f.solve(rows.as_ref());
        p.as_mut().subrows_mut(r.start, r.len()).copy_from(&a);
    }
    let a = p;
    // S' = second moment of the test split about the train mean.
    let mean_tr = train.mean()?;
    let mean_te = test.mean()?;
    let mut s = test.covariance()?;
    let delta: Vec<f64> = mean_te.iter().zip(&mean_tr).map(|(a, b)| a - b).collect();
    for cc in 0..d {
        for rr in 0..d {
            s[(rr, cc)] += delta[rr] * delta[cc];
        }
    }
    // SSR_i / n' = tr(A_i S' A_iᵀ). With S' = L_s L_sᵀ this is ‖A_i L_s‖²_F, a product with a
    // triangular factor (half the flops of A_i S'); a singular S' takes the plain product.
    let sst: Vec<f64> = (0..d).map(|k| s[(k, k)] - delta[k] * delta[k]).collect();
    // With n' ≤ D the test second moment is singular for sure: skip the doomed factorisation.
    let factor = if test.n() > d as u64 {
        s.llt(Side::Lower).ok()
    } else {
        None
    };
    if factor.is_some() {
        drop(s);
        s = Mat::zeros(0, 0);
    }
    let mut r2 = Vec::with_capacity(m);
    for i in 0..m {
        let r = train.range(i);
        let ai = a.as_ref().subrows(r.start, r.len());
        let ssr_rows: Vec<f64> = match &factor {
            Some(f) => {
                let mut ri = Mat::<f64>::zeros(r.len(), d);
                triangular::matmul(
                    ri.as_mut(),
                    BlockStructure::Rectangular,
                    Accum::Replace,
                    ai,
                    BlockStructure::Rectangular,
                    f.L(),
                    BlockStructure::TriangularLower,
                    1.0,
                    faer::get_global_parallelism(),
                );
                (0..r.len())
                    .map(|k| (0..d).map(|c| ri[(k, c)] * ri[(k, c)]).sum())
                    .collect()
            }
            None => {
                let ri = ai * s.as_ref();
                (0..r.len())
                    .map(|k| (0..d).map(|c| ri[(k, c)] * ai[(k, c)]).sum())
                    .collect()
            }
        };
        let parts: Vec<(f64, f64)> = ssr_rows
            .iter()
            .zip(r.clone())
            .map(|(&ssr, col)| (ssr.max(0.0), sst[col]))
            .collect();
        r2.push(pool(&parts, &format!("group R² of {}", train.names()[i]))?.r2);
    }
    Ok(Some(r2))
}

/// Under [`Ridge::None`] the precision path equals the pseudo-inverse fits only when the joint
/// covariance has no eigenvalue near the pseudo-inverse tolerance: estimate λ_max(C) and
/// λ_max(P) = 1/λ_min(C) by block power iteration and demand a 10³ margin.
fn full_rank(c: &Mat<f64>, p: &Mat<f64>) -> bool {
    let d = c.nrows();
    let lmax_c = power(c);
    let lmax_p = power(p);
    if !(lmax_c.is_finite() && lmax_p.is_finite() && lmax_p > 0.0) {
        return false;
    }
    1.0 / lmax_p > 1e3 * pinv_tolerance(d, lmax_c)
}

/// Largest eigenvalue of a symmetric PSD matrix by 30 steps of block power iteration (4
/// deterministic start vectors; an estimate from below).
fn power(a: &Mat<f64>) -> f64 {
    let d = a.nrows();
    let k = 4.min(d);
    let mut x = Mat::<f64>::from_fn(d, k, |r, c| 1.0 + ((r * 7 + c * 13) % 17) as f64 / 17.0);
    let mut est = 0.0;
    for _ in 0..30 {
        let y = a * x.as_ref();
        // Rayleigh quotient of the best column, then orthonormalise by QR.
        est = (0..k)
            .map(|c| {
                let num: f64 = (0..d).map(|r| x[(r, c)] * y[(r, c)]).sum();
                let den: f64 = (0..d).map(|r| x[(r, c)] * x[(r, c)]).sum();
                num / den
            })
            .fold(0.0, f64::max);
        x = y.qr().compute_thin_Q();
    }
    est
}

/// Pairwise R² and ρ, group R² and ρ, and linear CKA (on the test split) for one ridge.
pub fn analyze(train: &Moments, test: &Moments, ridge: Ridge) -> Result<Analysis> {
    let pairwise_r2 = pairwise_r2(train, test, ridge)?;
    let pairwise_rho = pairwise_r2.symmetrized();
    let group = group_r2(train, test, ridge)?;
    let cka = cka::linear_cka(test)?;
    Ok(Analysis {
        ridge,
        pairwise_r2,
        pairwise_rho,
        group,
        cka,
    })
}
