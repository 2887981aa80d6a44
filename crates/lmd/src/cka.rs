//! Similarity measures of the field from the same moments: linear CKA (Kornblith et al., 2019)
//! and the mean squared canonical correlation (a CCA-based R²), for every pair of models.

use faer::Side;

use crate::error::{LmdError, Result};
use crate::moments::Moments;
use crate::pair_matrix::PairMatrix;

/// Linear CKA of every pair of models: ‖C_ij‖²_F / (‖C_ii‖_F ‖C_jj‖_F) with centred covariances
/// (symmetric, diagonal 1). Errors when a model has zero variance.
pub fn linear_cka(m: &Moments) -> Result<PairMatrix> {
    m.require_samples(2, "linear CKA")?;
    let k = m.names().len();
    let block = |i: usize, j: usize| {
        let r: Vec<usize> = m.range(i).collect();
        let c: Vec<usize> = m.range(j).collect();
        m.cov_block(&r, &c).squared_norm_l2()
    };
    let self_norm: Vec<f64> = (0..k).map(|i| block(i, i).sqrt()).collect();
    if let Some(i) = self_norm.iter().position(|&x| x.is_nan() || x <= 0.0) {
        return Err(LmdError::InvalidArgument(format!(
            "linear CKA: model {} has zero variance",
            m.names()[i]
        )));
    }
    let mut values = vec![1.0; k * k];
    for i in 0..k {
        for j in 0..i {
            let v = block(i, j) / (self_norm[i] * self_norm[j]);
            values[i * k + j] = v;
            values[j * k + i] = v;
        }
    }
    Ok(PairMatrix {
        names: m.names().to_vec(),
        values,
    })
}

/// Mean squared canonical correlation of every pair: ‖L_i⁻¹ C_ij L_j⁻ᵀ‖²_F / min(d_i, d_j),
/// with C_ii + λI = L_i L_iᵀ (λ ≥ 0 keeps near-singular blocks invertible). Symmetric, in
/// [0, 1]; it is the average R² of the canonical directions.
pub fn cca_r2(m: &Moments, lambda: f64) -> Result<PairMatrix> {
    if !lambda.is_finite() || lambda < 0.0 {
        return Err(LmdError::InvalidArgument(format!(
            "CCA ridge {lambda} must be finite and ≥ 0"
        )));
    }
    let k = m.names().len();
    for i in 0..k {
        if m.n() <= m.widths()[i] as u64 {
            return Err(LmdError::TooFewSamples {
                what: format!("CCA of {}", m.names()[i]),
                n: m.n(),
                dim: m.widths()[i] + 1,
            });
        }
    }
    let cols: Vec<Vec<usize>> = (0..k).map(|i| m.range(i).collect()).collect();
    let factors = (0..k)
        .map(|i| {
            let mut c = m.cov_block(&cols[i], &cols[i]);
            for t in 0..c.nrows() {
                c[(t, t)] += lambda;
            }
            c.llt(Side::Lower).map_err(|_| LmdError::Singular {
                what: format!("CCA: covariance of {} with ridge {lambda:e}", m.names()[i]),
                rank: 0,
                dim: c.nrows(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut values = vec![1.0; k * k];
    for i in 0..k {
        for j in 0..i {
            let c_ij = m.cov_block(&cols[i], &cols[j]);
            // K = L_i⁻¹ C_ij L_j⁻ᵀ: two triangular solves.
            let mut left = c_ij;
            factors[i]
                .L()
                .solve_lower_triangular_in_place(left.as_mut());
            let mut kt = left.transpose().to_owned();
            factors[j].L().solve_lower_triangular_in_place(kt.as_mut());
            let v = kt.squared_norm_l2() / cols[i].len().min(cols[j].len()) as f64;
            values[i * k + j] = v;
            values[j * k + i] = v;
        }
    }
    Ok(PairMatrix {
        names: m.names().to_vec(),
        values,
    })
}
