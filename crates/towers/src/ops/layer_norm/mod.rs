//! LayerNorm as one custom op with its backward pass, on the CPU (f32) and on CUDA
//! ([`crate::ops::layer_norm::cuda`], f32 or bf16). The composed graph
//! ([`crate::layers::norm::layer_norm`]) is eight elementwise passes forward, and its backward reduces
//! the gain and shift gradients over every leading row with candle's strided `sum_keepdim`;
//! here the forward is one pass per row and the backward one more, with the gain and shift
//! gradients summed per fixed block of rows and the blocks added in order (deterministic
//! whatever the thread count). The composed graph is the reference in the tests.

/// The CUDA side (`layer_norm.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::par::{for_each_chunk_mut, pieces, take};

/// Rows per parallel task.
const ROWS: usize = 64;

/// The custom op: x [N, H], gamma [H], beta [H] (contiguous f32; on CUDA x may be bf16, y then
/// bf16 too, with gamma and beta f32) to y [N, H].
pub(crate) struct FusedLayerNorm {
    pub(crate) eps: f32,
}

fn width(x: &Shape, g: &Shape, b: &Shape) -> candle_core::Result<usize> {
    let (_, h) = x.dims2()?;
    if g.dims() != [h] || b.dims() != [h] {
        candle_core::bail!("fused-layer-norm: x {x:?}, gamma {g:?}, beta {b:?}")
    }
    Ok(h)
}

/// A CUDA storage with its layout.
#[cfg(feature = "cuda")]
type CudaIn<'a> = (&'a candle_core::CudaStorage, &'a Layout);

/// The forward pass on CUDA: x [rows, h] of element type `T`, gamma and beta [h] f32.
#[cfg(feature = "cuda")]
fn cuda_forward<T: crate::ops::cuda::Element>(
    (s1, l1): CudaIn<'_>,
    (s2, l2): CudaIn<'_>,
    (s3, l3): CudaIn<'_>,
    h: usize,
    eps: f32,
) -> candle_core::Result<candle_core::CudaStorage> {
    use crate::ops::cuda::view;
    let op = "fused-layer-norm";
    let rows = l1.shape().elem_count() / h.max(1);
    let y = crate::ops::layer_norm::cuda::forward::<T>(
        &s1.device,
        (rows, h),
        &view(s1, l1, op)?,
        &view::<f32>(s2, l2, op)?,
        &view::<f32>(s3, l3, op)?,
        eps,
    )?;
    Ok(candle_core::CudaStorage::wrap_cuda_slice(
        y,
        s1.device.clone(),
    ))
}

impl CustomOp3 for FusedLayerNorm {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let h = width(l1.shape(), l2.shape(), l3.shape())?;
        let op = "fused-layer-norm";
        let (g, b) = (f32_data(s2, l2, op)?, f32_data(s3, l3, op)?);
        let mut y = f32_data(s1, l1, op)?.to_vec();
        for_each_chunk_mut(&mut y, ROWS * h, |_, rows| {
            kernels::layer_norm_rows(rows, g, b, self.eps)
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let h = width(l1.shape(), l2.shape(), l3.shape())?;
        let dtype = candle_core::backend::BackendStorage::dtype(s1);
        let y = crate::ops::cuda::by_element!(dtype, T => {
            cuda_forward::<T>((s1, l1), (s2, l2), (s3, l3), h, self.eps)?
        });
        Ok((y, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        beta: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let h = width(x.shape(), gamma.shape(), beta.shape())?;
        let eps = self.eps;
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            use crate::ops::layer_norm::cuda::backward_tensors;
            let dy = grad_res.to_dtype(x.dtype())?.contiguous()?;
            let (dx, dg, db) = crate::ops::cuda::by_element!(x.dtype(), T => backward_tensors::<T>(x, gamma, &dy, eps)?);
            return Ok((Some(dx), Some(dg), Some(db)));
        }
        let dy = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (dx, dg, db) = with_host_f32(&[x, &dy, gamma], |s| {
            let (x, dy, g) = (s[0], s[1], s[2]);
            let mut dx = vec![0f32; x.len()];
            let blocks = x.len().div_ceil(ROWS * h);
            // Per row block: [dgamma | dbeta].
            let mut partial = vec![0f32; blocks * 2 * h];
            let parts = pieces(&mut partial, 2 * h);
            for_each_chunk_mut(&mut dx, ROWS * h, |p, d| {
                let r = p * ROWS * h..p * ROWS * h + d.len();
                let mut acc = take(&parts[p]);
                let (dg, db) = acc.split_at_mut(h);
                kernels::layer_norm_backward_rows(&x[r.clone()], &dy[r], g, eps, d, dg, db);
            });
            drop(parts);
            let (mut dg, mut db) = (vec![0f32; h], vec![0f32; h]);
            for block in partial.chunks_exact(2 * h) {
                let (pg, pb) = block.split_at(h);
                for (a, v) in dg.iter_mut().zip(pg) {
                    *a += v;
                }
                for (a, v) in db.iter_mut().zip(pb) {
                    *a += v;
                }
            }
            (dx, dg, db)
        })
        .ok_or_else(|| not_host_f32("fused-layer-norm"))?;
        let dev = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), &dev)?),
            Some(Tensor::from_vec(dg, h, &dev)?),
            Some(Tensor::from_vec(db, h, &dev)?),
        ))
    }
}
