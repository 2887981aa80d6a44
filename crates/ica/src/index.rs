//! The Amari index: how far an estimated unmixing is from separating the true sources.

use crate::error::{IcaError, Result};
use crate::matrix::Matrix;

/// Normalised absolute-value Amari index of the global system `P = W_total · A`.
///
/// `w_total` `[m, D]` maps observations to estimated sources (e.g. ICA's `W` times the PCA
/// whitening transpose `Kᵀ`), `a` `[D, m]` maps true sources to observations (`x = A s`). With
/// `p_ij = |P_ij|`,
///
/// ```text
/// AI(P) = 1 / (2m(m−1)) · [ Σ_i (Σ_j p_ij / max_j p_ij − 1) + Σ_j (Σ_i p_ij / max_i p_ij − 1) ]
/// ```
///
/// Each of the `2m` bracketed terms lies in `[0, m−1]`, so `AI ∈ [0, 1]`: 0 exactly when `P` is
/// a scaled permutation (perfect separation up to order, sign and scale), 1 when every entry of
/// `P` has the same magnitude. It is invariant to the sign and order of the estimates, not to
/// their scale (scaling a row of `P` leaves its row term and changes the column terms); it is 0
/// at every scaled permutation. `m = 1` gives 0.
pub fn amari_index(w_total: &Matrix, a: &Matrix) -> Result<f64> {
    let (m, big_d) = w_total.shape();
    if a.rows() != big_d || a.cols() != m {
        return Err(IcaError::Shape(format!(
            "Amari index needs W [m, D] and A [D, m]; got W {m}x{big_d} and A {}x{}",
            a.rows(),
            a.cols()
        )));
    }
    w_total.check_finite()?;
    a.check_finite()?;
    // P in f64: the index looks at small entries next to large ones.
    let mut p = vec![0.0f64; m * m];
    for i in 0..m {
        let w_row = w_total.row(i);
        for (k, &w) in w_row.iter().enumerate() {
            let w = f64::from(w);
            for (pj, &akj) in p[i * m..(i + 1) * m].iter_mut().zip(a.row(k)) {
                *pj += w * f64::from(akj);
            }
        }
    }
    amari_index_of(&p, m)
}

/// The Amari index (see [`amari_index`]) of a square global matrix `p` given row-major `[m, m]`.
pub fn amari_index_of(p: &[f64], m: usize) -> Result<f64> {
    if p.len() != m * m || m == 0 {
        return Err(IcaError::Shape(format!(
            "{} values are not a non-empty square {m}x{m} matrix",
            p.len()
        )));
    }
    if let Some(i) = p.iter().position(|v| !v.is_finite()) {
        // `f64::max` would pass over a NaN beside finite values and return a NaN index.
        return Err(IcaError::NonFinite {
            row: i / m,
            col: i % m,
            value: p[i] as f32,
        });
    }
    if m == 1 {
        return Ok(0.0);
    }
    let abs: Vec<f64> = p.iter().map(|v| v.abs()).collect();
    let mut total = 0.0;
    for i in 0..m {
        let row = &abs[i * m..(i + 1) * m];
        total += ratio_term(row.iter().copied())?;
        total += ratio_term((0..m).map(|r| abs[r * m + i]))?;
    }
    Ok(total / (2.0 * m as f64 * (m as f64 - 1.0)))
}

/// `Σ v / max v − 1` of one row or column; an all-zero line cannot be separated.
fn ratio_term(values: impl Iterator<Item = f64> + Clone) -> Result<f64> {
    let max = values.clone().fold(0.0f64, f64::max);
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return Err(IcaError::Shape(
            "the global matrix W·A has an all-zero or non-finite row or column".into(),
        ));
    }
    Ok(values.map(|v| v / max).sum::<f64>() - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_permutation_is_zero_and_uniform_is_one() {
        let m = 4;
        let mut p = vec![0.0; m * m];
        for (i, j, s) in [(0, 2, 3.0), (1, 0, -0.5), (2, 3, 7.0), (3, 1, -2.0)] {
            p[i * m + j] = s;
        }
        assert_eq!(amari_index_of(&p, m).unwrap(), 0.0);
        let ones = vec![-2.0; m * m];
        assert!((amari_index_of(&ones, m).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn hand_computed_two_by_two() {
        // rows: (1, .5) -> .5, (.25, 1) -> .25; columns: (1, .25) -> .25, (.5, 1) -> .5
        let p = [1.0, 0.5, 0.25, 1.0];
        let ai = amari_index_of(&p, 2).unwrap();
        assert!((ai - 1.5 / 4.0).abs() < 1e-12, "{ai}");
        // Not scale-invariant: row 0 times 10 keeps the rows' .5, .25 but turns the columns'
        // .25, .5 into .025, .2.
        let scaled = [10.0, 5.0, 0.25, 1.0];
        let ai = amari_index_of(&scaled, 2).unwrap();
        assert!((ai - 0.975 / 4.0).abs() < 1e-12, "{ai}");
        // A NaN beside finite values is refused, not passed over into a NaN index.
        let nan = [1.0, f64::NAN, 0.0, 1.0];
        assert!(matches!(
            amari_index_of(&nan, 2),
            Err(IcaError::NonFinite { row: 0, col: 1, .. })
        ));
    }

    #[test]
    fn product_with_inverse_is_zero_and_shapes_are_checked() {
        let a = Matrix::new(2, 2, vec![2.0, 1.0, 1.0, 1.0]).unwrap();
        let w = Matrix::new(2, 2, vec![1.0, -1.0, -1.0, 2.0]).unwrap();
        assert!(amari_index(&w, &a).unwrap() < 1e-12);
        let bad = Matrix::zeros(3, 2);
        assert!(matches!(amari_index(&w, &bad), Err(IcaError::Shape(_))));
        assert!(matches!(
            amari_index(&Matrix::zeros(2, 2), &a),
            Err(IcaError::Shape(_))
        ));
    }
}
