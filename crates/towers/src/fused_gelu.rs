//! Exact-form GELU as one CPU custom op with its backward pass. candle's CPU `gelu_erf` calls
//! a scalar `erff` per element and builds its backward from several elementwise ops (each a
//! full pass over the [N, 4H] activations); here both directions are one vectorised pass
//! ([`kernels::gelu_erf_inplace`], [`kernels::gelu_erf_backward`]). candle's `gelu_erf` is the
//! reference in the tests.

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};

use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::par::for_each_chunk_mut;

/// Elements per parallel task (big enough to amortise scheduling, small enough to balance).
const CHUNK: usize = 1 << 14;

/// The custom op: any shape, contiguous f32.
pub(crate) struct FusedGelu;

impl CustomOp1 for FusedGelu {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut y = f32_data(s, l, "fused-gelu")?.to_vec();
        for_each_chunk_mut(&mut y, CHUNK, |_, c| kernels::gelu_erf_inplace(c));
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
                kernels::gelu_erf_backward(&s[0][r.clone()], &s[1][r], d)
            });
            dx
        })
        .ok_or_else(|| not_host_f32("fused-gelu"))?;
        Ok(Some(Tensor::from_vec(dx, x.shape(), &Device::Cpu)?))
    }
}
