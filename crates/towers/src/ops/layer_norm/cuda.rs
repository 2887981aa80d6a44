//! The LayerNorm op's CUDA side: the forward pass and dx in one kernel each, one warp per row
//! (`layer_norm.cu`), x and y (dy and dx) in f32 or bf16 (read and written as bf16, normalised
//! in f32), the gain and shift in f32; the gain's and shift's gradients, sums over rows, by two
//! reductions in f32. On CUDA the composed graph
//! spends about eight kernels forward and twenty back.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaDevice, DType, Result, Tensor};

use crate::ops::cuda::{
    kernel_name, ptx, row_grid, tensor, with_cuda, with_cuda_f32, written_whole, Element,
};

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("layer_norm");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_layer_norm";

/// The op's name, in its errors.
const OP: &str = "fused-layer-norm";

/// (rows, width) as the kernels take them.
fn sizes(rows: usize, h: usize) -> Result<(i32, i32)> {
    match (
        i32::try_from(rows),
        i32::try_from(h),
        i32::try_from(rows * h),
    ) {
        (Ok(r), Ok(w), Ok(_)) => Ok((r, w)),
        _ => candle_core::bail!("{OP}: {rows} rows of {h} beyond i32"),
    }
}

/// y [rows, h] of element type `T` from x [rows, h] of `T` and f32 gamma and beta [h].
pub(crate) fn forward<T: Element>(
    dev: &CudaDevice,
    (rows, h): (usize, usize),
    x: &CudaView<T>,
    gamma: &CudaView<f32>,
    beta: &CudaView<f32>,
    eps: f32,
) -> Result<CudaSlice<T>> {
    let (ri, hi) = sizes(rows, h)?;
    // SAFETY: each row's warp writes its row of y whole.
    let mut y = unsafe { written_whole::<T>(dev, rows * h)? };
    if rows * h > 0 {
        let f = dev.get_or_load_custom_func(&kernel_name::<T>("layer_norm_rows"), MODULE, PTX)?;
        let mut launch = f.builder();
        launch
            .arg(x)
            .arg(gamma)
            .arg(beta)
            .arg(&mut y)
            .arg(&ri)
            .arg(&hi)
            .arg(&eps);
        // SAFETY: the arguments match the kernel's signature in layer_norm.cu; each warp
        // touches its own row of x and y, below rows·h.
        unsafe { launch.launch(row_grid(rows)) }.w()?;
    }
    Ok(y)
}

/// The backward pass on the op's tensors (x [rows, h] and the output gradient dy of element
/// type `T`, gamma [h] f32, contiguous on CUDA): dx of type `T`, and the gain's and shift's
/// gradients summed in f32, as new tensors.
pub(crate) fn backward_tensors<T: Element>(
    x: &Tensor,
    gamma: &Tensor,
    dy: &Tensor,
    eps: f32,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (rows, h) = x.dims2()?;
    let (ri, hi) = sizes(rows, h)?;
    let (dx, xhat, dev) = with_cuda::<T, _>(&[x, dy], OP, |dev, views| {
        // SAFETY: each row's warp writes its row of dx and of xhat whole.
        let (mut dx, mut xhat) = unsafe {
            (
                written_whole::<T>(dev, rows * h)?,
                written_whole::<f32>(dev, rows * h)?,
            )
        };
        if rows * h > 0 {
            let name = kernel_name::<T>("layer_norm_backward_rows");
            let f = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
            with_cuda_f32(&[gamma], OP, |_, g| {
                let mut launch = f.builder();
                launch
                    .arg(&views[0])
                    .arg(&views[1])
                    .arg(&g[0])
                    .arg(&mut dx)
                    .arg(&mut xhat)
                    .arg(&ri)
                    .arg(&hi)
                    .arg(&eps);
                // SAFETY: as in `forward`.
                unsafe { launch.launch(row_grid(rows)) }.w()
            })?;
        }
        Ok((dx, xhat, dev.clone()))
    })?;
    let xhat = tensor(xhat, &dev, x.shape().clone());
    let dy = dy.to_dtype(DType::F32)?;
    let dgamma = (&dy * xhat)?.sum(0)?;
    let dbeta = dy.sum(0)?;
    Ok((tensor(dx, &dev, x.shape().clone()), dgamma, dbeta))
}
