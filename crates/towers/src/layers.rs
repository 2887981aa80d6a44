//! Linear layers and activations. Weights are f32 master variables; `forward` casts them to
//! the input's dtype, so a bf16 forward pass sends f32 gradients back to the masters.

use candle_core::{Tensor, D};

use crate::params::Init;
use crate::Result;

/// y = x Wᵀ + b with W of shape [out, in] (PyTorch layout).
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Normal(0, std) weights and a zero bias when `bias` is true.
    pub fn new(d_in: usize, d_out: usize, bias: bool, std: f64, init: Init<'_>) -> Result<Self> {
        let weight = init.normal("weight", &[d_out, d_in], std)?;
        let bias = if bias {
            Some(init.constant("bias", &[d_out], 0.0)?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    /// Builds from existing tensors (weight [out, in]).
    pub fn from_parts(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { weight, bias }
    }

    /// The weight [out, in].
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias [out], if the layer has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Applies the layer to the last dimension of `x` (any leading shape).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dt = x.dtype();
        let mut dims = x.dims().to_vec();
        let d_in = dims.pop().unwrap_or(1);
        let n: usize = dims.iter().product();
        let w = self.weight.to_dtype(dt)?;
        let mut y = x.reshape((n, d_in))?.matmul(&w.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&b.to_dtype(dt)?)?;
        }
        dims.push(self.weight.dim(0)?);
        Ok(y.reshape(dims)?)
    }
}

/// GELU with the exact erf form (PyTorch's `nn.GELU()` default); candle has its backward.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    Ok(x.gelu_erf()?)
}

/// Logistic sigmoid from `tanh`, whose backward candle implements: σ(x) = (1 + tanh(x/2)) / 2.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    Ok((((x * 0.5)?.tanh()? + 1.0)? * 0.5)?)
}

/// Splits the last dimension into `n` equal chunks.
pub fn chunk_last(x: &Tensor, n: usize) -> Result<Vec<Tensor>> {
    Ok(x.chunk(n, D::Minus1)?)
}
