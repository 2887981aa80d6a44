//! Multi-head self-attention with an additive mask (key padding, optionally causal), written
//! with our differentiable softmax.

use candle_core::{DType, Device, Tensor};

use crate::layers::Linear;
use crate::norm::softmax_last;
use crate::params::Init;
use crate::Result;

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
        let (b, t, h) = x.dims3()?;
        let hd = h / self.n_heads;
        let qkv = self.qkv.forward(x)?.reshape((b, t, 3, self.n_heads, hd))?;
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
        let att = softmax_last(&scores)?.to_dtype(x.dtype())?;
        let y = att.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
        self.out.forward(&y)
    }
}
