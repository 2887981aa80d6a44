//! The paper's quantities from two splits' moments: pairwise R² (rows = target, columns =
//! basis), symmetric pairwise ρ, group R²(u_i, {u_-i}) for every model and group ρ, any chosen
//! basis subset, and the whole bundle with linear CKA beside it ([`analyze`]).
//!
//! Group fits use the block structure of the joint covariance: with P = (C + λI)⁻¹ from ONE
//! Cholesky factorisation, the regression of block i on all the others is
//! W_i = −P_ii⁻¹ P_i,−i (the precision-matrix identity; it holds for the ridge too, because λI
//! only touches diagonal blocks). P is never formed: the residuals are scored in the basis
//! whitened by the Cholesky factor (see `group_precision`, ≈ 2 D³ flops). Where the ridge must be computed for each basis block alone
//! ([`Ridge::MinEigen`]) or the joint covariance is numerically singular under [`Ridge::None`],
//! every group fit is done directly instead ([`group_r2_direct`]).

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::{matmul, triangular_inverse};
use faer::{Accum, Mat, MatRef, Par, Side};

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
    /// One Cholesky factorisation of the joint covariance, W_i = −P_ii⁻¹ P_i,−i, all in f64.
    Precision,
    /// The same with the final orthonormal × whitened product in f32 ([`Arithmetic::MixedF32`]).
    PrecisionMixedF32,
    /// One fit per model on the basis of all others.
    Direct,
}

/// The arithmetic of the group path's largest product (see [`group_r2_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arithmetic {
    /// Everything in f64 (the default; equals the direct fits to rounding, ~1e-12).
    #[default]
    F64,
    /// Factorisations and whitening in f64, the product Ũ_i Z of the residual rows and the
    /// whitened test factor (a third of the flops) in f32: ≈ 12 % less CPU time at D = 9216;
    /// R² agrees with [`Arithmetic::F64`] to ~1e-7 (4.9e-8 at 12 × 768; tested to 1e-5 on a
    /// nearly collinear zoo).
    MixedF32,
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
        let whitened = match ridge {
            Ridge::Fixed(l) if l.is_finite() && l >= 0.0 => {
                pairwise_whitened(train, test, &tcols, &bcols, l)?
            }
            _ => None,
        };
        let parts = match whitened {
            Some(parts) => parts,
            None => {
                let c_bb = train.cov_block(&bcols, &bcols);
                let solver = Solver::new(
                    c_bb.as_ref(),
                    ridge,
                    &format!("covariance of {}", train.names()[j]),
                )?;
                let (w, b) = solve_w(train, &tcols, &bcols, &solver)?;
                residual_ss(test, &tcols, &bcols, w.as_ref(), &b)?
            }
        };
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

/// Per target dimension (SSR/n', SST/n') of the fits of `tcols` on `bcols` under a fixed ridge,
/// whitened by the basis factor (3 d_b² d_t flops instead of 4 for solve + quadratic form):
/// with C_bb + λI = L Lᵀ, G = L⁻¹ C_bt gives W = Gᵀ L⁻¹, so with S' the test second moment about
/// the train mean, w_r·S'_br = g_r·h_r (H = L⁻¹ S'_bt) and w_rᵀ S'_bb w_r = ‖Z_bᵀ g_r‖² − ‖g_r‖²,
/// Z_b = L⁻¹ L'' with L'' L''ᵀ = S'_bb + C_bb + λI (positive definite even when S'_bb is
/// singular). `None` when a factorisation fails (the general path then reports the error).
fn pairwise_whitened(
    train: &Moments,
    test: &Moments,
    tcols: &[usize],
    bcols: &[usize],
    lambda: f64,
) -> Result<Option<Vec<(f64, f64)>>> {
    test.require_samples(1, "held-out scoring")?;
    let par = faer::get_global_parallelism();
    let (mean_tr, mean_te) = (train.mean()?, test.mean()?);
    let delta: Vec<f64> = mean_te.iter().zip(&mean_tr).map(|(a, b)| a - b).collect();
    let mut c_bb = train.cov_block(bcols, bcols);
    for k in 0..bcols.len() {
        c_bb[(k, k)] += lambda;
    }
    let Ok(l) = c_bb.llt(Side::Lower) else {
        return Ok(None);
    };
    let mut g = train.cov_block(bcols, tcols);
    l.L().solve_lower_triangular_in_place(g.as_mut());
    let mut h = test.cov_block(bcols, tcols);
    for (c, &t) in tcols.iter().enumerate() {
        for (r, &b) in bcols.iter().enumerate() {
            h[(r, c)] += delta[b] * delta[t];
        }
    }
    l.L().solve_lower_triangular_in_place(h.as_mut());
    let s_bb = test.cov_block(bcols, bcols);
    let s2 = Mat::<f64>::from_fn(bcols.len(), bcols.len(), |r, c| {
        s_bb[(r, c)] + delta[bcols[r]] * delta[bcols[c]] + c_bb[(r, c)]
    });
    let Ok(ls) = s2.llt(Side::Lower) else {
        return Ok(None);
    };
    let mut zb = ls.L().to_owned();
    l.L().solve_lower_triangular_in_place(zb.as_mut());
    let mut q = Mat::<f64>::zeros(bcols.len(), tcols.len());
    triangular::matmul(
        q.as_mut(),
        BlockStructure::Rectangular,
        Accum::Replace,
        zb.transpose(),
        BlockStructure::TriangularUpper,
        g.as_ref(),
        BlockStructure::Rectangular,
        1.0,
        par,
    );
    let col = |m: &Mat<f64>, a: &Mat<f64>, c: usize| -> f64 {
        (0..m.nrows()).map(|r| m[(r, c)] * a[(r, c)]).sum()
    };
    Ok(Some(
        tcols
            .iter()
            .enumerate()
            .map(|(c, &t)| {
                let sst = test.cov_block(&[t], &[t])[(0, 0)];
                let ssr = sst + delta[t] * delta[t] - 2.0 * col(&g, &h, c) + col(&q, &q, c)
                    - col(&g, &g, c);
                // Rounding can take an exact fit a hair below zero.
                (ssr.max(0.0), sst)
            })
            .collect(),
    ))
}

/// Group R²(u_i, {u_-i}) for every model: through the precision identity when the ridge allows
/// it (and, under [`Ridge::None`], the joint covariance is numerically full rank), otherwise
/// directly ([`group_r2_direct`]).
pub fn group_r2(train: &Moments, test: &Moments, ridge: Ridge) -> Result<GroupR2> {
    group_r2_with(train, test, ridge, Arithmetic::F64)
}

/// [`group_r2`] with a chosen arithmetic for the precision path (the direct fallback is always
/// f64).
pub fn group_r2_with(
    train: &Moments,
    test: &Moments,
    ridge: Ridge,
    arithmetic: Arithmetic,
) -> Result<GroupR2> {
    check_compatible(train, test)?;
    let lambda = match ridge {
        Ridge::None => Some(0.0),
        Ridge::Fixed(l) => Some(l),
        Ridge::MinEigen(_) => None,
    };
    if let Some(lambda) = lambda {
        if let Some(r2) = group_precision(train, test, lambda, ridge == Ridge::None, arithmetic)? {
            return Ok(GroupR2 {
                names: train.names().to_vec(),
                r2,
                ridge,
                method: match arithmetic {
                    Arithmetic::F64 => GroupMethod::Precision,
                    Arithmetic::MixedF32 => GroupMethod::PrecisionMixedF32,
                },
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
///
/// Whitened formulation (no explicit inverse of C): with C + λI = L Lᵀ and X = L⁻¹, the
/// precision is P = XᵀX, so P_i,: = X_:,iᵀ X where X_:,i (rows ≥ block i) is block column i of X.
/// With P_ii = R_i R_iᵀ, U_i = X_:,i R_i⁻ᵀ has orthonormal columns and the residual operator is
/// e_i = Ũ_i w with Ũ_i = R_i⁻ᵀ U_iᵀ = P_ii⁻¹ X_:,iᵀ and w = X (z − μ_train) (the whitened
/// sample, train covariance I).
/// The test second moment of w is Y = X S' Xᵀ. A singular S' (test rows ≤ D) has no Cholesky
/// factor, so factor S'' = S' + (C + λI) instead: X S'' Xᵀ = Y + I exactly, whose factor is
/// Z = X L'' (lower triangular), and the added I contributes exactly tr(P_ii⁻¹) (the train
/// residual variance) to SSR_i, which is subtracted. Then, per target dimension,
/// SSR_i = ‖rows of Ũ_i Z‖² − ‖rows of Ũ_i‖². Flops: D³/3 (Cholesky of C) + D³/3 (X) +
/// D³/3 (Cholesky of S'') + D³/3 (Z, a product of two lower triangles) + 2D³/3 (all Ũ_i Z,
/// exploiting that Ũ_i starts at block i and Z is triangular) ≈ 2 D³, of which the last
/// 2D³/3 multiplies a whitened Z by rows whose norms are the train residual scale (an
/// orthonormal basis scaled by R_i⁻ᵀ): [`Arithmetic::MixedF32`] runs it in f32.
fn group_precision(
    train: &Moments,
    test: &Moments,
    lambda: f64,
    check_rank: bool,
    arithmetic: Arithmetic,
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
    test.require_samples(1, "held-out scoring")?;
    let par = faer::get_global_parallelism();
    let mut c = train.covariance()?;
    for k in 0..d {
        c[(k, k)] += lambda;
    }
    let Ok(llt) = c.llt(Side::Lower) else {
        return Ok(None);
    };
    let mut x = Mat::<f64>::zeros(d, d);
    triangular_inverse::invert_lower_triangular(x.as_mut(), llt.L(), par);
    drop(llt);
    if check_rank && !full_rank(&c, &x) {
        return Ok(None);
    }
    // S'' = S' + (C + λI), S' = the test second moment about the train mean.
    let mean_tr = train.mean()?;
    let mean_te = test.mean()?;
    let mut s = test.covariance()?;
    let sst: Vec<f64> = (0..d).map(|k| s[(k, k)]).collect();
    let delta: Vec<f64> = mean_te.iter().zip(&mean_tr).map(|(a, b)| a - b).collect();
    for cc in 0..d {
        for rr in cc..d {
            s[(rr, cc)] += delta[rr] * delta[cc] + c[(rr, cc)];
        }
    }
    drop(c);
    let Ok(ls) = s.llt(Side::Lower) else {
        return Ok(None);
    };
    drop(s);
    let mut z = Mat::<f64>::zeros(d, d);
    triangular::matmul(
        z.as_mut(),
        BlockStructure::TriangularLower,
        Accum::Replace,
        x.as_ref(),
        BlockStructure::TriangularLower,
        ls.L(),
        BlockStructure::TriangularLower,
        1.0,
        par,
    );
    drop(ls);
    let z32 = match arithmetic {
        Arithmetic::F64 => None,
        Arithmetic::MixedF32 => {
            let z32 = Mat::<f32>::from_fn(d, d, |r, c| z[(r, c)] as f32);
            z = Mat::zeros(0, 0);
            Some(z32)
        }
    };
    let mut r2 = Vec::with_capacity(m);
    for i in 0..m {
        let r = train.range(i);
        let (o, di) = (r.start, r.len());
        let xi = x.as_ref().submatrix(o, o, d - o, di);
        // P_ii = X_:,iᵀ X_:,i (lower triangle is all the Cholesky reads).
        let mut pii = Mat::<f64>::zeros(di, di);
        triangular::matmul(
            pii.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            xi.transpose(),
            BlockStructure::Rectangular,
            xi,
            BlockStructure::Rectangular,
            1.0,
            par,
        );
        let Ok(rf) = pii.llt(Side::Lower) else {
            return Ok(None);
        };
        // Ũ = P_ii⁻¹ X_:,iᵀ = R⁻ᵀ Uᵀ: its rows map w to the residual dimensions, and row k has
        // squared norm (P_ii⁻¹)_kk, the train residual variance of dimension k, the same scale
        // as the test residual, which keeps the f32 product's error relative.
        let mut ut = xi.transpose().to_owned();
        rf.L().solve_lower_triangular_in_place(ut.as_mut());
        rf.L()
            .transpose()
            .solve_upper_triangular_in_place(ut.as_mut());
        let g = match &z32 {
            None => block_rows(ut.as_ref(), z.as_ref(), o, 1.0, par),
            Some(z32) => {
                let ut32 = Mat::<f32>::from_fn(di, d - o, |a, b| ut[(a, b)] as f32);
                let g32 = block_rows(ut32.as_ref(), z32.as_ref(), o, 1.0f32, par);
                Mat::<f64>::from_fn(di, d, |a, b| g32[(a, b)] as f64)
            }
        };
        // SSR per dimension = ‖row of Ũ Z‖² (test + the added I) − ‖row of Ũ‖² (the I part).
        let (both, train_part) = (row_norms2(g.as_ref()), row_norms2(ut.as_ref()));
        let parts: Vec<(f64, f64)> = (0..di)
            .map(|k| ((both[k] - train_part[k]).max(0.0), sst[o + k]))
            .collect();
        r2.push(pool(&parts, &format!("group R² of {}", train.names()[i]))?.r2);
    }
    Ok(Some(r2))
}

/// Squared Euclidean norm of every row (column-major walk).
fn row_norms2(a: MatRef<'_, f64>) -> Vec<f64> {
    let mut out = vec![0.0; a.nrows()];
    for c in 0..a.ncols() {
        for (k, o) in out.iter_mut().enumerate() {
            *o += a[(k, c)] * a[(k, c)];
        }
    }
    out
}

/// Ũ Z restricted to what is non-zero: `ut` holds Ũ on rows ≥ `o` (d_i × (D − o)), Z is
/// lower triangular, so the columns before `o` take a full product and the rest a product with
/// a lower triangle.
fn block_rows<T: faer::traits::ComplexField + Copy>(
    ut: MatRef<'_, T>,
    z: MatRef<'_, T>,
    o: usize,
    one: T,
    par: Par,
) -> Mat<T> {
    let (di, d) = (ut.nrows(), z.nrows());
    let zr = z.subrows(o, d - o);
    let mut g = Mat::<T>::zeros(di, d);
    matmul::matmul(
        g.as_mut().subcols_mut(0, o),
        Accum::Replace,
        ut,
        zr.subcols(0, o),
        one,
        par,
    );
    triangular::matmul(
        g.as_mut().subcols_mut(o, d - o),
        BlockStructure::Rectangular,
        Accum::Replace,
        ut,
        BlockStructure::Rectangular,
        zr.subcols(o, d - o),
        BlockStructure::TriangularLower,
        one,
        par,
    );
    g
}

/// Under [`Ridge::None`] the precision path equals the pseudo-inverse fits only when the joint
/// covariance has no eigenvalue near the pseudo-inverse tolerance: estimate λ_max(C) and
/// λ_max(P) = λ_max(XᵀX) = 1/λ_min(C) by block power iteration and demand a 10³ margin.
fn full_rank(c: &Mat<f64>, x: &Mat<f64>) -> bool {
    let d = c.nrows();
    let lmax_c = power(d, |v| c * v);
    let lmax_p = power(d, |v| x.transpose() * (x * v));
    if !(lmax_c.is_finite() && lmax_p.is_finite() && lmax_p > 0.0) {
        return false;
    }
    1.0 / lmax_p > 1e3 * pinv_tolerance(d, lmax_c)
}

/// Largest eigenvalue of a symmetric PSD operator on R^d by 30 steps of block power iteration
/// (4 deterministic start vectors; an estimate from below).
fn power(d: usize, apply: impl Fn(MatRef<'_, f64>) -> Mat<f64>) -> f64 {
    let k = 4.min(d);
    let mut x = Mat::<f64>::from_fn(d, k, |r, c| 1.0 + ((r * 7 + c * 13) % 17) as f64 / 17.0);
    let mut est = 0.0;
    for _ in 0..30 {
        let y = apply(x.as_ref());
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
    analyze_with(train, test, ridge, Arithmetic::F64)
}

/// [`analyze`] with a chosen arithmetic for the group fits.
pub fn analyze_with(
    train: &Moments,
    test: &Moments,
    ridge: Ridge,
    arithmetic: Arithmetic,
) -> Result<Analysis> {
    let pairwise_r2 = pairwise_r2(train, test, ridge)?;
    let pairwise_rho = pairwise_r2.symmetrized();
    let group = group_r2_with(train, test, ridge, arithmetic)?;
    let cka = cka::linear_cka(test)?;
    Ok(Analysis {
        ridge,
        pairwise_r2,
        pairwise_rho,
        group,
        cka,
    })
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rand_distr::StandardNormal;

    use super::*;
    use crate::synthetic::{Planted, PlantedSpec};

    /// Train and test moments of a planted zoo of 5 × 8 plus a sixth model that is model 1 plus
    /// noise of relative size 1e-3 (a nearly collinear basis: C has eigenvalues ~1e-6).
    fn zoo(n_train: usize, n_test: usize, seed: u64) -> (Moments, Moments) {
        let p = Planted::new(PlantedSpec {
            models: 5,
            dim: 8,
            latent: 12,
            seed,
            ..PlantedSpec::default()
        })
        .unwrap();
        let (mut names, mut widths) = (p.names(), p.widths());
        names.push("near_copy".into());
        widths.push(8);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut split = |n: usize| {
            let rows = p.sample(n, &mut rng);
            let mut out = Vec::with_capacity(n * 48);
            for r in rows.chunks(40) {
                out.extend_from_slice(r);
                for c in 0..8 {
                    let e: f64 = rng.sample(StandardNormal);
                    out.push(r[8 + c] + (1e-3 * e) as f32);
                }
            }
            let mut m = Moments::new(names.clone(), widths.clone()).unwrap();
            m.update_stacked(&out).unwrap();
            m
        };
        (split(n_train), split(n_test))
    }

    #[test]
    fn mixed_f32_equals_f64_and_direct_on_a_nearly_collinear_zoo() {
        // A test split with more rows than D (S' regular) and one with fewer (S' singular).
        for n_test in [3000, 30] {
            let (train, test) = zoo(4000, n_test, 5);
            for ridge in [Ridge::REFERENCE, Ridge::Fixed(0.05)] {
                let exact = group_r2_with(&train, &test, ridge, Arithmetic::F64).unwrap();
                let mixed = group_r2_with(&train, &test, ridge, Arithmetic::MixedF32).unwrap();
                let direct = group_r2_direct(&train, &test, ridge).unwrap();
                assert_eq!(exact.method, GroupMethod::Precision);
                assert_eq!(mixed.method, GroupMethod::PrecisionMixedF32);
                for k in 0..6 {
                    let (e, x, d) = (exact.r2[k], mixed.r2[k], direct.r2[k]);
                    assert!(x.is_finite(), "{n_test} {ridge:?} model {k}: {x}");
                    assert!(
                        (e - d).abs() < 1e-8,
                        "{n_test} {ridge:?} model {k}: {e} vs {d}"
                    );
                    assert!(
                        (x - e).abs() < 1e-5,
                        "{n_test} {ridge:?} model {k}: {x} vs {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn whitened_pairwise_equals_single_fits() {
        // n_test = 5 < d_b = 8: the test block S'_bb is singular.
        for n_test in [3000, 5] {
            let (train, test) = zoo(4000, n_test, 6);
            let names: Vec<&str> = train.names().iter().map(String::as_str).collect();
            for ridge in [Ridge::REFERENCE, Ridge::Fixed(0.05), Ridge::None] {
                let pr = pairwise_r2(&train, &test, ridge).unwrap();
                for i in 0..6 {
                    for j in (0..6).filter(|&j| j != i) {
                        let single =
                            subset_r2(&train, &test, names[i], &[names[j]], ridge).unwrap();
                        let got = pr.get(i, j);
                        assert!(
                            (got - single).abs() < 1e-9 * (1.0 + single.abs()),
                            "{n_test} {ridge:?} ({i},{j}): {got} vs {single}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn whitened_path_reproduces_the_closed_form_on_population_moments() {
        let p = Planted::new(PlantedSpec {
            models: 4,
            dim: 6,
            latent: 9,
            ..PlantedSpec::default()
        })
        .unwrap();
        let m = p.population_moments(10_000).unwrap();
        let truth = p.group_r2().unwrap();
        for arithmetic in [Arithmetic::F64, Arithmetic::MixedF32] {
            let g = group_r2_with(&m, &m, Ridge::None, arithmetic).unwrap();
            let tol = if arithmetic == Arithmetic::F64 {
                1e-10
            } else {
                1e-5
            };
            for (a, b) in g.r2.iter().zip(&truth) {
                assert!((a - b).abs() < tol, "{arithmetic:?}: {a} vs {b}");
            }
        }
    }
}
