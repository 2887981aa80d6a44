//! Linear layers and activations. Weights are f32 master variables; `forward` casts them to
//! the input's dtype, so a bf16 forward pass sends f32 gradients back to the masters.

use candle_core::{Tensor, D};

use crate::ops::linear::FusedLinear;
use kernels::host::on_host_f32;
use kernels::ops::GeluErf;

use crate::layers::params::Init;
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

    /// The bias \[out\], if the layer has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Applies the layer to the last dimension of `x` (any leading shape). A layer with a bias
    /// runs as one op with its own backward pass: on the CPU in f32 (`fused_linear`), on CUDA
    /// with the `linear` switch on ([`crate::CudaKernel::Linear`], `fused_linear_cuda`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut dims = x.dims().to_vec();
        let d_in = dims.pop().unwrap_or(1);
        let n: usize = dims.iter().product();
        let x2 = x.reshape((n, d_in))?;
        let y = match &self.bias {
            Some(b) if on_host_f32(&[x]) => x2.contiguous()?.apply_op3(
                &self.weight.contiguous()?,
                &b.contiguous()?,
                FusedLinear,
            )?,
            #[cfg(feature = "cuda")]
            Some(b)
                if crate::ops::switch::on_cuda_kernel_typed(crate::CudaKernel::Linear, x)
                    && self.weight.dtype() == candle_core::DType::F32
                    && b.dtype() == candle_core::DType::F32 =>
            {
                x2.contiguous()?.apply_op3(
                    &self.weight.contiguous()?,
                    &b.contiguous()?,
                    crate::ops::linear::cuda::FusedLinearCuda,
                )?
            }
            _ => composed_linear(&x2, &self.weight, self.bias.as_ref())?,
        };
        dims.push(self.weight.dim(0)?);
        Ok(y.reshape(dims)?)
    }
}

/// x Wᵀ + b from tensor ops for x [N, in] (any device or dtype; W and b are cast to x's dtype
/// so that gradients flow back to f32 masters).
pub fn composed_linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let dt = x.dtype();
    let y = x.matmul(&weight.to_dtype(dt)?.t()?)?;
    Ok(match bias {
        Some(b) => y.broadcast_add(&b.to_dtype(dt)?)?,
        None => y,
    })
}

/// GELU with the exact erf form (PyTorch's `nn.GELU()` default): one fused op with its
/// backward for f32 on CPU and for f32 and bf16 on CUDA (`gelu_cuda`), candle's `gelu_erf`
/// (which has a backward) elsewhere.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    if on_host_f32(&[x]) {
        return Ok(x.contiguous()?.apply_op1(GeluErf)?);
    }
    #[cfg(feature = "cuda")]
    if crate::ops::switch::on_cuda_kernel_typed(crate::CudaKernel::Gelu, x) {
        return Ok(x.contiguous()?.apply_op1(crate::ops::gelu::cuda::Gelu)?);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    #[test]
    fn fused_gelu_matches_candles_values_and_gradients() {
        let dev = Device::Cpu;
        // A strided input (transposed) also exercises the contiguous copy.
        let x = Var::from_vec(
            (0..3 * 50_000)
                .map(|i| ((i * 7919) % 4001) as f32 / 250.0 - 8.0)
                .collect::<Vec<_>>(),
            (50_000, 3),
            &dev,
        )
        .unwrap();
        let xt = x.t().unwrap();
        let wt = Tensor::from_vec(
            (0..3 * 50_000)
                .map(|i| ((i % 13) as f32 - 6.0) * 0.1)
                .collect::<Vec<_>>(),
            (3, 50_000),
            &dev,
        )
        .unwrap();
        let (fused, reference) = (gelu(&xt).unwrap(), xt.gelu_erf().unwrap());
        assert_same_op(&fused, &reference, &wt, &[&x], 2e-6);
    }

    #[test]
    fn fused_linear_matches_composed_values_and_gradients() {
        let dev = Device::Cpu;
        let var = |n: usize, k: usize, shape: &[usize]| {
            let d: Vec<f32> = (0..n)
                .map(|i| ((i * k) % 211) as f32 / 105.5 - 1.0)
                .collect();
            Var::from_tensor(&Tensor::from_vec(d, shape, &dev).unwrap()).unwrap()
        };
        let (x, w, b) = (
            var(2 * 5 * 12, 7, &[2, 5, 12]),
            var(9 * 12, 13, &[9, 12]),
            var(9, 3, &[9]),
        );
        let lin = Linear::from_parts(w.as_tensor().clone(), Some(b.as_tensor().clone()));
        let fused = lin.forward(&x).unwrap();
        assert_eq!(fused.dims(), [2, 5, 9]);
        let comp = composed_linear(
            &x.reshape((10, 12)).unwrap(),
            w.as_tensor(),
            Some(b.as_tensor()),
        )
        .unwrap()
        .reshape((2, 5, 9))
        .unwrap();
        let wt = Tensor::from_vec(
            (0..90).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>(),
            (2, 5, 9),
            &dev,
        )
        .unwrap();
        assert_same_op(&fused, &comp, &wt, &[&x, &w, &b], 1e-5);
    }
}
