//! The elementwise part of an LSTM step (PyTorch gate order i, f, g, o) and its backward pass,
//! for gate pre-activations a = W_ih x + b + W_hh h already summed.

use crate::exp::exp_lane;

/// σ(x) = 1 / (1 + e^−x); 0 and 1 at the tails, NaN kept.
#[inline(always)]
fn sigmoid_lane(x: f32) -> f32 {
    1.0 / (1.0 + exp_lane(-x))
}

/// tanh(x) = sign(x)·(1 − e^−2|x|)/(1 + e^−2|x|), with its Taylor series below |x| = 0.02,
/// where the difference would cancel (series error < 1e-13 there). NaN kept.
#[inline(always)]
fn tanh_lane(x: f32) -> f32 {
    let ax = x.abs();
    let t = exp_lane(-2.0 * ax);
    let r = (1.0 - t) / (1.0 + t);
    let x2 = x * x;
    let small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0)));
    let y = if x < 0.0 { -r } else { r };
    let y = if ax < 0.02 { small } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// The activations of one unit: (i, f, g, o).
#[inline(always)]
fn gates_of(a: &[f32], k: usize, cell: usize) -> (f32, f32, f32, f32) {
    (
        sigmoid_lane(a[k]),
        sigmoid_lane(a[cell + k]),
        tanh_lane(a[2 * cell + k]),
        sigmoid_lane(a[3 * cell + k]),
    )
}

#[inline(always)]
fn forward_body(gates: &[f32], c_prev: &[f32], cell: usize, h: &mut [f32], c: &mut [f32]) {
    let rows = gates.chunks_exact(4 * cell).zip(c_prev.chunks_exact(cell));
    for ((a, cp), (hr, cr)) in rows.zip(h.chunks_exact_mut(cell).zip(c.chunks_exact_mut(cell))) {
        for k in 0..cell {
            let (i, f, g, o) = gates_of(a, k, cell);
            let cn = f * cp[k] + i * g;
            cr[k] = cn;
            hr[k] = o * tanh_lane(cn);
        }
    }
}

dispatch! {
    /// One LSTM step on B rows of cell width C = `cell`: from the gate pre-activations `gates`
    /// [B, 4C] (i, f, g, o blocks) and the previous cell state `c_prev` [B, C], writes
    /// c = σ(f)·c_prev + σ(i)·tanh(g) and h = σ(o)·tanh(c) into `h`, `c` [B, C].
    pub fn lstm_cell_forward(gates: &[f32], c_prev: &[f32], cell: usize, h: &mut [f32], c: &mut [f32]) => forward_body
}

#[inline(always)]
fn backward_body(
    gates: &[f32],
    c_prev: &[f32],
    cell: usize,
    dh: &[f32],
    dc: &[f32],
    dgates: &mut [f32],
    dc_prev: &mut [f32],
) {
    let inputs = gates
        .chunks_exact(4 * cell)
        .zip(c_prev.chunks_exact(cell))
        .zip(dh.chunks_exact(cell).zip(dc.chunks_exact(cell)));
    let outputs = dgates
        .chunks_exact_mut(4 * cell)
        .zip(dc_prev.chunks_exact_mut(cell));
    for (((a, cp), (dhr, dcr)), (da, dcp)) in inputs.zip(outputs) {
        for k in 0..cell {
            let (i, f, g, o) = gates_of(a, k, cell);
            let tc = tanh_lane(f * cp[k] + i * g);
            // The cell state's total gradient: its own plus the path through h = o·tanh(c).
            let dct = dcr[k] + dhr[k] * o * (1.0 - tc * tc);
            da[k] = dct * g * i * (1.0 - i);
            da[cell + k] = dct * cp[k] * f * (1.0 - f);
            da[2 * cell + k] = dct * i * (1.0 - g * g);
            da[3 * cell + k] = dhr[k] * tc * o * (1.0 - o);
            dcp[k] = dct * f;
        }
    }
}

dispatch! {
    /// The backward pass of [`lstm_cell_forward`]: from the gradients `dh`, `dc` of its two
    /// outputs, writes the gradient of the gate pre-activations `dgates` [B, 4C] and of the
    /// previous cell state `dc_prev` [B, C] (activations are recomputed from `gates`).
    pub fn lstm_cell_backward(
        gates: &[f32],
        c_prev: &[f32],
        cell: usize,
        dh: &[f32],
        dc: &[f32],
        dgates: &mut [f32],
        dc_prev: &mut [f32],
    ) => backward_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::grid;

    /// f64 reference of one step: (h, c) per unit.
    fn step_f64(a: &[f64], cp: &[f64], cell: usize) -> (Vec<f64>, Vec<f64>) {
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let rows = cp.len() / cell;
        let (mut h, mut c) = (vec![0.0; rows * cell], vec![0.0; rows * cell]);
        for r in 0..rows {
            for k in 0..cell {
                let g = |j: usize| a[r * 4 * cell + j * cell + k];
                let cn = s(g(1)) * cp[r * cell + k] + s(g(0)) * g(2).tanh();
                c[r * cell + k] = cn;
                h[r * cell + k] = s(g(3)) * cn.tanh();
            }
        }
        (h, c)
    }

    #[test]
    fn activations_match_f64() {
        for x in grid(-30.0, 30.0, 60_001) {
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            assert!((sigmoid_lane(x) as f64 - s).abs() < 3e-7, "sigmoid({x})");
            let t = (x as f64).tanh();
            assert!((tanh_lane(x) as f64 - t).abs() < 3e-7, "tanh({x})");
        }
        assert!((tanh_lane(1e-6) - 1e-6).abs() < 1e-13);
        assert!(sigmoid_lane(f32::NAN).is_nan() && tanh_lane(f32::NAN).is_nan());
        assert_eq!(
            (tanh_lane(f32::INFINITY), tanh_lane(f32::NEG_INFINITY)),
            (1.0, -1.0)
        );
    }

    #[test]
    fn step_and_its_gradient_match_f64_finite_differences() {
        let (rows, cell) = (3, 5);
        let a: Vec<f32> = (0..rows * 4 * cell)
            .map(|i| ((i * 37 % 29) as f32) * 0.2 - 2.8)
            .collect();
        let cp: Vec<f32> = (0..rows * cell).map(|i| (i as f32 * 0.7).sin()).collect();
        let (mut h, mut c) = (vec![0f32; rows * cell], vec![0f32; rows * cell]);
        lstm_cell_forward(&a, &cp, cell, &mut h, &mut c);
        let a64: Vec<f64> = a.iter().map(|&v| v as f64).collect();
        let cp64: Vec<f64> = cp.iter().map(|&v| v as f64).collect();
        let (h64, c64) = step_f64(&a64, &cp64, cell);
        for k in 0..rows * cell {
            assert!((h[k] as f64 - h64[k]).abs() < 1e-6 && (c[k] as f64 - c64[k]).abs() < 1e-6);
        }
        // Loss Σ wh·h + wc·c; its gradient by central differences in f64.
        let wh: Vec<f64> = (0..rows * cell).map(|i| (i as f64 * 0.3).cos()).collect();
        let wc: Vec<f64> = (0..rows * cell).map(|i| (i as f64 * 0.5).sin()).collect();
        let loss = |a: &[f64], cp: &[f64]| -> f64 {
            let (h, c) = step_f64(a, cp, cell);
            (0..h.len()).map(|k| wh[k] * h[k] + wc[k] * c[k]).sum()
        };
        let (dh, dc): (Vec<f32>, Vec<f32>) = (
            wh.iter().map(|&v| v as f32).collect(),
            wc.iter().map(|&v| v as f32).collect(),
        );
        let (mut da, mut dcp) = (vec![0f32; a.len()], vec![0f32; cp.len()]);
        lstm_cell_backward(&a, &cp, cell, &dh, &dc, &mut da, &mut dcp);
        let check = |name: &str, got: &[f32], base: &[f64], at: &dyn Fn(&[f64]) -> f64| {
            let e = 1e-6;
            for j in 0..base.len() {
                let (mut p, mut m) = (base.to_vec(), base.to_vec());
                p[j] += e;
                m[j] -= e;
                let want = (at(&p) - at(&m)) / (2.0 * e);
                let g = got[j] as f64;
                assert!((g - want).abs() < 1e-5, "{name}[{j}] {g} vs {want}");
            }
        };
        check("dgates", &da, &a64, &|a| loss(a, &cp64));
        check("dc_prev", &dcp, &cp64, &|cp| loss(&a64, cp));
    }
}
