//! Differentiable LayerNorm, softmax and log-softmax written from basic tensor ops (candle's
//! fused `layer_norm`/`softmax_last_dim` have no backward pass).

use candle_core::{DType, Tensor, D};

use crate::layers::params::Init;
use crate::ops::layer_norm::FusedLayerNorm;
use crate::ops::softmax::SoftmaxLast;
use crate::ops::switch::{on_cuda_kernel, on_cuda_kernel_typed, CudaKernel};
use crate::Result;
use kernels::host::on_host_f32;

/// Softmax over the last dimension: exp(x - max) / sum exp(x - max). The max is detached: it
/// cancels mathematically, so no gradient needs to flow through it. On CUDA in f32 or bf16 one
/// fused op ([`crate::ops::softmax`]; bf16 computed in f32 and rounded once); elsewhere tensor
/// ops.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    if on_cuda_kernel_typed(CudaKernel::Softmax, x) {
        return Ok(x.contiguous()?.apply_op1(SoftmaxLast)?);
    }
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
}

/// Log-softmax over the last dimension: (x - max) - log sum exp(x - max).
pub fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let d = x.broadcast_sub(&max)?;
    let lse = d.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(d.broadcast_sub(&lse)?)
}

/// Layer normalisation over the last dimension, computed in f32 for half-precision inputs
/// (BertLayerNorm: epsilon inside the square root), then cast back. f32 on the CPU, and CUDA
/// in f32, bf16 (the kernels read and write bf16) or f16 (cast to f32), run as one fused op
/// with its backward pass; other devices and f64 on CUDA run `composed_layer_norm`.
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
    if on_host_f32(&[x, gamma, beta]) {
        return fused_layer_norm(x, gamma, beta, eps);
    }
    if on_cuda_kernel_typed(CudaKernel::LayerNorm, x) {
        // bf16 x is read and written as bf16 and normalised in f32 inside the kernels, the gain
        // and shift in f32: the numbers of the casts below, without them.
        let f32s = |t: &Tensor| t.to_dtype(DType::F32);
        return fused_layer_norm(x, &f32s(gamma)?, &f32s(beta)?, eps);
    }
    if on_cuda_kernel(CudaKernel::LayerNorm, x) && x.dtype() == DType::F16 {
        // f16 is normalised in f32, as the composed graph does.
        let f32s = |t: &Tensor| t.to_dtype(DType::F32);
        let y = fused_layer_norm(&f32s(x)?, &f32s(gamma)?, &f32s(beta)?, eps)?;
        return Ok(y.to_dtype(x.dtype())?);
    }
    composed_layer_norm(x, gamma, beta, eps)
}

/// [`layer_norm`] as the fused op (f32 on the CPU or CUDA), over the rows of the last dimension.
fn fused_layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let h = dims.last().copied().unwrap_or(1);
    let x2 = x.reshape(((), h))?.contiguous()?;
    let op = FusedLayerNorm { eps: eps as f32 };
    let y = x2.apply_op3(&gamma.contiguous()?, &beta.contiguous()?, op)?;
    Ok(y.reshape(dims)?)
}

/// [`layer_norm`] from basic tensor ops (any device or dtype; the fused op's reference).
pub fn composed_layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
    let dt = x.dtype();
    // Half precision is normalised in f32; f32 and f64 stay as they are.
    let work = if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let x = x.to_dtype(work)?;
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let y = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
    let g = gamma.to_dtype(work)?;
    let b = beta.to_dtype(work)?;
    Ok(y.broadcast_mul(&g)?.broadcast_add(&b)?.to_dtype(dt)?)
}

/// A LayerNorm module with gain `weight` (init 1) and shift `bias` (init 0), neither decayed.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Creates `weight` and `bias` of width `dim` under `init`.
    pub fn new(dim: usize, eps: f64, init: Init<'_>) -> Result<Self> {
        Ok(Self {
            weight: init.constant("weight", &[dim], 1.0)?,
            bias: init.constant("bias", &[dim], 0.0)?,
            eps,
        })
    }

    /// Normalises the last dimension of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    /// Central finite differences of `f` (a scalar function of `vars`) against backprop, f64.
    pub(crate) fn check_grads(vars: &[Var], f: &dyn Fn() -> Tensor) {
        let loss = f();
        let grads = loss.backward().unwrap();
        for var in vars {
            let g: Vec<f64> = grads
                .get(var.as_tensor())
                .expect("no gradient")
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            let h = 1e-6;
            for i in 0..base.len() {
                let mut p = base.clone();
                p[i] += h;
                var.set(&Tensor::from_vec(p.clone(), var.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                let up = f().to_scalar::<f64>().unwrap();
                p[i] -= 2.0 * h;
                var.set(&Tensor::from_vec(p, var.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                let down = f().to_scalar::<f64>().unwrap();
                let fd = (up - down) / (2.0 * h);
                assert!(
                    (fd - g[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                    "element {i}: finite difference {fd} vs backprop {}",
                    g[i]
                );
            }
            var.set(&Tensor::from_vec(base, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }

    fn var(data: &[f64], shape: &[usize]) -> Var {
        Var::from_tensor(&Tensor::from_vec(data.to_vec(), shape, &Device::Cpu).unwrap()).unwrap()
    }

    fn pseudo(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| (((i as u64 * 7919 + seed * 104729) % 1000) as f64 / 500.0) - 1.0)
            .collect()
    }

    #[test]
    fn layer_norm_matches_finite_differences() {
        let x = var(&pseudo(15, 1), &[3, 5]);
        let g = var(&pseudo(5, 2), &[5]);
        let b = var(&pseudo(5, 3), &[5]);
        let w = Tensor::from_vec(pseudo(15, 4), (3, 5), &Device::Cpu).unwrap();
        let f = || {
            layer_norm(x.as_tensor(), g.as_tensor(), b.as_tensor(), 1e-5)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .mul(&w)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        check_grads(&[x.clone(), g.clone(), b.clone()], &f);
        // Normalised rows: zero mean, unit variance (with unit gain and zero shift).
        let y = layer_norm(
            x.as_tensor(),
            &Tensor::ones(5, DType::F64, &Device::Cpu).unwrap(),
            &Tensor::zeros(5, DType::F64, &Device::Cpu).unwrap(),
            1e-12,
        )
        .unwrap();
        let m: Vec<f64> = y.mean(1).unwrap().to_vec1().unwrap();
        assert!(m.iter().all(|v| v.abs() < 1e-12));
    }

    #[test]
    fn fused_f32_layer_norm_matches_the_composed_graph_values_and_gradients() {
        let dev = Device::Cpu;
        let f32var = |n: usize, seed: u64, shape: &[usize]| {
            let d: Vec<f32> = pseudo(n, seed).iter().map(|&v| v as f32 * 3.0).collect();
            Var::from_tensor(&Tensor::from_vec(d, shape, &dev).unwrap()).unwrap()
        };
        // 2 x 70 rows: more than one row block of the op; width 37: not a multiple of 8.
        let (x, g, b) = (
            f32var(2 * 70 * 37, 7, &[2, 70, 37]),
            f32var(37, 8, &[37]),
            f32var(37, 9, &[37]),
        );
        let w = Tensor::from_vec(
            pseudo(2 * 70 * 37, 10)
                .iter()
                .map(|&v| v as f32)
                .collect::<Vec<_>>(),
            (2, 70, 37),
            &dev,
        )
        .unwrap();
        let (gt, bt) = (g.as_tensor(), b.as_tensor());
        let fused = layer_norm(x.as_tensor(), gt, bt, 1e-5).unwrap();
        let comp = composed_layer_norm(x.as_tensor(), gt, bt, 1e-5).unwrap();
        assert_eq!(fused.dims(), [2, 70, 37]);
        assert_same_op(&fused, &comp, &w, &[&x, &g, &b], 2e-5);
    }

    #[test]
    fn softmax_and_log_softmax_match_finite_differences() {
        let x = var(&pseudo(12, 5), &[2, 6]);
        let w = Tensor::from_vec(pseudo(12, 6), (2, 6), &Device::Cpu).unwrap();
        let f = || {
            softmax_last(x.as_tensor())
                .unwrap()
                .mul(&w)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        check_grads(std::slice::from_ref(&x), &f);
        let f2 = || {
            log_softmax_last(x.as_tensor())
                .unwrap()
                .mul(&w)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        check_grads(std::slice::from_ref(&x), &f2);
        let s: Vec<f64> = softmax_last(x.as_tensor())
            .unwrap()
            .sum(1)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(s.iter().all(|v| (v - 1.0).abs() < 1e-12));
    }
}
