//! Multi-head self-attention with an additive mask (key padding, optionally causal), written
//! with our differentiable softmax.

use candle_core::{DType, Device, Tensor};

use crate::layers::layers::Linear;
use crate::layers::norm::softmax_last;
use crate::layers::params::Init;
use crate::ops::attention::cuda::AttnDims;
use crate::ops::attention::FusedAttention;
use crate::Result;
use kernels::host::on_host_f32;

/// Additive attention bias [B, 1, T, T] (f32): 0 where query i may attend key j, -1e9 where
/// key j is PAD or (when `causal`) j > i. A query always keeps itself, so no row is empty.
pub fn attention_bias(
    mask: &[u8],
    b: usize,
    t: usize,
    causal: bool,
    dev: &Device,
) -> Result<Tensor> {
    let mut v = vec![0f32; b * t * t];
    for bi in 0..b {
        for i in 0..t {
            for j in 0..t {
                let blocked = (mask[bi * t + j] == 0 && i != j) || (causal && j > i);
                if blocked {
                    v[(bi * t + i) * t + j] = -1e9;
                }
            }
        }
    }
    Ok(Tensor::from_vec(v, (b, 1, t, t), dev)?)
}

/// Fused-QKV multi-head attention.
#[derive(Debug, Clone)]
pub struct SelfAttention {
    qkv: Linear,
    out: Linear,
    n_heads: usize,
}

impl SelfAttention {
    /// `qkv` Linear(H, 3H) and `out` Linear(H, H), both with bias.
    pub fn new(h: usize, n_heads: usize, std: f64, init: Init<'_>) -> Result<Self> {
        Ok(Self {
            qkv: Linear::new(h, 3 * h, true, std, init.pp("qkv"))?,
            out: Linear::new(h, h, true, std, init.pp("out"))?,
            n_heads,
        })
    }

    /// softmax(Q Kᵀ / √d + bias) V over `x` [B, T, H]; scores are normalised in f32.
    pub fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let y = attend(&self.qkv.forward(x)?, bias, self.n_heads)?;
        self.out.forward(&y)
    }
}

/// Multi-head attention from the fused projection `qkv` [B, T, 3H] (Q, K, V blocks of width H,
/// heads of width H / n_heads inside each) under `bias` [B, 1, T, T]: the merged heads
/// [B, T, H]. On CPU in f32 a fused kernel with its own backward pass; on CUDA in f32 or bf16,
/// with the `attention` switch on, our kernels (`attention.cu`: T ≤ 128 and a head width whose
/// block fits, e.g. the models' 32); elsewhere `attend_composed`. All give the same values
/// and gradients up to rounding. Shapes that do not fit each other are a
/// [`crate::TowersError::Batch`], heads that do not divide H a [`crate::TowersError::Config`].
pub fn attend(qkv: &Tensor, bias: &Tensor, n_heads: usize) -> Result<Tensor> {
    // The CUDA path sizes its launch by them; everywhere they are checked first.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    let dims = AttnDims::new(qkv.dims(), bias.dims(), n_heads)?;
    if on_host_f32(&[qkv, bias]) {
        let op = FusedAttention::new(n_heads);
        return Ok(qkv.contiguous()?.apply_op2(&bias.contiguous()?, op)?);
    }
    #[cfg(feature = "cuda")]
    if crate::ops::switch::on_cuda_kernel_typed(crate::CudaKernel::Attention, qkv)
        && dims.fits(qkv.dtype().size_in_bytes())
    {
        return crate::ops::attention::cuda::attend(qkv, bias, dims);
    }
    attend_composed(qkv, bias, n_heads)
}

/// [`attend`] from tensor ops (any device and dtype; scores normalised in f32).
pub fn attend_composed(qkv: &Tensor, bias: &Tensor, n_heads: usize) -> Result<Tensor> {
    let (b, t, h3) = qkv.dims3()?;
    let h = h3 / 3;
    let hd = h / n_heads;
    let qkv = qkv.reshape((b, t, 3, n_heads, hd))?;
    let split = |i: usize| -> Result<Tensor> {
        Ok(qkv
            .narrow(2, i, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?)
    };
    let (q, k, v) = (split(0)?, split(1)?, split(2)?);
    let scores = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
    let scores = scores.to_dtype(DType::F32)?.broadcast_add(bias)?;
    let att = softmax_last(&scores)?.to_dtype(qkv.dtype())?;
    Ok(att.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::assert_same_op;
    use candle_core::Var;

    #[test]
    fn fused_attention_matches_composed_values_and_gradients() {
        let dev = Device::Cpu;
        let (b, t, nh, hd) = (3, 7, 2, 4);
        let h = nh * hd;
        let data: Vec<f32> = (0..b * t * 3 * h)
            .map(|i| ((i * 7919 % 1009) as f32 / 504.5 - 1.0) * 1.5)
            .collect();
        let qkv = Var::from_tensor(&Tensor::from_vec(data, (b, t, 3 * h), &dev).unwrap()).unwrap();
        // Causal with right padding in the second sequence.
        let mut mask = vec![1u8; b * t];
        mask[t + 5..2 * t].fill(0);
        for causal in [true, false] {
            let bias = attention_bias(&mask, b, t, causal, &dev).unwrap();
            let w = Tensor::from_vec(
                (0..b * t * h)
                    .map(|i| ((i * 31 % 17) as f32) - 8.0)
                    .collect::<Vec<_>>(),
                (b, t, h),
                &dev,
            )
            .unwrap();
            let fused = attend(&qkv, &bias, nh).unwrap();
            let comp = attend_composed(&qkv, &bias, nh).unwrap();
            assert_same_op(&fused, &comp, &w, &[&qkv], 1e-5);
        }
    }

    #[test]
    fn attend_rejects_shapes_that_do_not_fit_with_typed_errors() {
        let dev = Device::Cpu;
        let qkv = Tensor::zeros((2, 5, 24), DType::F32, &dev).unwrap();
        let bias = attention_bias(&[1; 10], 2, 5, true, &dev).unwrap();
        assert_eq!(attend(&qkv, &bias, 2).unwrap().dims(), [2, 5, 8]);
        let e = attend(&qkv, &bias, 5).unwrap_err();
        assert!(matches!(e, crate::TowersError::Config(_)), "{e}");
        let short = attention_bias(&[1; 8], 2, 4, true, &dev).unwrap();
        let e = attend(&qkv, &short, 2).unwrap_err();
        assert!(matches!(e, crate::TowersError::Batch(_)), "{e}");
        let e = attend(&qkv.narrow(2, 0, 23).unwrap(), &bias, 2).unwrap_err();
        assert!(matches!(e, crate::TowersError::Batch(_)), "{e}");
    }
}
