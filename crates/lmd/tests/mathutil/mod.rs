//! Shared helpers of the math tests: planted data and explicit (sample-level) references.
#![allow(dead_code)]

use lmd::moments::Moments;
use lmd::synthetic::{Planted, PlantedSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A planted structure and a train and a test split drawn from it, as stacked f32 rows.
pub struct Data {
    pub planted: Planted,
    pub train: Vec<f32>,
    pub test: Vec<f32>,
}

pub fn planted(spec: PlantedSpec, n_train: usize, n_test: usize, seed: u64) -> Data {
    let planted = Planted::new(spec).expect("valid spec");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let train = planted.sample(n_train, &mut rng);
    let test = planted.sample(n_test, &mut rng);
    Data {
        planted,
        train,
        test,
    }
}

/// Moments of stacked rows, fed in batches of `batch` rows.
pub fn moments_of(names: &[String], widths: &[usize], rows: &[f32], batch: usize) -> Moments {
    let mut m = Moments::new(names.to_vec(), widths.to_vec()).expect("valid models");
    let d: usize = widths.iter().sum();
    for chunk in rows.chunks(batch * d) {
        m.update_stacked(chunk).expect("finite rows");
    }
    m
}

/// Appends copies of the given columns' model blocks as new models (exact duplicates, or
/// `scale * x + shift` for collinear ones). Returns new rows, names and widths.
pub fn with_copy(
    rows: &[f32],
    names: &[String],
    widths: &[usize],
    of: usize,
    scale: f32,
    shift: f32,
    new_name: &str,
) -> (Vec<f32>, Vec<String>, Vec<usize>) {
    let d: usize = widths.iter().sum();
    let start: usize = widths[..of].iter().sum();
    let w = widths[of];
    let n = rows.len() / d;
    let mut out = Vec::with_capacity(n * (d + w));
    for r in 0..n {
        let row = &rows[r * d..(r + 1) * d];
        out.extend_from_slice(row);
        out.extend(row[start..start + w].iter().map(|x| scale * x + shift));
    }
    let mut names = names.to_vec();
    names.push(new_name.to_string());
    let mut widths = widths.to_vec();
    widths.push(w);
    (out, names, widths)
}

/// Rows of the stacked data as an f64 nalgebra matrix (n × D).
pub fn to_na(rows: &[f32], d: usize) -> nalgebra::DMatrix<f64> {
    let n = rows.len() / d;
    nalgebra::DMatrix::from_fn(n, d, |r, c| rows[r * d + c] as f64)
}

/// Columns of `x` selected by index.
pub fn select(x: &nalgebra::DMatrix<f64>, cols: &[usize]) -> nalgebra::DMatrix<f64> {
    nalgebra::DMatrix::from_fn(x.nrows(), cols.len(), |r, c| x[(r, cols[c])])
}

/// Population covariance (divide by n) of the columns of x, two-pass.
pub fn cov_na(x: &nalgebra::DMatrix<f64>) -> nalgebra::DMatrix<f64> {
    let n = x.nrows() as f64;
    let mean = x.row_mean();
    let mut c = x.clone();
    for mut row in c.row_iter_mut() {
        row -= &mean;
    }
    c.transpose() * &c / n
}

/// Column indices of model `i` in a stack of `widths`.
pub fn cols_of(widths: &[usize], models: &[usize]) -> Vec<usize> {
    let mut off = vec![0];
    for w in widths {
        off.push(off.last().unwrap() + w);
    }
    models.iter().flat_map(|&i| off[i]..off[i + 1]).collect()
}

/// Explicit pooled R² on sample rows: 1 − Σ‖u − W v − b‖² / Σ‖u − ū‖².
pub fn explicit_r2(
    x: &nalgebra::DMatrix<f64>,
    tcols: &[usize],
    bcols: &[usize],
    w: &faer::Mat<f64>,
    b: &[f64],
) -> f64 {
    let u = select(x, tcols);
    let v = select(x, bcols);
    let wn = nalgebra::DMatrix::from_fn(w.nrows(), w.ncols(), |r, c| w[(r, c)]);
    let bn = nalgebra::RowDVector::from_iterator(b.len(), b.iter().copied());
    let mut e = &u - &v * wn.transpose();
    for mut row in e.row_iter_mut() {
        row -= &bn;
    }
    let mean = u.row_mean();
    let mut uc = u.clone();
    for mut row in uc.row_iter_mut() {
        row -= &mean;
    }
    1.0 - e.norm_squared() / uc.norm_squared()
}
