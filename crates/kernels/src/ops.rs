//! candle custom ops built on the row kernels, shared by training (`towers`, with the backward
//! pass) and inference (`lmd`, through `apply_op1_no_bwd`).

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};

use crate::host::{f32_data, not_host_f32, with_host_f32};
use crate::par::for_each_chunk_mut;

/// Elements per parallel task (big enough to amortise scheduling, small enough to balance).
const CHUNK: usize = 1 << 14;

/// Exact-form GELU on contiguous f32 CPU data, any shape, with its backward pass. candle's CPU
/// `gelu_erf` calls a scalar `erff` per element and builds its backward from several
/// elementwise ops (each a full pass over the activations); here both directions are one
/// vectorised pass ([`crate::gelu_erf_inplace`], [`crate::gelu_erf_backward`]), split over
/// candle's pool. candle's `gelu_erf` is the reference in the tests.
pub struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut y = f32_data(s, l, "fused-gelu")?.to_vec();
        for_each_chunk_mut(&mut y, CHUNK, |_, c| crate::gelu_erf_inplace(c));
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let dy = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let dx = with_host_f32(&[x, &dy], |s| {
            let mut dx = vec![0f32; s[0].len()];
            for_each_chunk_mut(&mut dx, CHUNK, |p, d| {
                let r = p * CHUNK..p * CHUNK + d.len();
                crate::gelu_erf_backward(&s[0][r.clone()], &s[1][r], d)
            });
            dx
        })
        .ok_or_else(|| not_host_f32("fused-gelu"))?;
        Ok(Some(Tensor::from_vec(dx, x.shape(), &Device::Cpu)?))
    }
}
