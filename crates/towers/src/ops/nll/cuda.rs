//! The CUDA side of the output layer's loss (`softmax_nll.rs`): the launches of
//! `softmax_nll.cu`, one warp per row forward, a thread per column and chunk of rows back.

use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Tensor};

use crate::ops::cuda::{
    grid, kernel_name, ptx, row_grid, tensor, view, with_cuda, with_cuda_f32, written_whole,
    Element,
};

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("softmax_nll");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_softmax_nll";

/// The op's name, in its errors.
const OP: &str = "softmax-nll";

/// Rows per thread of the gradient kernel: each thread sums its column over this many
/// rows, so that db needs a sum over N / 32 partial rows, not N.
const CHUNK: usize = 32;

/// n as the kernels take it (an int), or an error.
fn int(n: usize, what: &str) -> candle_core::Result<i32> {
    i32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("{OP}: {what} {n} beyond i32")))
}

/// nll \[N\] and the log-sum-exp \[N\] (a tensor, for the backward pass) of CUDA storages of
/// logits \[n, v\] of element type `T`, bias (f32) and labels (u32); one warp per row.
pub(crate) fn forward<T: Element>(
    sx: &CudaStorage,
    lx: &Layout,
    sb: &CudaStorage,
    lb: &Layout,
    sy: &CudaStorage,
    ly: &Layout,
    (n, v): (usize, usize),
) -> candle_core::Result<(CudaStorage, Tensor)> {
    let (ni, vi) = (int(n, "rows")?, int(v, "width")?);
    let (x, b, y) = (
        view::<T>(sx, lx, OP)?,
        view::<f32>(sb, lb, OP)?,
        view::<u32>(sy, ly, OP)?,
    );
    let dev = &sx.device;
    // SAFETY: each row's warp writes its entry of both.
    let (mut nll, mut lse) =
        unsafe { (written_whole::<f32>(dev, n)?, written_whole::<f32>(dev, n)?) };
    if n > 0 && v > 0 {
        let f = dev.get_or_load_custom_func(&kernel_name::<T>("softmax_nll_rows"), MODULE, PTX)?;
        let mut launch = f.builder();
        launch
            .arg(&x)
            .arg(&b)
            .arg(&y)
            .arg(&mut nll)
            .arg(&mut lse)
            .arg(&ni)
            .arg(&vi);
        // SAFETY: the arguments match the kernel's signature in softmax_nll.cu; the caller
        // checked every label below v; each warp reads its row and writes its entries.
        unsafe { launch.launch(row_grid(n)) }.w()?;
    }
    let lse = tensor(lse, dev, n.into());
    Ok((CudaStorage::wrap_cuda_slice(nll, dev.clone()), lse))
}

/// dx (element type `T`, as the logits) and db (f32) of CUDA tensors x \[N, V\], b, the
/// labels y, the forward pass's lse and dnll (f32).
pub(crate) fn backward<T: Element>(
    x: &Tensor,
    b: &Tensor,
    y: &Tensor,
    lse: &Tensor,
    dnll: &Tensor,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (n, v) = x.dims2()?;
    let chunks = n.div_ceil(CHUNK);
    let threads = chunks * v;
    if u32::try_from(threads).is_err() {
        candle_core::bail!("{OP}: {threads} gradient threads beyond one launch")
    }
    let (ni, vi, ci) = (int(n, "rows")?, int(v, "width")?, int(CHUNK, "chunk")?);
    let (x, dnll) = (x.contiguous()?, dnll.contiguous()?);
    with_cuda::<T, _>(&[&x], OP, |dev, xv| {
        with_cuda_f32(&[b, lse, &dnll], OP, |_, f| {
            with_cuda::<u32, _>(&[y], OP, |_, yv| {
                // SAFETY: the kernel writes every entry of dx (each column of each chunk's
                // rows) and of the partial sums (each column of each chunk).
                let (mut dx, mut part) = unsafe {
                    (
                        written_whole::<T>(dev, n * v)?,
                        written_whole::<f32>(dev, threads)?,
                    )
                };
                if threads > 0 {
                    let name = kernel_name::<T>("softmax_nll_grad");
                    let func = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
                    let mut launch = func.builder();
                    launch
                        .arg(&xv[0])
                        .arg(&f[0])
                        .arg(&yv[0])
                        .arg(&f[1])
                        .arg(&f[2]);
                    launch
                        .arg(&mut dx)
                        .arg(&mut part)
                        .arg(&ni)
                        .arg(&vi)
                        .arg(&ci);
                    // SAFETY: the arguments match the kernel's signature in
                    // softmax_nll.cu; a thread per column and chunk, bounded in the kernel.
                    unsafe { launch.launch(grid(threads)) }.w()?;
                }
                let dx = tensor(dx, dev, (n, v).into());
                let db = tensor(part, dev, (chunks, v).into()).sum(0)?;
                Ok((dx, db))
            })
        })
    })
}
