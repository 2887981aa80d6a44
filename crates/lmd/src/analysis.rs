//! The paper's quantities from two splits' moments: pairwise R² (rows = target, columns =
//! basis), symmetric pairwise ρ, group R²(u_i, {u_-i}) for every model and group ρ, any chosen
//! basis subset, and the whole bundle with linear CKA beside it ([`analyze`]).
//!
//! Group fits use the block structure of the joint covariance: with P = (C + λI)⁻¹ from ONE
//! Cholesky factorisation, the regression of block i on all the others is
//! W_i = −P_ii⁻¹ P_i,−i (the precision-matrix identity; it holds for the ridge too, because λI
//! only touches diagonal blocks). P is never formed: the residuals are scored in the basis
//! whitened by the Cholesky factor (see `group_precision`, ≈ 2 D³ flops). Where the ridge must
//! be computed for each basis block alone ([`Ridge::MinEigen`]) or the joint covariance is
//! numerically singular under [`Ridge::None`], every group fit is done directly instead
//! ([`group_r2_direct`]).
//!
//! Pairwise fits under a fixed ridge whiten each basis once and serve all targets from two
//! triangular solves on d_b × d_t panels copied whole from the moments (`pairwise_whitened`).

use std::ops::Range;

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::{matmul, triangular_inverse};
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatMut, MatRef, Par, Side};

use crate::cka;
use crate::dense;
use crate::error::{LmdError, Result};
use crate::fit::{self, pinv_tolerance, pool, residual_ss, solve_w, Ridge, Solver};
use crate::moments::Moments;
pub use crate::pair_matrix::PairMatrix;

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
    /// whitened test factor (a third of the flops) in f32: 5–15 % less time at D = 9216;
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
    let mut panels = None;
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
        let whitened = match ridge {
            Ridge::Fixed(l) if l.is_finite() && l >= 0.0 => {
                let panels = match &mut panels {
                    Some(p) => p,
                    None => panels.insert(PairPanels::new(train, test)?),
                };
                pairwise_whitened(train, test, j, l, panels)
            }
            _ => None,
        };
        let parts = match whitened {
            Some(parts) => parts,
            None => {
                let tcols = train.columns(&targets);
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

/// μ_test − μ_train per stacked column: the shift that turns the test covariance into the test
/// second moment about the train mean, S' = S + δδᵀ (the fits' intercepts come from the train
/// split).
fn mean_shift(train: &Moments, test: &Moments) -> Result<Vec<f64>> {
    let (mean_tr, mean_te) = (train.mean()?, test.mean()?);
    Ok(mean_te.iter().zip(&mean_tr).map(|(a, b)| a - b).collect())
}

/// What every basis of the whitened pairwise fits shares: the train-to-test mean shift, the
/// test variances, and three d_b × d_t panels allocated once (at 12 × 768, fresh panels for
/// each basis would cost more in page faults than their products cost in flops).
struct PairPanels {
    delta: Vec<f64>,
    var_test: Vec<f64>,
    g: Mat<f64>,
    h: Mat<f64>,
    q: Mat<f64>,
}

impl PairPanels {
    fn new(train: &Moments, test: &Moments) -> Result<Self> {
        test.require_samples(1, "held-out scoring")?;
        let d = train.dim();
        let (rows, cols) = (
            train.widths().iter().copied().max().unwrap_or(0),
            d - train.widths().iter().copied().min().unwrap_or(0),
        );
        Ok(Self {
            delta: mean_shift(train, test)?,
            var_test: test.variances(),
            g: Mat::zeros(rows, cols),
            h: Mat::zeros(rows, cols),
            q: Mat::zeros(rows, cols),
        })
    }
}

/// Per target dimension (SSR/n', SST/n') of the fits of every other model on basis `j` under a
/// fixed ridge, whitened by the basis factor (3 d_b² d_t flops instead of 4 for solve +
/// quadratic form): with C_bb + λI = L Lᵀ, G = L⁻¹ C_bt gives W = Gᵀ L⁻¹, so with S' the test
/// second moment about the train mean, w_r·S'_br = g_r·h_r (H = L⁻¹ S'_bt) and
/// w_rᵀ S'_bb w_r = ‖Z_bᵀ g_r‖² − ‖g_r‖², Z_b = L⁻¹ L'' with L'' L''ᵀ = S'_bb + C_bb + λI
/// (positive definite even when S'_bb is singular). All targets share one pair of triangular
/// solves on the d_b × d_t panels [C_bt | S'_bt], whose blocks are copied whole from the stored
/// moments. `None` when a factorisation fails (the general path then reports the error).
fn pairwise_whitened(
    train: &Moments,
    test: &Moments,
    j: usize,
    lambda: f64,
    p: &mut PairPanels,
) -> Option<Vec<(f64, f64)>> {
    let par = faer::get_global_parallelism();
    let bj = train.range(j);
    let db = bj.len();
    let targets: Vec<usize> = (0..train.names().len()).filter(|&i| i != j).collect();
    let dt: usize = targets.iter().map(|&i| train.widths()[i]).sum();
    let mut c_bb = Mat::<f64>::zeros(db, db);
    train.cov_range_into(bj.clone(), bj.clone(), c_bb.as_mut());
    for k in 0..db {
        c_bb[(k, k)] += lambda;
    }
    let l = c_bb.llt(Side::Lower).ok()?;
    let mut g = p.g.as_mut().submatrix_mut(0, 0, db, dt);
    let mut h = p.h.as_mut().submatrix_mut(0, 0, db, dt);
    fill_panels(train, test, j, &targets, &p.delta, g.rb_mut(), h.rb_mut());
    l.L().solve_lower_triangular_in_place(g.rb_mut());
    l.L().solve_lower_triangular_in_place(h.rb_mut());
    let zb = whitened_test_factor(test, bj, &p.delta, c_bb.as_ref(), l.L())?;
    let mut q = p.q.as_mut().submatrix_mut(0, 0, db, dt);
    upper_times(q.rb_mut(), zb.transpose(), g.rb(), par);
    let dot = |a: MatRef<'_, f64>, b: MatRef<'_, f64>, c: usize| -> f64 {
        a.col(c)
            .iter()
            .zip(b.col(c).iter())
            .map(|(x, y)| x * y)
            .sum()
    };
    let (g, h, q) = (g.rb(), h.rb(), q.rb());
    let tcols = targets.iter().flat_map(|&i| train.range(i));
    Some(
        tcols
            .enumerate()
            .map(|(c, t)| {
                let sst = p.var_test[t];
                let ssr = sst + p.delta[t] * p.delta[t] - 2.0 * dot(g, h, c) + dot(q, q, c)
                    - dot(g, g, c);
                // Rounding can take an exact fit a hair below zero.
                (ssr.max(0.0), sst)
            })
            .collect(),
    )
}

/// The panels [C_bt | S'_bt] of basis `j` against `targets` (in order), each block copied
/// whole from the moments: `g` ← C_bt (train), `h` ← S'_bt = S_bt + δ_b δ_tᵀ (the test second
/// moment about the train mean).
fn fill_panels(
    train: &Moments,
    test: &Moments,
    j: usize,
    targets: &[usize],
    delta: &[f64],
    mut g: MatMut<'_, f64>,
    mut h: MatMut<'_, f64>,
) {
    let bj = train.range(j);
    let mut start = 0;
    for &i in targets {
        let (ri, w) = (train.range(i), train.widths()[i]);
        train.cov_range_into(bj.clone(), ri.clone(), g.rb_mut().subcols_mut(start, w));
        let mut hb = h.rb_mut().subcols_mut(start, w);
        test.cov_range_into(bj.clone(), ri.clone(), hb.rb_mut());
        // S' = S + δδᵀ: the second moment about the train mean (panel columns are contiguous).
        let db_delta = &delta[bj.clone()];
        for (k, t) in ri.enumerate() {
            let dt_ = delta[t];
            for (v, &b) in hb.rb_mut().col_mut(k).iter_mut().zip(db_delta) {
                *v += b * dt_;
            }
        }
        start += w;
    }
}

/// Z_b = L⁻¹ L'' of the basis columns `bj` (lower triangular), with L'' L''ᵀ = S'_bb + C_bb + λI, positive
/// definite even when S'_bb is singular; `c_bb` holds C_bb + λI and `l` its factor. `None` when
/// the factorisation fails.
fn whitened_test_factor(
    test: &Moments,
    bj: Range<usize>,
    delta: &[f64],
    c_bb: MatRef<'_, f64>,
    l: MatRef<'_, f64>,
) -> Option<Mat<f64>> {
    let db = bj.len();
    let mut s2 = Mat::<f64>::zeros(db, db);
    test.cov_range_into(bj.clone(), bj.clone(), s2.as_mut());
    for (c, bc) in bj.clone().enumerate() {
        for (r, br) in bj.clone().enumerate() {
            s2[(r, c)] += delta[br] * delta[bc] + c_bb[(r, c)];
        }
    }
    let ls = s2.llt(Side::Lower).ok()?;
    let mut zb = ls.L().to_owned();
    dense::zero_upper(zb.as_mut());
    l.solve_lower_triangular_in_place(zb.as_mut());
    Some(zb)
}

/// Q = Z_bᵀ G, Z_bᵀ upper triangular with zeros stored below: one GEMM per row block of Z_bᵀ
/// over the rows of G it touches (faer's triangular product ran at half its GEMM rate on these
/// 768 × 8448 panels).
fn upper_times(mut q: MatMut<'_, f64>, zt: MatRef<'_, f64>, g: MatRef<'_, f64>, par: Par) {
    let db = zt.nrows();
    let mut r0 = 0;
    while r0 < db {
        let r1 = (r0 + dense::BLOCK).min(db);
        matmul::matmul(
            q.rb_mut().subrows_mut(r0, r1 - r0),
            Accum::Replace,
            zt.submatrix(r0, r0, r1 - r0, db - r0),
            g.subrows(r0, db - r0),
            1.0,
            par,
        );
        r0 = r1;
    }
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
///
/// Memory: three D × D buffers (C + λI → L → S'' → L'' in one, X, Z). At D = 9216 each fresh
/// 680 MB buffer costs ~0.5 s of page faults on a 2-core VM, so nothing else of that size is
/// allocated; both Cholesky factorisations run in place ([`dense::cholesky_in_place`]) and
/// the covariances are assembled column slice by column slice ([`Moments::add_cov_lower`]).
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
    // One D × D buffer carries C + λI, then its factor L, then S'' and its factor L'': every
    // fresh D² allocation costs ~0.5 s of page faults at D = 9216, and faer's own Cholesky
    // copies its input.
    let mut a = Mat::<f64>::zeros(d, d);
    let Some(x) = whiten_train(train, lambda, check_rank, &mut a, par) else {
        return Ok(None);
    };
    let delta = mean_shift(train, test)?;
    let sst = test.variances();
    // L'' L''ᵀ = S'' in the same buffer, then Z = X L''.
    fill_s2(train, test, &delta, lambda, &mut a);
    if !dense::cholesky_in_place(a.as_mut(), par) {
        return Ok(None);
    }
    let mut z = lower_times_lower(x.as_ref(), a.as_ref(), par);
    drop(a);
    // MixedF32 keeps only Z's f32 copy.
    let z32 = match arithmetic {
        Arithmetic::F64 => None,
        Arithmetic::MixedF32 => {
            let z32 = to_f32(z.as_ref());
            z = Mat::zeros(0, 0);
            Some(z32)
        }
    };
    let mut r2 = Vec::with_capacity(m);
    for i in 0..m {
        let Some(parts) = group_parts(train, i, x.as_ref(), z.as_ref(), z32.as_ref(), &sst, par)
        else {
            return Ok(None);
        };
        r2.push(pool(&parts, &format!("group R² of {}", train.names()[i]))?.r2);
    }
    Ok(Some(r2))
}

/// X = L⁻¹ with C + λI = L Lᵀ: fills `a` with C + λI (lower triangle) and factors it in place.
/// `None` when the factorisation fails or, with `check_rank`, when C is numerically singular
/// ([`full_rank`]).
fn whiten_train(
    train: &Moments,
    lambda: f64,
    check_rank: bool,
    a: &mut Mat<f64>,
    par: Par,
) -> Option<Mat<f64>> {
    let d = a.nrows();
    train.add_cov_lower(a, 1.0);
    for k in 0..d {
        a[(k, k)] += lambda;
    }
    // The rank check needs C itself (symmetric); only Ridge::None asks for it.
    let c_full = check_rank.then(|| symmetric_from_lower(a.as_ref()));
    if !dense::cholesky_in_place(a.as_mut(), par) {
        return None;
    }
    let mut x = Mat::<f64>::zeros(d, d);
    triangular_inverse::invert_lower_triangular(x.as_mut(), a.as_ref(), par);
    if let Some(c) = &c_full {
        if !full_rank(c, &x) {
            return None;
        }
    }
    Some(x)
}

/// Fills `a` with the lower triangle of S'' = S' + (C + λI), S' = the test second moment about
/// the train mean (S + δδᵀ).
fn fill_s2(train: &Moments, test: &Moments, delta: &[f64], lambda: f64, a: &mut Mat<f64>) {
    a.fill(0.0);
    test.add_cov_lower(a, 1.0);
    train.add_cov_lower(a, 1.0);
    for c in 0..a.ncols() {
        let col = &mut a.col_as_slice_mut(c)[c..];
        for (v, &dr) in col.iter_mut().zip(&delta[c..]) {
            *v += dr * delta[c];
        }
        col[0] += lambda;
    }
}

/// The product of two lower triangular matrices (Z = X L'').
fn lower_times_lower(x: MatRef<'_, f64>, l: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    let d = x.nrows();
    let mut z = Mat::<f64>::zeros(d, d);
    triangular::matmul(
        z.as_mut(),
        BlockStructure::TriangularLower,
        Accum::Replace,
        x,
        BlockStructure::TriangularLower,
        l,
        BlockStructure::TriangularLower,
        1.0,
        par,
    );
    z
}

/// Per dimension of model `i`, (SSR/n', SST/n') of its group fit: `x` = L⁻¹, `z` = X L'' (or
/// its f32 copy `z32` under [`Arithmetic::MixedF32`]), `sst` the test variances. `None` when
/// P_ii has no Cholesky factor.
fn group_parts(
    train: &Moments,
    i: usize,
    x: MatRef<'_, f64>,
    z: MatRef<'_, f64>,
    z32: Option<&Mat<f32>>,
    sst: &[f64],
    par: Par,
) -> Option<Vec<(f64, f64)>> {
    let d = x.nrows();
    let r = train.range(i);
    let (o, di) = (r.start, r.len());
    let xi = x.submatrix(o, o, d - o, di);
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
    let rf = pii.llt(Side::Lower).ok()?;
    // Ũ = P_ii⁻¹ X_:,iᵀ = R⁻ᵀ Uᵀ: its rows map w to the residual dimensions, and row k has
    // squared norm (P_ii⁻¹)_kk, the train residual variance of dimension k, the same scale
    // as the test residual, which keeps the f32 product's error relative.
    let mut ut = xi.transpose().to_owned();
    rf.L().solve_lower_triangular_in_place(ut.as_mut());
    rf.L()
        .transpose()
        .solve_upper_triangular_in_place(ut.as_mut());
    let g = match z32 {
        None => row_norms2(block_rows(ut.as_ref(), z, o, 1.0, par).as_ref()),
        Some(z32) => {
            let g32 = block_rows(to_f32(ut.as_ref()).as_ref(), z32.as_ref(), o, 1.0f32, par);
            row_norms2(g32.as_ref())
        }
    };
    // SSR per dimension = ‖row of Ũ Z‖² (test + the added I) − ‖row of Ũ‖² (the I part).
    let (both, train_part) = (g, row_norms2(ut.as_ref()));
    Some(
        (0..di)
            .map(|k| ((both[k] - train_part[k]).max(0.0), sst[o + k]))
            .collect(),
    )
}

/// Squared Euclidean norm of every row, accumulated in f64 (column-major walk on slices).
fn row_norms2<T: Copy + Into<f64>>(a: MatRef<'_, T>) -> Vec<f64> {
    let mut out = vec![0.0; a.nrows()];
    for c in 0..a.ncols() {
        let col = a.col(c);
        for (k, o) in out.iter_mut().enumerate() {
            let v: f64 = col[k].into();
            *o += v * v;
        }
    }
    out
}

/// An f32 copy of an f64 matrix (column by column).
fn to_f32(a: MatRef<'_, f64>) -> Mat<f32> {
    let mut out = Mat::<f32>::zeros(a.nrows(), a.ncols());
    for c in 0..a.ncols() {
        let src = a.col(c);
        for (k, v) in out.col_as_slice_mut(c).iter_mut().enumerate() {
            *v = src[k] as f32;
        }
    }
    out
}

/// The full symmetric matrix whose lower triangle `a` holds.
fn symmetric_from_lower(a: MatRef<'_, f64>) -> Mat<f64> {
    let n = a.nrows();
    Mat::from_fn(n, n, |r, c| if r >= c { a[(r, c)] } else { a[(c, r)] })
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
    fn unequal_widths_take_the_dense_paths_and_equal_single_fits() {
        // Widths 3, 7, 5, 2: the reused pairwise panels are sliced differently for every basis.
        let widths = [3usize, 7, 5, 2];
        let names: Vec<String> = (0..4).map(|k| format!("m{k}")).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut split = |n: usize| {
            let mut rows = Vec::with_capacity(n * 17);
            for _ in 0..n {
                let z: Vec<f64> = (0..6).map(|_| rng.sample(StandardNormal)).collect();
                for k in 0..17 {
                    let e: f64 = rng.sample(StandardNormal);
                    rows.push((z[k % 6] * (1.0 + k as f64 / 9.0) + 0.3 * e + 1.5) as f32);
                }
            }
            let mut m = Moments::new(names.clone(), widths.to_vec()).unwrap();
            m.update_stacked(&rows).unwrap();
            m
        };
        let (train, test) = (split(500), split(200));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for ridge in [Ridge::REFERENCE, Ridge::Fixed(0.5)] {
            let pr = pairwise_r2(&train, &test, ridge).unwrap();
            for i in 0..4 {
                for j in (0..4).filter(|&j| j != i) {
                    let single = subset_r2(&train, &test, refs[i], &[refs[j]], ridge).unwrap();
                    let got = pr.get(i, j);
                    assert!(
                        (got - single).abs() < 1e-10 * (1.0 + single.abs()),
                        "{ridge:?} ({i},{j}): {got} vs {single}"
                    );
                }
            }
            let group = group_r2(&train, &test, ridge).unwrap();
            let direct = group_r2_direct(&train, &test, ridge).unwrap();
            assert_eq!(group.method, GroupMethod::Precision);
            for (a, b) in group.r2.iter().zip(&direct.r2) {
                assert!((a - b).abs() < 1e-10, "{ridge:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn whitened_path_reproduces_the_closed_form_on_population_moments() {
        // 4 × 6, and 3 × 100: D = 300 > dense::BLOCK takes the recursive Cholesky.
        for (models, dim, latent) in [(4, 6, 9), (3, 100, 150)] {
            let p = Planted::new(PlantedSpec {
                models,
                dim,
                latent,
                ..PlantedSpec::default()
            })
            .unwrap();
            closed_form_case(&p);
        }
    }

    fn closed_form_case(p: &Planted) {
        let m = p.population_moments(10_000).unwrap();
        let truth = p.group_r2().unwrap();
        assert!(m.dim() <= 6 * 4 || m.dim() > dense::BLOCK);
        for arithmetic in [Arithmetic::F64, Arithmetic::MixedF32] {
            let g = group_r2_with(&m, &m, Ridge::None, arithmetic).unwrap();
            assert_ne!(g.method, GroupMethod::Direct);
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
