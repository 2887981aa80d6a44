//! A small dense row-major `f32` matrix, the currency of this crate's API.

use serde::{Deserialize, Serialize};

use crate::error::{IcaError, Result};

/// Dense row-major `f32` matrix: element (r, c) is `data[r * cols + c]`.
///
/// Data matrices are `[n, D]`: one sample (word vector) per row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawMatrix")]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

/// The serialised form, checked by [`Matrix::new`] before it becomes a [`Matrix`].
#[derive(Deserialize)]
struct RawMatrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl TryFrom<RawMatrix> for Matrix {
    type Error = IcaError;

    fn try_from(r: RawMatrix) -> Result<Self> {
        Matrix::new(r.rows, r.cols, r.data)
    }
}

impl Matrix {
    /// Wraps row-major `data` of shape `[rows, cols]`; errors when the length does not match.
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Result<Self> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(IcaError::Shape(format!(
                "{} values cannot fill a {rows}x{cols} matrix",
                data.len()
            )));
        }
        Ok(Self { rows, cols, data })
    }

    /// The all-zero `[rows, cols]` matrix.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// The `n x n` identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Self::zeros(n, n);
        for i in 0..n {
            m.data[i * n + i] = 1.0;
        }
        m
    }

    /// Builds a matrix from a function of (row, column).
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> f32) -> Self {
        let mut data = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                data.push(f(r, c));
            }
        }
        Self { rows, cols, data }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The row-major values.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The row-major values, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Consumes the matrix, returning its row-major values.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }

    /// Element (r, c).
    pub fn get(&self, r: usize, c: usize) -> f32 {
        self.data[r * self.cols + c]
    }

    /// Row `r` as a slice.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The transpose.
    pub fn transpose(&self) -> Self {
        Self::from_fn(self.cols, self.rows, |r, c| self.get(c, r))
    }

    /// Matrix product `self * rhs` (f32 storage, computed by faer).
    pub fn matmul(&self, rhs: &Matrix) -> Result<Matrix> {
        if self.cols != rhs.rows {
            return Err(IcaError::Shape(format!(
                "cannot multiply {}x{} by {}x{}",
                self.rows, self.cols, rhs.rows, rhs.cols
            )));
        }
        let mut out = Matrix::zeros(self.rows, rhs.cols);
        faer::linalg::matmul::matmul(
            faer::MatMut::from_row_major_slice_mut(&mut out.data, self.rows, rhs.cols),
            faer::Accum::Replace,
            self.view(),
            rhs.view(),
            1.0f32,
            faer::Par::rayon(0),
        );
        Ok(out)
    }

    /// Frobenius norm, accumulated in f64.
    pub fn frobenius_norm(&self) -> f64 {
        self.data
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt()
    }

    /// Errors with the position of the first NaN or infinity.
    pub fn check_finite(&self) -> Result<()> {
        match self.data.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(i) => Err(IcaError::NonFinite {
                row: i / self.cols.max(1),
                col: i % self.cols.max(1),
                value: self.data[i],
            }),
        }
    }

    /// faer view of the same memory.
    pub(crate) fn view(&self) -> faer::MatRef<'_, f32> {
        faer::MatRef::from_row_major_slice(&self.data, self.rows, self.cols)
    }
}
