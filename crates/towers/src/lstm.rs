//! A multi-layer LSTM run over time (PyTorch `nn.LSTM` gate order i, f, g, o), with the input
//! projection hoisted out of the time loop and PAD steps resetting the state to zero. On the
//! CPU in f32, and on CUDA (in f32 whatever the compute dtype), each layer's recurrence is one
//! custom op with its own backward pass through time ([`crate::fused_lstm_seq`]); elsewhere it
//! is the per-step graph [`composed_recurrence`].

use candle_core::{DType, Tensor};

use crate::cuda_switch::{on_cuda_kernel, CudaKernel};
use crate::fused_lstm_seq::FusedLstmSeq;
use crate::layers::{chunk_last, sigmoid, Linear};
use crate::params::Init;
use crate::Result;
use kernels::host::on_host_f32;

/// One LSTM step from tensor ops (any device or dtype). `gx` [B, 4C] is the precomputed input
/// part W_ih x_t + b, `w_hh_t` [C, 4C] the transposed recurrent weight. Returns (h_t, c_t):
/// i, f, g, o = σ, σ, tanh, σ of (gx + h W_hhᵀ); c_t = f c + i g; h_t = o tanh(c_t).
pub fn lstm_cell(gx: &Tensor, h: &Tensor, c: &Tensor, w_hh_t: &Tensor) -> Result<(Tensor, Tensor)> {
    let gates = (gx + h.matmul(w_hh_t)?)?;
    let parts = chunk_last(&gates, 4)?;
    let i = sigmoid(&parts[0])?;
    let f = sigmoid(&parts[1])?;
    let g = parts[2].tanh()?;
    let o = sigmoid(&parts[3])?;
    let c = ((f * c)? + (i * g)?)?;
    let h = (o * c.tanh()?)?;
    Ok((h, c))
}

/// One LSTM layer over the whole sequence as a per-step graph of [`lstm_cell`]: from the input
/// part of the gates `gx_all` [B, T, 4C], the recurrent weight `w_hh` [4C, C] and `mask`
/// [B, T, 1] (1 real, 0 PAD; h_t and c_t are multiplied by it), the hidden states [B, T, C].
/// The path where the fused op does not apply (see [`recurrence`]), and its reference.
pub fn composed_recurrence(gx_all: &Tensor, w_hh: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let (b, t, c4) = gx_all.dims3()?;
    let w_hh_t = w_hh.t()?.contiguous()?;
    let mut h = Tensor::zeros((b, c4 / 4), gx_all.dtype(), gx_all.device())?;
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
    Ok(Tensor::stack(&outs, 1)?)
}

/// One LSTM layer's recurrence: from the input part of the gates `gx_all` [B, T, 4C], the
/// recurrent weight `w_hh` [4C, C] and `mask` [B, T, 1] (1 real, 0 PAD), the hidden states
/// [B, T, C]. With `fused`, the whole-sequence op where it applies (f32 on the CPU; CUDA, where
/// a bf16 or f16 layer runs its recurrence in f32 and casts back, as cuDNN keeps f32 cell
/// states); otherwise, and for other devices and dtypes, the per-step graph
/// (`composed_recurrence`).
pub fn recurrence(gx_all: &Tensor, w_hh: &Tensor, mask: &Tensor, fused: bool) -> Result<Tensor> {
    if fused && on_host_f32(&[gx_all, w_hh, mask]) {
        fused_recurrence(gx_all, w_hh, mask)
    } else if fused && on_cuda_kernel(CudaKernel::Lstm, gx_all) {
        let f32s = |t: &Tensor| t.to_dtype(DType::F32);
        Ok(
            fused_recurrence(&f32s(gx_all)?, &f32s(w_hh)?, &f32s(mask)?)?
                .to_dtype(gx_all.dtype())?,
        )
    } else {
        composed_recurrence(gx_all, w_hh, mask)
    }
}

/// One layer's recurrence as the whole-sequence op (f32 inputs on the CPU or CUDA).
fn fused_recurrence(gx_all: &Tensor, w_hh: &Tensor, mask: &Tensor) -> Result<Tensor> {
    Ok(gx_all.contiguous()?.apply_op3(
        &w_hh.contiguous()?,
        &mask.contiguous()?,
        FusedLstmSeq::new(),
    )?)
}

#[derive(Debug, Clone)]
struct LstmLayer {
    w_ih: Linear,
    w_hh: Tensor,
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
            });
        }
        Ok(Self {
            layers,
            h2o: Linear::new(cell, d_out, true, std, init.pp("h2o"))?,
        })
    }

    /// Runs left to right over `x` [B, T, D]; `mask` [B, T, 1] (1 real, 0 PAD) zeroes the state
    /// at PAD steps, so a sequence read after PADs starts fresh. Returns [B, T, H]. `fused`
    /// chooses each layer's [`recurrence`]: the whole-sequence op where it applies, or
    /// (`!fused`, the tests' reference) the per-step graph throughout.
    pub fn forward(&self, x: &Tensor, mask: &Tensor, fused: bool) -> Result<Tensor> {
        let mut seq = x.clone();
        for layer in &self.layers {
            let gx_all = layer.w_ih.forward(&seq)?;
            let w_hh = layer.w_hh.to_dtype(x.dtype())?;
            seq = recurrence(&gx_all, &w_hh, mask, fused)?;
        }
        self.h2o.forward(&seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::norm::tests::check_grads;
    use crate::params::ParamStore;
    use crate::test_util::{assert_same_op, max_abs};
    use candle_core::{DType, Device, Var};

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

    /// An f32 var of `shape` with values in ±`scale`.
    fn f32var(shape: &[usize], seed: u64, scale: f64) -> Var {
        let n = shape.iter().product();
        let v = var(n, shape, seed)
            .as_tensor()
            .to_dtype(DType::F32)
            .unwrap();
        Var::from_tensor(&(v * scale).unwrap()).unwrap()
    }

    /// A [B, T, 1] mask with PADs: at the start of sequence 0, in the middle of sequence 1,
    /// the last two steps of sequence 2; the rest real.
    fn mask_with_pads(b: usize, t: usize) -> Tensor {
        let mut m = vec![1f32; b * t];
        if t > 1 {
            m[0] = 0.0;
        }
        if b > 1 && t > 2 {
            m[t + t / 2] = 0.0;
        }
        if b > 2 && t > 3 {
            m[3 * t - 2..3 * t].fill(0.0);
        }
        Tensor::from_vec(m, (b, t, 1), &Device::Cpu).unwrap()
    }

    /// Fixed weights for Σ w·y.
    fn weights(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let w: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37 + 0.5).sin()).collect();
        Tensor::from_vec(w, shape, &Device::Cpu).unwrap()
    }

    /// Relative tolerance of the f32 comparisons against the per-step graph (the GEMMs sum in
    /// different orders).
    const TOL: f32 = 2e-5;

    #[test]
    fn whole_sequence_op_matches_the_per_step_graph_values_and_gradients() {
        for (b, t, c) in [(1, 3, 1), (2, 5, 3), (3, 7, 16), (4, 9, 130), (3, 20, 40)] {
            let gx = f32var(&[b, t, 4 * c], 7, 2.0);
            let w_hh = f32var(&[4 * c, c], 8, 1.0 / (c as f64).sqrt());
            let mask = mask_with_pads(b, t);
            let fused = gx
                .as_tensor()
                .apply_op3(w_hh.as_tensor(), &mask, FusedLstmSeq::new())
                .unwrap();
            let reference = composed_recurrence(gx.as_tensor(), w_hh.as_tensor(), &mask).unwrap();
            let w = weights(&[b, t, c]);
            assert_same_op(&fused, &reference, &w, &[&gx, &w_hh], TOL);
            // PAD steps leave a zero state.
            let pad = mask.affine(-1.0, 1.0).unwrap();
            let at_pad = fused.broadcast_mul(&pad).unwrap();
            assert_eq!(max_abs(&at_pad), 0.0, "{b}x{t}x{c}");
            // A [B, T] mask reads the same as [B, T, 1].
            let flat = gx
                .as_tensor()
                .apply_op3(
                    w_hh.as_tensor(),
                    &mask.squeeze(2).unwrap(),
                    FusedLstmSeq::new(),
                )
                .unwrap();
            assert_eq!(max_abs(&(flat - &fused).unwrap()), 0.0);
        }
    }

    #[test]
    fn two_layer_lstm_with_projection_matches_the_per_step_graph() {
        let store = ParamStore::new(&Device::Cpu, 3);
        let lstm = Lstm::new(6, 20, 5, 2, 0.3, store.root().pp("lstm")).unwrap();
        let (b, t) = (3, 11);
        let x = f32var(&[b, t, 6], 9, 1.5);
        let mask = mask_with_pads(b, t);
        let fused = lstm.forward(x.as_tensor(), &mask, true).unwrap();
        let reference = lstm.forward(x.as_tensor(), &mask, false).unwrap();
        let params = store.params();
        let mut vars: Vec<&Var> = params.iter().map(|p| &p.var).collect();
        vars.push(&x);
        assert_same_op(&fused, &reference, &weights(&[b, t, 5]), &vars, TOL);
    }

    #[test]
    fn whole_sequence_op_is_bit_identical_run_to_run() {
        let (b, t, c) = (4, 16, 70);
        let gx = f32var(&[b, t, 4 * c], 11, 2.0);
        let w_hh = f32var(&[4 * c, c], 12, 0.2);
        let mask = mask_with_pads(b, t);
        let run = || {
            let y = gx
                .as_tensor()
                .apply_op3(w_hh.as_tensor(), &mask, FusedLstmSeq::new())
                .unwrap();
            let g = (&y * weights(&[b, t, c]))
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (dgx, dw) = (g.get(&gx).unwrap(), g.get(&w_hh).unwrap());
            (flat(&y), flat(dgx), flat(dw))
        };
        let first = run();
        for _ in 0..3 {
            assert!(run() == first);
        }
    }
}
