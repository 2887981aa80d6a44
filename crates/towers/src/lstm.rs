//! A multi-layer LSTM run over time (PyTorch `nn.LSTM` gate order i, f, g, o), with the input
//! projection hoisted out of the time loop and PAD steps resetting the state to zero.

use candle_core::Tensor;

use crate::fused_lstm_cell::FusedLstmCell;
use crate::layers::{chunk_last, sigmoid, Linear};
use crate::params::Init;
use crate::Result;
use kernels::host::on_host_f32;

/// One LSTM step. `gx` [B, 4C] is the precomputed input part W_ih x_t + b, `w_hh_t` [C, 4C] the
/// transposed recurrent weight. Returns (h_t, c_t):
/// i, f, g, o = σ, σ, tanh, σ of (gx + h W_hhᵀ); c_t = f c + i g; h_t = o tanh(c_t).
/// f32 on CPU runs the elementwise part as one fused op; elsewhere [`composed_gates`].
pub fn lstm_cell(gx: &Tensor, h: &Tensor, c: &Tensor, w_hh_t: &Tensor) -> Result<(Tensor, Tensor)> {
    let gates = (gx + h.matmul(w_hh_t)?)?;
    if on_host_f32(&[&gates, c]) {
        let hc = gates
            .contiguous()?
            .apply_op2(&c.contiguous()?, FusedLstmCell)?;
        return Ok((hc.get(0)?, hc.get(1)?));
    }
    composed_gates(&gates, c)
}

/// The elementwise part of [`lstm_cell`] from tensor ops (any device or dtype; the fused op's
/// reference): (h_t, c_t) from the gate pre-activations [B, 4C] and c [B, C].
pub fn composed_gates(gates: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
    let parts = chunk_last(gates, 4)?;
    let i = sigmoid(&parts[0])?;
    let f = sigmoid(&parts[1])?;
    let g = parts[2].tanh()?;
    let o = sigmoid(&parts[3])?;
    let c = ((f * c)? + (i * g)?)?;
    let h = (o * c.tanh()?)?;
    Ok((h, c))
}

#[derive(Debug, Clone)]
struct LstmLayer {
    w_ih: Linear,
    w_hh: Tensor,
    cell: usize,
}

/// A stacked LSTM of cell width C followed by a projection Linear(C, H) (`h2o` in the released
/// code).
#[derive(Debug, Clone)]
pub struct Lstm {
    layers: Vec<LstmLayer>,
    h2o: Linear,
}

impl Lstm {
    /// `layer{i}.w_ih.*`, `layer{i}.w_hh`, `h2o.*`; LSTM weights U(-1/√C, 1/√C) as PyTorch.
    pub fn new(
        d_in: usize,
        cell: usize,
        d_out: usize,
        n_layers: usize,
        std: f64,
        init: Init<'_>,
    ) -> Result<Self> {
        let a = 1.0 / (cell as f64).sqrt();
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let li = init.pp(format!("layer{l}"));
            let inp = if l == 0 { d_in } else { cell };
            let w = li.pp("w_ih").uniform("weight", &[4 * cell, inp], a)?;
            let b = li.pp("w_ih").uniform_no_decay("bias", &[4 * cell], a)?;
            layers.push(LstmLayer {
                w_ih: Linear::from_parts(w, Some(b)),
                w_hh: li.uniform("w_hh", &[4 * cell, cell], a)?,
                cell,
            });
        }
        Ok(Self {
            layers,
            h2o: Linear::new(cell, d_out, true, std, init.pp("h2o"))?,
        })
    }

    /// Runs left to right over `x` [B, T, D]; `mask` [B, T, 1] (1 real, 0 PAD) zeroes the state
    /// at PAD steps, so a sequence read after PADs starts fresh. Returns [B, T, H].
    pub fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let mut seq = x.clone();
        for layer in &self.layers {
            let gx_all = layer.w_ih.forward(&seq)?;
            let w_hh_t = layer.w_hh.to_dtype(x.dtype())?.t()?.contiguous()?;
            let mut h = Tensor::zeros((b, layer.cell), x.dtype(), x.device())?;
            let mut c = h.clone();
            let mut outs = Vec::with_capacity(t);
            for s in 0..t {
                let gx = gx_all.narrow(1, s, 1)?.squeeze(1)?;
                let m = mask.narrow(1, s, 1)?.squeeze(1)?;
                let (h2, c2) = lstm_cell(&gx, &h, &c, &w_hh_t)?;
                h = h2.broadcast_mul(&m)?;
                c = c2.broadcast_mul(&m)?;
                outs.push(h.clone());
            }
            seq = Tensor::stack(&outs, 1)?;
        }
        self.h2o.forward(&seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::norm::tests::check_grads;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    fn var(n: usize, shape: &[usize], seed: u64) -> Var {
        let d: Vec<f64> = (0..n)
            .map(|i| ((((i as u64) * 6151 + seed * 3571) % 997) as f64 / 498.5) - 1.0)
            .collect();
        Var::from_tensor(&Tensor::from_vec(d, shape, &Device::Cpu).unwrap()).unwrap()
    }

    #[test]
    fn lstm_cell_matches_finite_differences() {
        let (b, c) = (2, 3);
        let gx = var(b * 4 * c, &[b, 4 * c], 1);
        let h = var(b * c, &[b, c], 2);
        let cc = var(b * c, &[b, c], 3);
        let w = var(c * 4 * c, &[c, 4 * c], 4);
        let f = || {
            let (h2, c2) =
                lstm_cell(gx.as_tensor(), h.as_tensor(), cc.as_tensor(), w.as_tensor()).unwrap();
            ((h2 * 1.3).unwrap() + (c2 * 0.7).unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
        };
        check_grads(&[gx.clone(), h.clone(), cc.clone(), w.clone()], &f);
    }

    #[test]
    fn fused_f32_cell_matches_the_composed_gates_values_and_gradients() {
        let dev = Device::Cpu;
        let f32var = |n: usize, shape: &[usize], seed: u64| {
            let v = var(n, shape, seed)
                .as_tensor()
                .to_dtype(candle_core::DType::F32)
                .unwrap();
            Var::from_tensor(&(v * 3.0).unwrap()).unwrap()
        };
        let (b, c) = (3, 13);
        let gates = f32var(b * 4 * c, &[b, 4 * c], 5);
        let cp = f32var(b * c, &[b, c], 6);
        let hc = |(h, c): (Tensor, Tensor)| Tensor::stack(&[h, c], 0).unwrap();
        let fused = hc(gates
            .as_tensor()
            .apply_op2(cp.as_tensor(), FusedLstmCell)
            .map(|t| (t.get(0).unwrap(), t.get(1).unwrap()))
            .unwrap());
        let comp = hc(composed_gates(gates.as_tensor(), cp.as_tensor()).unwrap());
        let w = Tensor::from_vec(
            (0..2 * b * c)
                .map(|i| (i as f32 * 0.37).sin())
                .collect::<Vec<_>>(),
            (2, b, c),
            &dev,
        )
        .unwrap();
        assert_same_op(&fused, &comp, &w, &[&gates, &cp], 2e-6);
    }

    #[test]
    fn lstm_cell_matches_scalar_reference() {
        // One unit, one row: gates from the written-out LSTM equations.
        let gx = Tensor::new(&[[0.3f64, -0.2, 0.5, 0.1]], &Device::Cpu).unwrap();
        let h = Tensor::new(&[[0.4f64]], &Device::Cpu).unwrap();
        let c = Tensor::new(&[[-0.6f64]], &Device::Cpu).unwrap();
        let w = Tensor::new(&[[0.2f64, 0.7, -0.3, 0.9]], &Device::Cpu).unwrap();
        let (h2, c2) = lstm_cell(&gx, &h, &c, &w).unwrap();
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let a = [
            0.3 + 0.4 * 0.2,
            -0.2 + 0.4 * 0.7,
            0.5 - 0.4 * 0.3,
            0.1 + 0.4 * 0.9,
        ];
        let ce = s(a[1]) * -0.6 + s(a[0]) * a[2].tanh();
        let he = s(a[3]) * ce.tanh();
        let c2: Vec<Vec<f64>> = c2.to_vec2().unwrap();
        let h2: Vec<Vec<f64>> = h2.to_vec2().unwrap();
        assert!((c2[0][0] - ce).abs() < 1e-12 && (h2[0][0] - he).abs() < 1e-12);
    }
}
