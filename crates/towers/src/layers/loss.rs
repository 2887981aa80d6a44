//! Cross-entropy over labelled positions only (PAD and unmasked positions never count; the
//! released code counts PAD for GPT/ELMo, we do not).

use candle_core::{DType, Device, Tensor};
use corpus::{TokenBatch, IGNORE_LABEL};

use crate::layers::norm::log_softmax_last;
use crate::ops::nll::softmax_nll::softmax_nll;
use crate::ops::nll::LinearNll;
pub use crate::ops::nll::NllPass;
use crate::ops::switch::{on_cuda_kernel_typed, CudaKernel};
use crate::{Result, TowersError};
use kernels::host::on_host_f32;

/// Flat indices (into B·T) of labelled positions and their labels.
pub fn labelled_positions(batch: &TokenBatch) -> (Vec<u32>, Vec<u32>) {
    let mut idx = Vec::new();
    let mut lab = Vec::new();
    for (i, &l) in batch.labels.iter().enumerate() {
        if l != IGNORE_LABEL {
            idx.push(i as u32);
            lab.push(l);
        }
    }
    (idx, lab)
}

/// log p(label) per row of `logits` \[N, V\] (f32): the gathered log-softmax, shape \[N\]
/// (differentiable).
pub fn target_log_probs(logits: &Tensor, labels: &[u32], dev: &Device) -> Result<Tensor> {
    let n = labels.len();
    let lab = Tensor::from_vec(labels.to_vec(), (n, 1), dev)?;
    Ok(log_softmax_last(logits)?.gather(&lab, 1)?.squeeze(1)?)
}

/// `target_log_probs` for scoring, without a gradient: on CPU with f32 logits every row runs
/// through the fused kernel (−`kernels::nll_row`) over the thread pool, about ten times faster
/// than the composed graph at V = 8192; on CUDA (f32 or bf16) the output layer's loss kernel
/// (`softmax_nll.rs`); elsewhere the composed graph. Labels must lie below V.
pub fn score_log_probs(logits: &Tensor, labels: &[u32]) -> Result<Vec<f32>> {
    if on_cuda_kernel_typed(CudaKernel::Nll, logits) {
        let zeros = Tensor::zeros(logits.dim(1)?, DType::F32, logits.device())?;
        return Ok(softmax_nll(&logits.detach(), &zeros, labels)?
            .neg()?
            .to_vec1()?);
    }
    if !on_host_f32(&[logits]) {
        return Ok(target_log_probs(logits, labels, logits.device())?
            .detach()
            .to_dtype(DType::F32)?
            .to_vec1()?);
    }
    let (n, v) = logits.dims2()?;
    if labels.len() != n || labels.iter().any(|&l| l as usize >= v) {
        return Err(TowersError::Data(format!(
            "{} labels (all below {v} required) for {n} rows of logits",
            labels.len()
        )));
    }
    let mut data = logits.flatten_all()?.to_vec1::<f32>()?;
    let zeros = vec![0f32; v];
    let mut out = vec![0f32; n];
    let rows = n.div_ceil(kernels::par::threads()).max(1);
    let (dp, op) = (
        kernels::par::pieces(&mut data, rows * v),
        kernels::par::pieces(&mut out, rows),
    );
    kernels::par::for_each_part(op.len(), |p| {
        let (mut d, mut o) = (kernels::par::take(&dp[p]), kernels::par::take(&op[p]));
        for (r, slot) in o.iter_mut().enumerate() {
            let label = labels[p * rows + r] as usize;
            *slot = -kernels::nll_row(&mut d[r * v..(r + 1) * v], &zeros, label, 1.0, false);
        }
    });
    drop((dp, op));
    Ok(out)
}

/// Mean negative log-likelihood of `labels` under the logits x·wᵀ + bias of an output layer
/// (x \[N, E\], w \[V, E\], bias \[V\]); errors on N = 0. On CPU with f32 inputs a fused kernel
/// (`linear_nll.rs`) never materialises the [N, V] logits and, for
/// [`NllPass::Train`], forms the gradients in the same pass; on CUDA (f32 or bf16) the logits
/// come from one matrix product in x's dtype and bias, log-softmax and gather run as one
/// kernel each way (`softmax_nll.rs`); elsewhere the composed graph (logits in f32) is used.
/// All give the same values and gradients.
pub fn linear_cross_entropy(
    x: &Tensor,
    w: &Tensor,
    bias: &Tensor,
    labels: &[u32],
    pass: NllPass,
) -> Result<Tensor> {
    if labels.is_empty() {
        return Err(TowersError::NoTargets);
    }
    if on_host_f32(&[x, w, bias]) {
        let op = LinearNll::new(labels, pass);
        return Ok(x
            .contiguous()?
            .apply_op3(&w.contiguous()?, &bias.contiguous()?, op)?);
    }
    // The logits in x's dtype (bf16 on a training step) as the matrix product gives them.
    let logits = x.matmul(&w.to_dtype(x.dtype())?.t()?)?;
    if on_cuda_kernel_typed(CudaKernel::Nll, x) {
        // Bias, log-softmax and gather in one kernel each way, in f32 inside.
        return Ok(softmax_nll(&logits, bias, labels)?.mean_all()?);
    }
    let logits = logits
        .to_dtype(DType::F32)?
        .broadcast_add(&bias.to_dtype(DType::F32)?)?;
    cross_entropy(&logits, labels, x.device())
}

/// Mean negative log-likelihood of `labels` under `logits` [N, V] from composed tensor ops
/// (any device or dtype; the reference for the fused kernel); errors on N = 0.
pub fn cross_entropy(logits: &Tensor, labels: &[u32], dev: &Device) -> Result<Tensor> {
    if labels.is_empty() {
        return Err(TowersError::NoTargets);
    }
    Ok(target_log_probs(logits, labels, dev)?.mean_all()?.neg()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    fn grad(loss: &Tensor, v: &Var) -> Tensor {
        loss.backward().unwrap().get(v.as_tensor()).unwrap().clone()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn fused_linear_matches_composed_values_and_gradients() {
        let dev = Device::Cpu;
        // V large enough for several row chunks (chunk = 2^22 / V rows), N not a multiple.
        let (n, e, v) = (150, 24, 50_000);
        let var = |len: usize, k: usize, shape: (usize, usize)| {
            let d: Vec<f32> = (0..len)
                .map(|i| (((i * k) % 1013) as f32 / 506.5 - 1.0) * 0.5)
                .collect();
            Var::from_tensor(&Tensor::from_vec(d, shape, &dev).unwrap()).unwrap()
        };
        let x = var(n * e, 7919, (n, e));
        let w = var(v * e, 104_729, (v, e));
        let b = Var::from_tensor(&var(v, 31, (1, v)).as_tensor().squeeze(0).unwrap()).unwrap();
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 331) % v as u32).collect();
        let composed = cross_entropy(
            &x.matmul(&w.t().unwrap())
                .unwrap()
                .broadcast_add(b.as_tensor())
                .unwrap(),
            &labels,
            &dev,
        )
        .unwrap();
        for pass in [NllPass::Train, NllPass::Eval] {
            let fused = linear_cross_entropy(&x, &w, &b, &labels, pass).unwrap();
            let (fv, cv) = (
                fused.to_scalar::<f32>().unwrap(),
                composed.to_scalar::<f32>().unwrap(),
            );
            assert!((fv - cv).abs() < 2e-6 * cv.abs(), "{pass:?}: {fv} vs {cv}");
            for p in [&x, &w, &b] {
                let (gf, gc) = (grad(&fused, p), grad(&composed, p));
                let scale: f32 = gc.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
                let d = max_abs_diff(&gf, &gc);
                assert!(
                    scale > 0.0 && d <= 1e-5 * scale,
                    "{pass:?}: gradient diff {d} (scale {scale})"
                );
            }
        }
    }

    #[test]
    fn fused_linear_is_deterministic_and_checks_inputs() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (40, 8), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (300, 8), &dev).unwrap();
        let b = Tensor::zeros(300, DType::F32, &dev).unwrap();
        let labels: Vec<u32> = (0..40).map(|i| i * 7).collect();
        let a = linear_cross_entropy(&x, &w, &b, &labels, NllPass::Train).unwrap();
        let c = linear_cross_entropy(&x, &w, &b, &labels, NllPass::Train).unwrap();
        assert_eq!(a.to_scalar::<f32>().unwrap(), c.to_scalar::<f32>().unwrap());
        let bad = [400u32; 40];
        assert!(linear_cross_entropy(&x, &w, &b, &bad, NllPass::Train).is_err());
        assert!(matches!(
            linear_cross_entropy(&x, &w, &b, &[], NllPass::Train),
            Err(TowersError::NoTargets)
        ));
        // Non-finite inputs surface as a non-finite loss, never as a silent number.
        let nan = x.affine(0.0, f64::NAN).unwrap();
        let l = linear_cross_entropy(&nan, &w, &b, &labels, NllPass::Eval).unwrap();
        assert!(l.to_scalar::<f32>().unwrap().is_nan());
    }

    #[test]
    fn host_target_log_probs_match_the_composed_log_softmax() {
        let dev = Device::Cpu;
        let (n, v) = (37, 301);
        let logits = (Tensor::randn(0f32, 3.0, (n, v), &dev).unwrap() + 5.0).unwrap();
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % v as u32).collect();
        let fast = Tensor::new(score_log_probs(&logits, &labels).unwrap(), &dev).unwrap();
        let lab = Tensor::from_vec(labels.clone(), (n, 1), &dev).unwrap();
        let slow = log_softmax_last(&logits)
            .unwrap()
            .gather(&lab, 1)
            .unwrap()
            .squeeze(1)
            .unwrap();
        assert!(max_abs_diff(&fast, &slow) < 1e-5);
        // A label outside the vocabulary is an error, not a panic.
        assert!(score_log_probs(&logits, &[v as u32; 37]).is_err());
        // Half-precision logits take the composed graph and come back as f32 values (bf16 keeps
        // 8 significant bits: each of its three rounded ops moves a log-probability near -10 by
        // up to 1/32; 0.086 measured).
        let half = score_log_probs(&logits.to_dtype(DType::BF16).unwrap(), &labels).unwrap();
        let half = Tensor::new(half, &dev).unwrap();
        let d = max_abs_diff(&half, &slow);
        assert!(d < 0.25, "bf16 log-probabilities {d} from f32");
    }
}
