//! The streamed measures of one pair of models, from a [`Moments`] and its norm moments.
//!
//! With C the population covariance (÷ n) of the centred rows, a_r = ‖x_r − x̄‖²,
//! b_r = ‖y_r − ȳ‖² and Q_xy = Σ_r a_r b_r:
//!
//! - linear CKA = ‖C_xy‖²_F / (‖C_xx‖_F ‖C_yy‖_F) (Kornblith et al. 2019, eq. 4);
//! - debiased linear CKA = HSIC₁(x, y) / √(HSIC₁(x, x) HSIC₁(y, y)), with the unbiased HSIC
//!   estimator of Song et al. (2012, eq. 5) on linear kernels K = XXᵀ, L = YYᵀ with their
//!   diagonals removed (K̃, L̃). It is invariant to a shift of x or y, so on centred rows
//!   1ᵀK̃1 = −n tr C_xx, 1ᵀK̃L̃1 = Q_xy and tr K̃L̃ = n² ‖C_xy‖²_F − Q_xy:
//!   HSIC₁ = [n²‖C_xy‖² − Q_xy + n² tr C_xx tr C_yy / ((n−1)(n−2)) − 2 Q_xy / (n−2)] / (n(n−3));
//! - mean CCA correlation = the mean of the singular values of L_x⁻¹ C_xy L_y⁻ᵀ over
//!   min(d_x, d_y) directions, C_xx + λI = L_x L_xᵀ (the canonical correlations);
//! - SVCCA (Raghu et al. 2017) = the same on the top k principal directions of each model:
//!   the singular values of Λ_x^(−1/2) U_xᵀ C_xy U_y Λ_y^(−1/2), averaged over k;
//! - orthogonal Procrustes distance (Ding et al. 2021) on centred embeddings scaled to unit
//!   Frobenius norm: 2 − 2 ‖C_xy‖_* / √(tr C_xx tr C_yy) (0 for a rotation, at most 2).

use faer::{Mat, MatRef, Side};

use crate::error::{LmdError, Result};
use crate::moments::Moments;
use crate::similarity::stream::NormMoments;

/// What a measure of model i needs from its own block, computed once per model.
pub(crate) struct Own {
    /// C_ii.
    pub(crate) cov: Mat<f64>,
    /// tr C_ii.
    pub(crate) trace: f64,
}

/// The own blocks of every model (from the paired moments: the null's are the same rows
/// reordered).
pub(crate) fn own_blocks(m: &Moments) -> Vec<Own> {
    (0..m.names().len())
        .map(|i| {
            let r = m.range(i);
            let mut cov = Mat::<f64>::zeros(r.len(), r.len());
            m.cov_range_into(r.clone(), r, cov.as_mut());
            let trace = (0..cov.nrows()).map(|k| cov[(k, k)]).sum();
            Own { cov, trace }
        })
        .collect()
}

/// C_ij of `m`.
pub(crate) fn cross(m: &Moments, i: usize, j: usize) -> Mat<f64> {
    let (ri, rj) = (m.range(i), m.range(j));
    let mut c = Mat::<f64>::zeros(ri.len(), rj.len());
    m.cov_range_into(ri, rj, c.as_mut());
    c
}

/// An error of `measure` naming model `name`'s zero variance.
pub(crate) fn zero_variance(measure: &str, name: &str) -> LmdError {
    LmdError::measure(
        measure,
        format!("model {name} has zero variance (every sequence has the same embedding)"),
    )
}

/// Checks `n` against the least number of sequences `measure` needs.
pub(crate) fn need_rows(measure: &str, n: u64, need: u64, why: &str) -> Result<()> {
    if n < need {
        return Err(LmdError::measure(
            measure,
            format!("{n} sequences, at least {need} needed ({why})"),
        ));
    }
    Ok(())
}

/// Linear CKA from C_ij and the own blocks.
pub(crate) fn linear_cka(c_ij: MatRef<'_, f64>, own_i: &Own, own_j: &Own) -> f64 {
    c_ij.squared_norm_l2() / (own_i.cov.squared_norm_l2() * own_j.cov.squared_norm_l2()).sqrt()
}

/// HSIC₁ (unbiased, linear kernels) from ‖C_xy‖²_F, tr C_xx, tr C_yy and Q_xy (centred).
pub(crate) fn hsic_unbiased(n: f64, c2: f64, tr_x: f64, tr_y: f64, q: f64) -> f64 {
    (n * n * c2 - q + n * n * tr_x * tr_y / ((n - 1.0) * (n - 2.0)) - 2.0 * q / (n - 2.0))
        / (n * (n - 3.0))
}

/// Σ a_r b_r of the centred rows of every pair (M × M row-major) of `m` with norm moments
/// `norms`.
pub(crate) fn centred_q(m: &Moments, norms: &NormMoments) -> Vec<f64> {
    norms.centred_q(m)
}

/// A Cholesky factor of C + λI, or the measure's error naming the model.
pub(crate) fn cholesky(cov: &Mat<f64>, lambda: f64, measure: &str, name: &str) -> Result<Mat<f64>> {
    let mut c = cov.clone();
    for k in 0..c.nrows() {
        c[(k, k)] += lambda;
    }
    let llt = c.llt(Side::Lower).map_err(|_| {
        LmdError::measure(
            measure,
            format!(
                "the covariance of {name} is singular (a direction of zero variance) with ridge \
                 {lambda:e}; give CCA a ridge > 0"
            ),
        )
    })?;
    Ok(llt.L().to_owned())
}

/// The mean of the singular values of L_i⁻¹ C L_j⁻ᵀ over min(d_i, d_j).
pub(crate) fn mean_canonical(
    c_ij: MatRef<'_, f64>,
    l_i: MatRef<'_, f64>,
    l_j: MatRef<'_, f64>,
    measure: &str,
) -> Result<f64> {
    let mut left = c_ij.to_owned();
    faer::linalg::triangular_solve::solve_lower_triangular_in_place(
        l_i,
        left.as_mut(),
        faer::Par::Seq,
    );
    let mut kt = left.transpose().to_owned();
    faer::linalg::triangular_solve::solve_lower_triangular_in_place(
        l_j,
        kt.as_mut(),
        faer::Par::Seq,
    );
    mean_singular(kt.as_ref(), measure)
}

/// The mean of the min(r, c) singular values of `a`.
pub(crate) fn mean_singular(a: MatRef<'_, f64>, measure: &str) -> Result<f64> {
    let s = nuclear(a, measure)?;
    Ok(s / a.nrows().min(a.ncols()) as f64)
}

/// ‖a‖_*: the sum of its singular values, as the square roots of the eigenvalues of the smaller
/// Gram (aᵀa or aaᵀ; a symmetric eigenvalue problem costs about half an SVD). Each singular
/// value is then exact to rounding relative to itself when it is not tiny, and within
/// ≈ √ε · σ_max (1.5·10⁻⁸ σ_max) of the truth near zero.
pub(crate) fn nuclear(a: MatRef<'_, f64>, measure: &str) -> Result<f64> {
    let g: Mat<f64> = if a.ncols() <= a.nrows() {
        a.transpose() * a
    } else {
        a * a.transpose()
    };
    let ev = g.self_adjoint_eigenvalues(Side::Lower).map_err(|e| {
        LmdError::measure(measure, format!("the eigenvalues did not converge ({e:?})"))
    })?;
    Ok(ev.iter().map(|&l| l.max(0.0).sqrt()).sum())
}

/// The top `k` principal directions of a covariance, scaled by λ^(−1/2) (d × k), or the
/// SVCCA error when one of them has zero variance.
pub(crate) fn svcca_basis(cov: &Mat<f64>, k: usize, name: &str) -> Result<Mat<f64>> {
    let evd = cov.self_adjoint_eigen(Side::Lower).map_err(|e| {
        LmdError::measure(
            "SVCCA",
            format!("the eigendecomposition of {name}'s covariance did not converge ({e:?})"),
        )
    })?;
    let (u, s) = (evd.U(), evd.S().column_vector());
    let d = cov.nrows();
    let top = s[d - 1];
    // faer sorts ascending: the kept directions are the last k.
    let mut out = Mat::<f64>::zeros(d, k);
    for c in 0..k {
        let lam = s[d - 1 - c];
        if lam.is_nan() || lam <= 1e-12 * top.max(f64::MIN_POSITIVE) {
            return Err(LmdError::measure(
                "SVCCA",
                format!(
                    "model {name} has only {c} directions of non-zero variance, fewer than the \
                     {k} kept"
                ),
            ));
        }
        let scale = 1.0 / lam.sqrt();
        for r in 0..d {
            out[(r, c)] = u[(r, d - 1 - c)] * scale;
        }
    }
    Ok(out)
}

/// Orthogonal Procrustes distance from C_ij and the traces.
pub(crate) fn procrustes(c_ij: MatRef<'_, f64>, tr_i: f64, tr_j: f64) -> Result<f64> {
    let nuc = nuclear(c_ij, "orthogonal Procrustes distance")?;
    Ok((2.0 - 2.0 * nuc / (tr_i * tr_j).sqrt()).max(0.0))
}
