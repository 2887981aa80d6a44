//! The output layer's loss as one custom op: per row r of logits x \[N, V\] with an f32 bias b
//! \[V\] and a label y_r, the negative log-likelihood nll_r = logsumexp(x_r + b) − (x_{r,y_r} +
//! b_{y_r}), and in the backward pass dx = dnll ⊙ (softmax(x + b) − one-hot(y)), db = Σ_r dx_r.
//! On CUDA one kernel each way (`softmax_nll.cu`: f32, or bf16 logits read and their gradient
//! written as bf16, f32 inside) in place of the composed graph's cast to f32, bias, log-softmax
//! and gather, some ten full \[N, V\] passes and buffers each way (at `base_2tower`, 8,192 rows of
//! 30,528: 1 GB each in f32). The CPU trains through its own fused linear op (`linear_nll.rs`);
//! this op's CPU side (f32) is its reference in the tests.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};

use kernels::host::f32_data;

#[cfg(feature = "cuda")]
use crate::ops::nll::cuda::{backward as cuda_backward, forward as cuda_forward};
use crate::{Result, TowersError};

/// The op's name, in its errors.
const OP: &str = "softmax-nll";

/// The per-row NLL of `labels` under `logits` \[N, V\] + `bias` \[V\] (f32; on CUDA the logits
/// also bf16), shape \[N\], differentiable in the logits and the bias. A typed error when the
/// labels are not one per row or not all below V.
pub(crate) fn softmax_nll(logits: &Tensor, bias: &Tensor, labels: &[u32]) -> Result<Tensor> {
    let (n, v) = logits.dims2()?;
    if labels.len() != n || labels.iter().any(|&l| l as usize >= v) {
        return Err(TowersError::Data(format!(
            "{} labels (all below {v} required) for {n} rows of logits",
            labels.len()
        )));
    }
    if bias.dims() != [v] {
        return Err(TowersError::Data(format!(
            "a bias of shape {:?} for logits of width {v}",
            bias.dims()
        )));
    }
    let y = Tensor::from_slice(labels, n, logits.device())?;
    Ok(logits.contiguous()?.apply_op3(
        &bias.to_dtype(DType::F32)?.contiguous()?,
        &y,
        SoftmaxNll::default(),
    )?)
}

/// The custom op: inputs logits \[N, V\], bias \[V\] (f32) and labels \[N\] (u32), all
/// contiguous; output nll \[N\] (f32). The forward pass keeps each row's log-sum-exp for the
/// backward pass.
#[derive(Default)]
struct SoftmaxNll {
    lse: Mutex<Option<Tensor>>,
}

impl SoftmaxNll {
    /// Keeps the forward pass's log-sum-exp.
    fn keep(&self, lse: Tensor) {
        if let Ok(mut slot) = self.lse.lock() {
            *slot = Some(lse);
        }
    }
}

/// The (rows, width) of the logits' layout.
fn rows_and_width(l: &Layout) -> candle_core::Result<(usize, usize)> {
    match l.shape().dims() {
        &[n, v] => Ok((n, v)),
        d => candle_core::bail!("{OP}: logits of shape {d:?}, not [rows, width]"),
    }
}

impl CustomOp3 for SoftmaxNll {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sb: &CpuStorage,
        lb: &Layout,
        sy: &CpuStorage,
        ly: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, v) = rows_and_width(lx)?;
        let (x, b) = (f32_data(sx, lx, OP)?, f32_data(sb, lb, OP)?);
        let Some((lo, hi)) = ly.contiguous_offsets() else {
            candle_core::bail!("{OP} expects contiguous labels")
        };
        let y = &sy.as_slice::<u32>()?[lo..hi];
        if b.len() != v || y.len() != n || y.iter().any(|&l| l as usize >= v) {
            candle_core::bail!(
                "{OP}: {} labels below {v} and {} biases for {n} rows",
                y.len(),
                b.len()
            )
        }
        let (mut nll, mut lse) = (vec![0f32; n], vec![0f32; n]);
        for (r, row) in x.chunks_exact(v.max(1)).enumerate().take(n) {
            let mx = row
                .iter()
                .zip(b)
                .fold(f32::NEG_INFINITY, |m, (xi, bi)| m.max(xi + bi));
            let s: f32 = row.iter().zip(b).map(|(xi, bi)| (xi + bi - mx).exp()).sum();
            let l = y[r] as usize;
            lse[r] = mx + s.ln();
            nll[r] = lse[r] - (row[l] + b[l]);
        }
        self.keep(Tensor::from_vec(lse, n, &candle_core::Device::Cpu)?);
        Ok((CpuStorage::F32(nll), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        sx: &candle_core::CudaStorage,
        lx: &Layout,
        sb: &candle_core::CudaStorage,
        lb: &Layout,
        sy: &candle_core::CudaStorage,
        ly: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let dtype = candle_core::backend::BackendStorage::dtype(sx);
        let nv = rows_and_width(lx)?;
        let (nll, lse) = crate::ops::cuda::by_element!(dtype, T => cuda_forward::<T>(sx, lx, sb, lb, sy, ly, nv)?);
        self.keep(lse);
        Ok((nll, Shape::from(nv.0)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        b: &Tensor,
        y: &Tensor,
        _nll: &Tensor,
        dnll: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let lse = match self.lse.lock().ok().and_then(|s| s.clone()) {
            Some(l) => l,
            None => candle_core::bail!("{OP}: backward pass before a forward pass"),
        };
        let dnll = dnll.to_dtype(DType::F32)?;
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            let (dx, db) = crate::ops::cuda::by_element!(x.dtype(), T => cuda_backward::<T>(x, b, y, &lse, &dnll)?);
            return Ok((Some(dx), Some(db), None));
        }
        // The reference: the same formula in tensor ops.
        let v = b.dim(0)?;
        let p = x
            .to_dtype(DType::F32)?
            .broadcast_add(b)?
            .broadcast_sub(&lse.unsqueeze(1)?)?
            .exp()?;
        let cols = Tensor::arange(0u32, v as u32, x.device())?.unsqueeze(0)?;
        let onehot = y.unsqueeze(1)?.broadcast_eq(&cols)?.to_dtype(DType::F32)?;
        let dx = (p - onehot)?.broadcast_mul(&dnll.unsqueeze(1)?)?;
        let db = dx.sum(0)?;
        Ok((Some(dx.to_dtype(x.dtype())?), Some(db), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::loss::cross_entropy;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    /// Against the composed graph (bias added to the logits, then log-softmax and gather): the
    /// mean NLL and its gradients in the logits and the bias, with a row 60 above the rest and a
    /// masked vocabulary entry; the per-row values weighted unevenly, so that dnll matters.
    #[test]
    fn the_op_matches_the_composed_cross_entropy_values_and_gradients() {
        let (n, v) = (6, 37);
        let dev = Device::Cpu;
        let mut xs: Vec<f32> = (0..n * v).map(|i| (i as f32 * 0.77).sin() * 3.0).collect();
        for x in &mut xs[2 * v..3 * v] {
            *x += 60.0;
        }
        let mut bs: Vec<f32> = (0..v).map(|k| (k as f32 * 0.31).cos()).collect();
        bs[v - 2] = -1e9;
        let labels = [0u32, 36, 7, 13, 0, 31];
        let x = Var::from_tensor(&Tensor::from_vec(xs, (n, v), &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::from_vec(bs, v, &dev).unwrap()).unwrap();
        let w = Tensor::new(&[0.5f32, 1.0, 1.5, 2.0, 2.5, 3.0], &dev).unwrap();
        let fused = softmax_nll(x.as_tensor(), b.as_tensor(), &labels).unwrap();
        let logits = x.as_tensor().broadcast_add(b.as_tensor()).unwrap();
        let per_row = (0..n)
            .map(|r| {
                let row = logits.narrow(0, r, 1).unwrap();
                cross_entropy(&row, &labels[r..r + 1], &dev).unwrap()
            })
            .collect::<Vec<_>>();
        let composed = Tensor::stack(&per_row, 0).unwrap();
        assert_same_op(&fused, &composed, &w, &[&x, &b], 1e-5);
    }

    #[test]
    fn labels_out_of_range_or_missing_and_a_bias_of_the_wrong_width_are_typed_errors() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 5), DType::F32, &dev).unwrap();
        let b = Tensor::zeros(5, DType::F32, &dev).unwrap();
        for labels in [&[0u32, 5][..], &[1][..]] {
            assert!(matches!(
                softmax_nll(&x, &b, labels),
                Err(TowersError::Data(_))
            ));
        }
        let narrow = Tensor::zeros(4, DType::F32, &dev).unwrap();
        assert!(matches!(
            softmax_nll(&x, &narrow, &[0, 1]),
            Err(TowersError::Data(_))
        ));
        assert!(softmax_nll(&x, &b, &[0, 4]).is_ok());
    }
}
