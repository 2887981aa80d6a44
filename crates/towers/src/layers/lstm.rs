//! A multi-layer LSTM run over time (PyTorch `nn.LSTM` gate order i, f, g, o), with the input
//! projection hoisted out of the time loop and PAD steps resetting the state to zero. On the
//! CPU in f32, and on CUDA (in f32 whatever the compute dtype), each layer's recurrence is one
//! custom op with its own backward pass through time ([`crate::ops::lstm_seq`]); elsewhere it
//! is the per-step graph [`composed_recurrence`].
//!
//! Independent chains of one layer (the forward and backward LSTMs of all ELMo towers) can run
//! together ([`chain_recurrence`], [`forward_chains`]): on CUDA in bf16 one op steps them all
//! with one batched GEMM per step, the backward direction reading time reversed by index.

use candle_core::{DType, Tensor};

use crate::layers::layers::{chunk_last, sigmoid, Linear};
use crate::layers::params::Init;
use crate::ops::lstm_seq::chains::Chains;
use crate::ops::lstm_seq::{FusedLstmChains, FusedLstmSeq};
use crate::ops::switch::{on_cuda_kernel, CudaKernel};
use crate::{Result, TowersError};
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

/// Reverses a [B, T, ...] tensor along time (a copy).
pub(crate) fn reverse_time(x: &Tensor) -> Result<Tensor> {
    let t = x.dim(1)?;
    let idx: Vec<u32> = (0..t as u32).rev().collect();
    let idx = Tensor::from_vec(idx, t, x.device())?;
    Ok(x.index_select(&idx, 1)?)
}

/// Whether a layer's chains with input `x` run as the chained bf16 op on CUDA: `x` bf16 on
/// CUDA and [`CudaKernel::LstmBf16`] on.
pub(crate) fn chains_on_cuda(x: &Tensor) -> bool {
    x.dtype() == DType::BF16 && on_cuda_kernel(CudaKernel::LstmBf16, x)
}

/// The recurrences of a layer's independent chains at once: from their input parts of the
/// gates `gx` [N, B, T, 4C] (time order), recurrent weights `w_hh` [N, 4C, C] (the f32 masters,
/// or any float dtype) and the shared `mask` [B, T, 1] (1 real, 0 PAD), the hidden states
/// [N, B, T, C] in `gx`'s dtype and in time order; chain n reads time reversed (its first step
/// is T − 1, its state passes from t + 1 to t) where `reversed[n]`. With `fused`, one op for
/// all chains where it applies: on CUDA in bf16 (`chains_on_cuda`: bf16 gx, h and their
/// gradients, f32 gates, cell state and dW_hh, one batched GEMM per step) and f32 on the CPU
/// ([`kernels::LstmSeq`] per chain); otherwise each chain's [`recurrence`] on time-reversed
/// copies where reversed.
pub fn chain_recurrence(
    gx: &Tensor,
    w_hh: &Tensor,
    mask: &Tensor,
    reversed: &[bool],
    fused: bool,
) -> Result<Tensor> {
    let n = gx.dim(0)?;
    if reversed.len() != n || n > Chains::MAX {
        return Err(TowersError::Config(format!(
            "chain_recurrence: {n} chains (at most {}) with {} directions",
            Chains::MAX,
            reversed.len()
        )));
    }
    let host = on_host_f32(&[gx, w_hh, mask]);
    if fused && (host || chains_on_cuda(gx)) {
        let bits = reversed
            .iter()
            .enumerate()
            .fold(0u32, |acc, (k, &r)| acc | (u32::from(r) << k));
        let (b, t) = (mask.dim(0)?, mask.dim(1)?);
        let mask = mask.to_dtype(DType::F32)?.reshape((b, t))?.contiguous()?;
        let w = w_hh.to_dtype(DType::F32)?.contiguous()?;
        return Ok(gx
            .contiguous()?
            .apply_op3(&w, &mask, FusedLstmChains::new(bits))?);
    }
    let mut outs = Vec::with_capacity(n);
    for (k, &rev) in reversed.iter().enumerate() {
        let (g, w) = (gx.get(k)?, w_hh.get(k)?.to_dtype(gx.dtype())?);
        outs.push(if rev {
            let h = recurrence(&reverse_time(&g)?, &w, &reverse_time(mask)?, fused)?;
            reverse_time(&h)?
        } else {
            recurrence(&g, &w, mask, fused)?
        });
    }
    Ok(Tensor::stack(&outs, 0)?)
}

/// Runs the LSTMs `chains` (each with its direction: `true` reads time reversed) over their
/// inputs `xs` [B, T, D] (`xs[n]` for chain n: one x for a tower's two directions, or each
/// tower's own) and the shared `mask` [B, T, 1], layer by layer, each layer's recurrences in one
/// [`chain_recurrence`]: the chains' outputs [B, T, H], each in time order (a reversed chain's
/// output at t has read x_≥t). The chains must have the same number of layers and cell width.
pub fn forward_chains(
    chains: &[(&Lstm, bool)],
    xs: &[Tensor],
    mask: &Tensor,
    fused: bool,
) -> Result<Vec<Tensor>> {
    let Some(((first, _), rest)) = chains.split_first() else {
        return Ok(Vec::new());
    };
    if xs.len() != chains.len() {
        return Err(TowersError::Config(format!(
            "forward_chains: {} inputs for {} chains",
            xs.len(),
            chains.len()
        )));
    }
    // Each layer's W_hh shape [4C, C]: the layer count and cell widths in one.
    let shape =
        |l: &Lstm| -> Vec<Vec<usize>> { l.layers.iter().map(|y| y.w_hh.dims().to_vec()).collect() };
    if rest.iter().any(|(l, _)| shape(l) != shape(first)) {
        return Err(TowersError::Config(
            "forward_chains: chains of different layer counts or cell widths".into(),
        ));
    }
    let reversed: Vec<bool> = chains.iter().map(|&(_, r)| r).collect();
    // Layer 0 reads chain n's input; a later layer chain n's own output.
    let mut inputs: Vec<Tensor> = xs.to_vec();
    for layer in 0..first.layers.len() {
        let gx = chains
            .iter()
            .zip(&inputs)
            .map(|((l, _), input)| l.layers[layer].w_ih.forward(input))
            .collect::<Result<Vec<_>>>()?;
        let w_hh: Vec<&Tensor> = chains.iter().map(|(l, _)| &l.layers[layer].w_hh).collect();
        let h = chain_recurrence(
            &Tensor::stack(&gx, 0)?,
            &Tensor::stack(&w_hh, 0)?,
            mask,
            &reversed,
            fused,
        )?;
        inputs = (0..chains.len())
            .map(|k| h.get(k))
            .collect::<candle_core::Result<Vec<_>>>()?;
    }
    chains
        .iter()
        .zip(&inputs)
        .map(|((l, _), h)| l.h2o.forward(h))
        .collect()
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
    use crate::layers::norm::tests::check_grads;
    use crate::layers::params::ParamStore;
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

    /// The chained op over chains in both directions (PADs at a sequence's start, middle and
    /// end) against each chain's per-step graph on time-reversed copies: values, and the
    /// gradients of the stacked gx and of every chain's W_hh.
    #[test]
    fn chained_op_matches_each_chains_per_step_graph_in_its_direction() {
        for (n, b, t, c, reversed) in [
            (1, 2, 5, 3, vec![true]),
            (2, 3, 7, 16, vec![false, true]),
            (4, 3, 9, 40, vec![false, true, false, true]),
        ] {
            let gx = f32var(&[n, b, t, 4 * c], 13, 2.0);
            let w_hh = f32var(&[n, 4 * c, c], 14, 1.0 / (c as f64).sqrt());
            let mask = mask_with_pads(b, t);
            let fused =
                chain_recurrence(gx.as_tensor(), w_hh.as_tensor(), &mask, &reversed, true).unwrap();
            let reference =
                chain_recurrence(gx.as_tensor(), w_hh.as_tensor(), &mask, &reversed, false)
                    .unwrap();
            let w = weights(&[n, b, t, c]);
            assert_same_op(&fused, &reference, &w, &[&gx, &w_hh], TOL);
            // A reversed chain is not the forward one: reading the other way changes h.
            let flipped: Vec<bool> = reversed.iter().map(|r| !r).collect();
            let other =
                chain_recurrence(gx.as_tensor(), w_hh.as_tensor(), &mask, &flipped, true).unwrap();
            assert!(max_abs(&(other - &fused).unwrap()) > 1e-2);
        }
        // As many directions as chains, or a typed error.
        let gx = Tensor::zeros((2, 1, 3, 4), DType::F32, &Device::Cpu).unwrap();
        let w_hh = Tensor::zeros((2, 4, 1), DType::F32, &Device::Cpu).unwrap();
        let e = chain_recurrence(&gx, &w_hh, &mask_with_pads(1, 3), &[true], true).unwrap_err();
        assert!(matches!(e, TowersError::Config(_)), "{e}");
    }

    /// Two LSTMs run as chains (one of them reversed) equal each run alone, the reversed one on
    /// time-reversed copies of its input and mask.
    #[test]
    fn lstms_run_as_chains_equal_each_run_alone() {
        let store = ParamStore::new(&Device::Cpu, 4);
        let a = Lstm::new(6, 12, 5, 2, 0.3, store.root().pp("a")).unwrap();
        let r = Lstm::new(6, 12, 5, 2, 0.3, store.root().pp("r")).unwrap();
        let (b, t) = (3, 8);
        let x = f32var(&[b, t, 6], 10, 1.5);
        let mask = mask_with_pads(b, t);
        let chained = forward_chains(
            &[(&a, false), (&r, true)],
            &[x.as_tensor().clone(), x.as_tensor().clone()],
            &mask,
            true,
        )
        .unwrap();
        let alone_a = a.forward(x.as_tensor(), &mask, true).unwrap();
        let rx = reverse_time(x.as_tensor()).unwrap();
        let alone_r =
            reverse_time(&r.forward(&rx, &reverse_time(&mask).unwrap(), true).unwrap()).unwrap();
        let both = |a: &Tensor, r: &Tensor| Tensor::cat(&[a, r], 2).unwrap();
        let params = store.params();
        let mut vars: Vec<&Var> = params.iter().map(|p| &p.var).collect();
        vars.push(&x);
        assert_same_op(
            &both(&chained[0], &chained[1]),
            &both(&alone_a, &alone_r),
            &weights(&[b, t, 10]),
            &vars,
            TOL,
        );
        // Chains of different widths are an error, not a wrong product.
        let narrow = Lstm::new(6, 8, 5, 2, 0.3, store.root().pp("n")).unwrap();
        let e = forward_chains(
            &[(&a, false), (&narrow, true)],
            &[x.as_tensor().clone(), x.as_tensor().clone()],
            &mask,
            true,
        );
        assert!(matches!(e, Err(TowersError::Config(_))));
        // So is an input count that is not the chain count.
        let e = forward_chains(
            &[(&a, false), (&r, true)],
            &[x.as_tensor().clone()],
            &mask,
            true,
        );
        assert!(matches!(e, Err(TowersError::Config(_))));
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
