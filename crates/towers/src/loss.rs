//! Cross-entropy over labelled positions only (PAD and unmasked positions never count; the
//! released code counts PAD for GPT/ELMo, we do not).

use candle_core::{DType, Device, Tensor};
use corpus::{TokenBatch, IGNORE_LABEL};

use crate::norm::log_softmax_last;
use crate::{Result, TowersError};

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

/// log p(label) per row of `logits` [N, V] (f32): the gathered log-softmax, shape [N].
pub fn target_log_probs(logits: &Tensor, labels: &[u32], dev: &Device) -> Result<Tensor> {
    let n = labels.len();
    let lab = Tensor::from_vec(labels.to_vec(), (n, 1), dev)?;
    Ok(log_softmax_last(logits)?.gather(&lab, 1)?.squeeze(1)?)
}

/// Mean negative log-likelihood of `labels` under `logits` [N, V]; errors on N = 0. On CPU
/// with f32 logits it uses a fused kernel (same values and gradients, far fewer passes).
pub fn cross_entropy(logits: &Tensor, labels: &[u32], dev: &Device) -> Result<Tensor> {
    let zero = Tensor::zeros(logits.dim(1)?, logits.dtype(), dev)?;
    cross_entropy_with_bias(logits, &zero, labels, dev)
}

/// [`cross_entropy`] of `logits + bias` (bias [V]) without materialising the sum on CPU: the
/// fused kernel adds the bias on the fly and returns its gradient (a column sum).
pub fn cross_entropy_with_bias(
    logits: &Tensor,
    bias: &Tensor,
    labels: &[u32],
    dev: &Device,
) -> Result<Tensor> {
    if labels.is_empty() {
        return Err(TowersError::NoTargets);
    }
    if dev.is_cpu() && logits.dtype() == DType::F32 && bias.dtype() == DType::F32 {
        let op = crate::fused_nll::FusedNll {
            labels: labels.to_vec(),
        };
        return Ok(logits
            .contiguous()?
            .apply_op2(&bias.contiguous()?, op)?
            .mean_all()?);
    }
    composed_cross_entropy(&logits.broadcast_add(bias)?, labels, dev)
}

/// [`cross_entropy`] from composed tensor ops (any device or dtype; the reference for the
/// fused CPU kernel).
pub fn composed_cross_entropy(logits: &Tensor, labels: &[u32], dev: &Device) -> Result<Tensor> {
    if labels.is_empty() {
        return Err(TowersError::NoTargets);
    }
    Ok(target_log_probs(logits, labels, dev)?.mean_all()?.neg()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    #[test]
    fn fused_matches_composed_values_and_gradients() {
        let dev = Device::Cpu;
        let (n, v) = (700, 600); // large enough to take the threaded path
        let data: Vec<f32> = (0..n * v)
            .map(|i| ((i * 7919 % 1013) as f32 / 101.3) - 5.0)
            .collect();
        let x = Var::from_tensor(&Tensor::from_vec(data, (n, v), &dev).unwrap()).unwrap();
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 31) % v as u32).collect();
        let bd: Vec<f32> = (0..v).map(|j| (j % 13) as f32 / 7.0 - 0.9).collect();
        let bias = Var::from_tensor(&Tensor::from_vec(bd, v, &dev).unwrap()).unwrap();
        let a = cross_entropy_with_bias(x.as_tensor(), bias.as_tensor(), &labels, &dev).unwrap();
        let b = composed_cross_entropy(
            &x.as_tensor().broadcast_add(bias.as_tensor()).unwrap(),
            &labels,
            &dev,
        )
        .unwrap();
        let (av, bv) = (a.to_scalar::<f32>().unwrap(), b.to_scalar::<f32>().unwrap());
        assert!((av - bv).abs() < 1e-5 * bv.abs().max(1.0), "{av} vs {bv}");
        let ga = a.backward().unwrap().get(x.as_tensor()).unwrap().clone();
        let gb = b.backward().unwrap().get(x.as_tensor()).unwrap().clone();
        let d: f32 = (ga - gb)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(d < 1e-8, "gradient difference {d}");
    }
}
