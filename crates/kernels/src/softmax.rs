//! Softmax rows (attention) and the per-row negative log-likelihood with its gradient (the
//! fused output layer), each with one exponential per element.

use crate::exp::exp_lane;
use crate::reduce::{lane_max, lane_sum};

#[inline(always)]
fn softmax_body(row: &mut [f32], bias: &[f32], scale: f32) {
    for (v, b) in row.iter_mut().zip(bias) {
        *v = *v * scale + *b;
    }
    let m = lane_max(row);
    for v in row.iter_mut() {
        *v = exp_lane(*v - m);
    }
    let inv = 1.0 / lane_sum(row);
    for v in row.iter_mut() {
        *v *= inv;
    }
}

dispatch! {
    /// `row ← softmax(row·scale + bias)` (bias as long as the row: the additive key mask;
    /// −1e9 entries give exact zeros).
    pub fn softmax_row(row: &mut [f32], bias: &[f32], scale: f32) => softmax_body
}

#[inline(always)]
fn nll_body(row: &mut [f32], bias: &[f32], label: usize, scale: f32, grad: bool) -> f32 {
    for (v, b) in row.iter_mut().zip(bias) {
        *v += *b;
    }
    let m = lane_max(row);
    let target = row[label];
    // e^{z−m} is kept in the row, so the gradient is one multiply away: softmax = e^{z−m}/Σ.
    for v in row.iter_mut() {
        *v = exp_lane(*v - m);
    }
    let sum = lane_sum(row);
    let nll = m + sum.ln() - target;
    if grad {
        let k = scale / sum;
        for v in row.iter_mut() {
            *v *= k;
        }
        row[label] -= scale;
    }
    nll
}

dispatch! {
    /// One row of a fused output layer with cross-entropy: adds `bias` to the logits in `row`
    /// and returns −log softmax(row)\[label\]. With `grad`, `row` ends as
    /// scale·(softmax(row) − one-hot(label)), the logits' gradient; without, its contents are
    /// scratch. A NaN logit gives a NaN loss (and gradient). Panics if `label ≥ row.len()`.
    pub fn nll_row(row: &mut [f32], bias: &[f32], label: usize, scale: f32, grad: bool) -> f32 => nll_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn softmax_matches_candle_with_masked_keys() {
        let dev = Device::Cpu;
        let n = 37; // not a multiple of the lanes
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 101) as f32 * 0.173 - 8.0)
            .collect();
        let bias: Vec<f32> = (0..n)
            .map(|i| if i % 5 == 4 { -1e9 } else { 0.0 })
            .collect();
        let mut got = x.clone();
        softmax_row(&mut got, &bias, 0.5);
        let t = ((Tensor::from_vec(x.clone(), (1, n), &dev).unwrap() * 0.5).unwrap()
            + Tensor::from_vec(bias.clone(), (1, n), &dev).unwrap())
        .unwrap();
        let want: Vec<f32> = candle_nn::ops::softmax_last_dim(&t)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "softmax {g} vs {w}");
        }
        assert!(
            (4..n).step_by(5).all(|i| got[i] == 0.0),
            "masked keys get 0"
        );
    }

    fn logits(n: usize) -> (Vec<f32>, Vec<f32>) {
        let row = (0..n)
            .map(|i| ((i * 37 % 101) as f32) * 0.13 - 6.0)
            .collect();
        let bias = (0..n).map(|i| ((i % 7) as f32) * 0.2).collect();
        (row, bias)
    }

    #[test]
    fn nll_row_and_gradient_match_f64_softmax() {
        let (mut row, bias) = logits(1003);
        let z: Vec<f64> = row
            .iter()
            .zip(&bias)
            .map(|(&x, &b)| (x + b) as f64)
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
        let nll = nll_row(&mut row, &bias, 17, 0.5, true) as f64;
        assert!((nll - (lse - z[17])).abs() < 1e-5 * nll.abs().max(1.0));
        for (j, (&g, &v)) in row.iter().zip(&z).enumerate() {
            let want = 0.5 * ((v - lse).exp() - if j == 17 { 1.0 } else { 0.0 });
            assert!((g as f64 - want).abs() < 1e-7, "{j}: {g} vs {want}");
        }
    }

    #[test]
    fn nll_without_gradient_gives_the_same_loss_and_nan_propagates() {
        let (row, bias) = logits(77);
        let (mut a, mut b) = (row.clone(), row.clone());
        assert_eq!(
            nll_row(&mut a, &bias, 3, 1.0, true),
            nll_row(&mut b, &bias, 3, 1.0, false)
        );
        let mut bad = row.clone();
        bad[40] = f32::NAN;
        assert!(nll_row(&mut bad, &bias, 3, 1.0, true).is_nan());
        let mut bad = row;
        bad[3] = f32::NAN;
        assert!(nll_row(&mut bad, &bias, 3, 1.0, false).is_nan());
    }
}
