//! LayerNorm rows: the post-LN residual step of encoder blocks, and the plain LayerNorm with
//! its backward pass for training.

use crate::reduce::lane_sum;
use crate::LANES;

/// Σ v² in 8 lanes (the variance of a centred row).
#[inline(always)]
fn lane_sum_sq(xs: &[f32]) -> f32 {
    let mut sq = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in sq.iter_mut().zip(c) {
            *a += *v * *v;
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    sq.iter().sum::<f32>() + tail
}

/// (mean, 1/√(var + eps)) of a row, biased variance as torch.
#[inline(always)]
fn row_stats(row: &[f32], centred: &mut [f32], eps: f32) -> (f32, f32) {
    let inv_h = 1.0 / row.len() as f32;
    let mean = lane_sum(row) * inv_h;
    for (c, v) in centred.iter_mut().zip(row) {
        *c = *v - mean;
    }
    let var = lane_sum_sq(centred) * inv_h;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `row ← (row − mean)·rstd·gamma + beta`, in place.
#[inline(always)]
fn normalize_in_place(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let inv_h = 1.0 / row.len() as f32;
    let mean = lane_sum(row) * inv_h;
    for v in row.iter_mut() {
        *v -= mean;
    }
    let inv_std = 1.0 / (lane_sum_sq(row) * inv_h + eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
        *v = *v * inv_std * *g + *b;
    }
}

#[inline(always)]
fn residual_ln_body(
    rows: &mut [f32],
    bias: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    let h = gamma.len();
    for (row, res) in rows.chunks_exact_mut(h).zip(residual.chunks_exact(h)) {
        for ((v, r), b) in row.iter_mut().zip(res).zip(bias) {
            *v = *v + *b + *r;
        }
        normalize_in_place(row, gamma, beta, eps);
    }
}

#[inline(always)]
fn layer_norm_body(rows: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    for row in rows.chunks_exact_mut(gamma.len()) {
        normalize_in_place(row, gamma, beta, eps);
    }
}

dispatch! {
    /// LayerNorm on whole rows in place: `rows ← (rows − mean)/√(var + eps)·gamma + beta`
    /// (row width = `gamma.len()`, biased variance, as torch).
    pub fn layer_norm_rows(rows: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) => layer_norm_body
}

#[inline(always)]
fn layer_norm_backward_body(
    x: &[f32],
    dy: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let h = gamma.len();
    let inv_h = 1.0 / h as f32;
    for ((xr, gr), dr) in x
        .chunks_exact(h)
        .zip(dy.chunks_exact(h))
        .zip(dx.chunks_exact_mut(h))
    {
        // dr holds x − mean, then x̂, then the result.
        let (_, rstd) = row_stats(xr, dr, eps);
        for v in dr.iter_mut() {
            *v *= rstd;
        }
        // With ĝ = dy·gamma: a = Σ ĝ and b = Σ ĝ·x̂, in 8 lanes then the tail (a fixed order).
        let (mut a, mut b) = ([0f32; LANES], [0f32; LANES]);
        let (mut ta, mut tb) = (0f32, 0f32);
        let (xh8, g8, m8) = (
            dr.chunks_exact(LANES),
            gr.chunks_exact(LANES),
            gamma.chunks_exact(LANES),
        );
        let tails = (xh8.remainder(), g8.remainder(), m8.remainder());
        for ((xc, gc), mc) in xh8.zip(g8).zip(m8) {
            for l in 0..LANES {
                let gh = gc[l] * mc[l];
                a[l] += gh;
                b[l] += gh * xc[l];
            }
        }
        for ((xh, g), gm) in tails.0.iter().zip(tails.1).zip(tails.2) {
            ta += *g * *gm;
            tb += *g * *gm * *xh;
        }
        let (ma, mb) = (
            (a.iter().sum::<f32>() + ta) * inv_h,
            (b.iter().sum::<f32>() + tb) * inv_h,
        );
        for ((((d, g), gm), dg), db) in dr
            .iter_mut()
            .zip(gr)
            .zip(gamma)
            .zip(dgamma.iter_mut())
            .zip(dbeta.iter_mut())
        {
            let xh = *d;
            *dg += *g * xh;
            *db += *g;
            *d = rstd * (*g * *gm - ma - xh * mb);
        }
    }
}

dispatch! {
    /// The backward pass of [`layer_norm_rows`] on whole rows: from the input rows `x` and the
    /// output gradient `dy`, writes dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = dy·gamma and
    /// x̂ the normalised row, and ADDS Σ_rows dy·x̂ to `dgamma` and Σ_rows dy to `dbeta` (so
    /// row blocks can accumulate in a caller-chosen, fixed order).
    pub fn layer_norm_backward_rows(
        x: &[f32],
        dy: &[f32],
        gamma: &[f32],
        eps: f32,
        dx: &mut [f32],
        dgamma: &mut [f32],
        dbeta: &mut [f32],
    ) => layer_norm_backward_body
}

dispatch! {
    /// Post-LN residual step on whole rows:
    /// `rows ← LayerNorm(rows + bias + residual)·gamma + beta` (row width = `gamma.len()`,
    /// biased variance, as torch; `bias` is the preceding Linear's).
    pub fn residual_layer_norm(
        rows: &mut [f32],
        bias: &[f32],
        residual: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
    ) => residual_ln_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// f64 LayerNorm of one row and the vector-Jacobian product by central differences.
    fn ln_f64(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
        let h = x.len() as f64;
        let mean = x.iter().sum::<f64>() / h;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / h;
        let r = 1.0 / (var + eps).sqrt();
        x.iter()
            .zip(g)
            .zip(b)
            .map(|((v, g), b)| (v - mean) * r * g + b)
            .collect()
    }

    #[test]
    fn forward_and_backward_match_f64_finite_differences() {
        let (rows, h, eps) = (3, 37, 1e-5f32);
        let x: Vec<f32> = (0..rows * h)
            .map(|i| (i as f32 * 0.37).sin() * 2.0 + (i / h) as f32)
            .collect();
        let dy: Vec<f32> = (0..rows * h).map(|i| (i as f32 * 0.23).cos()).collect();
        let g: Vec<f32> = (0..h).map(|i| 1.0 + i as f32 * 0.03).collect();
        let b: Vec<f32> = (0..h).map(|i| i as f32 * -0.02).collect();
        let mut y = x.clone();
        layer_norm_rows(&mut y, &g, &b, eps);
        let (mut dx, mut dg, mut db) = (vec![0f32; rows * h], vec![0.5f32; h], vec![0.25f32; h]);
        layer_norm_backward_rows(&x, &dy, &g, eps, &mut dx, &mut dg, &mut db);
        let f64s = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
        let (g64, b64) = (f64s(&g), f64s(&b));
        let step = 1e-6;
        let (mut want_dg, mut want_db) = (vec![0.5f64; h], vec![0.25f64; h]);
        for r in 0..rows {
            let xr = f64s(&x[r * h..(r + 1) * h]);
            let dyr = f64s(&dy[r * h..(r + 1) * h]);
            let yr = ln_f64(&xr, &g64, &b64, eps as f64);
            for k in 0..h {
                assert!((y[r * h + k] as f64 - yr[k]).abs() < 2e-6, "y[{r},{k}]");
                // d/dx_k of Σ dy·y, by central differences.
                let mut p = xr.clone();
                p[k] += step;
                let mut m = xr.clone();
                m[k] -= step;
                let dot = |v: &[f64]| -> f64 {
                    ln_f64(v, &g64, &b64, eps as f64)
                        .iter()
                        .zip(&dyr)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                let want = (dot(&p) - dot(&m)) / (2.0 * step);
                let got = dx[r * h + k] as f64;
                assert!(
                    (got - want).abs() < 2e-4 * want.abs().max(1.0),
                    "dx[{r},{k}] {got} vs {want}"
                );
                // dgamma and dbeta accumulate onto what the caller passed in.
                want_dg[k] += dyr[k] * (yr[k] - b64[k]) / g64[k];
                want_db[k] += dyr[k];
            }
        }
        for k in 0..h {
            assert!((dg[k] as f64 - want_dg[k]).abs() < 1e-5, "dgamma[{k}]");
            assert!((db[k] as f64 - want_db[k]).abs() < 1e-5, "dbeta[{k}]");
        }
    }

    #[test]
    fn matches_candles_layer_norm_of_the_sum() {
        let dev = Device::Cpu;
        let (rows, h) = (3, 37);
        let a: Vec<f32> = (0..rows * h)
            .map(|i| (i as f32 * 0.37).sin() * 3.0)
            .collect();
        let r: Vec<f32> = (0..rows * h).map(|i| (i as f32 * 0.11).cos()).collect();
        let g: Vec<f32> = (0..h).map(|i| 1.0 + i as f32 * 0.01).collect();
        let b: Vec<f32> = (0..h).map(|i| i as f32 * -0.02).collect();
        let lin_b: Vec<f32> = (0..h).map(|i| (i as f32 * 0.7).cos() * 0.5).collect();
        let mut got = a.clone();
        residual_layer_norm(&mut got, &lin_b, &r, &g, &b, 1e-12);
        let sum = (Tensor::from_vec(a, (rows, h), &dev).unwrap()
            + Tensor::from_vec(r, (rows, h), &dev).unwrap())
        .unwrap()
        .broadcast_add(&Tensor::from_vec(lin_b, h, &dev).unwrap())
        .unwrap();
        let ln = candle_nn::LayerNorm::new(
            Tensor::from_vec(g, h, &dev).unwrap(),
            Tensor::from_vec(b, h, &dev).unwrap(),
            1e-12,
        );
        let want: Vec<f32> = candle_core::Module::forward(&ln, &sum)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 2e-6, "layer norm {g} vs {w}");
        }
    }
}
