//! Softmax over the last dimension as one custom op: the forward pass in one kernel (CUDA:
//! `softmax.cu`, one warp per row, f32 or bf16; CPU: `kernels::softmax_row`) and the backward pass
//! dx = y ⊙ (dy − Σ dy ⊙ y) in four tensor ops. The composed graph
//! ([`crate::layers::norm::softmax_last`]) spends five kernels forward and about eight back; on CUDA,
//! where attention runs composed, that is per attention layer and step. The CPU keeps the
//! composed graph (its attention has a fused op of its own); the op's CPU side is its reference
//! in the tests.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor, D};

use kernels::host::f32_data;
use kernels::par::for_each_chunk_mut;

/// The op's name, in its errors.
const OP: &str = "softmax-last";

/// The custom op: x (contiguous f32; on CUDA also bf16; softmax over its last dimension) to y
/// of its shape.
pub(crate) struct SoftmaxLast;

/// Rows per parallel task on the CPU.
const ROWS: usize = 64;

impl CustomOp1 for SoftmaxLast {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let n = l.shape().dims().last().copied().unwrap_or(1);
        let mut y = f32_data(s, l, OP)?.to_vec();
        let zeros = vec![0f32; n];
        if n > 0 {
            for_each_chunk_mut(&mut y, ROWS * n, |_, rows| {
                for row in rows.chunks_exact_mut(n) {
                    kernels::softmax_row(row, &zeros, 1.0);
                }
            });
        }
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let dtype = candle_core::backend::BackendStorage::dtype(s);
        let y = crate::ops::cuda::by_element!(dtype, T => cuda_rows::<T>(s, l)?);
        Ok((y, l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, y: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dy = dy.to_dtype(y.dtype())?;
        let s = (&dy * y)?.sum_keepdim(D::Minus1)?;
        Ok(Some((y * dy.broadcast_sub(&s)?)?))
    }
}

/// The softmax of every row of a contiguous CUDA storage of element type `T` (f32, or bf16 read
/// and written with f32 inside), one warp per row.
#[cfg(feature = "cuda")]
fn cuda_rows<T: crate::ops::cuda::Element>(
    s: &candle_core::CudaStorage,
    l: &Layout,
) -> candle_core::Result<candle_core::CudaStorage> {
    use crate::ops::cuda::{kernel_name, ptx, row_grid, view, written_whole};
    use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    let n = l.shape().dims().last().copied().unwrap_or(1);
    let count = l.shape().elem_count();
    let rows = count / n.max(1);
    let (Ok(ri), Ok(ni), Ok(_)) = (i32::try_from(rows), i32::try_from(n), i32::try_from(count))
    else {
        candle_core::bail!("{OP}: {rows} rows of {n} beyond i32")
    };
    let dev = &s.device;
    let x = view::<T>(s, l, OP)?;
    // SAFETY: each row's warp writes its row of y whole.
    let mut y = unsafe { written_whole::<T>(dev, count)? };
    if count > 0 {
        let name = kernel_name::<T>("softmax_rows");
        let f = dev.get_or_load_custom_func(&name, "lmsplit_softmax", ptx!("softmax"))?;
        let mut launch = f.builder();
        launch.arg(&x).arg(&mut y).arg(&ri).arg(&ni);
        // SAFETY: the arguments match the kernel's signature in softmax.cu; each warp touches
        // its own row of x and y.
        unsafe { launch.launch(row_grid(rows)) }.w()?;
    }
    Ok(candle_core::CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::norm::softmax_last;
    use crate::test_util::assert_same_op;
    use candle_core::{Device, Var};

    #[test]
    fn the_op_matches_the_composed_softmax_values_and_gradients() {
        // Rows of 9 over a [2, 3, 9] input, one key masked by −1e9 as attention's bias does,
        // and one row 60 above the rest (the max shift matters).
        let (b, t, n) = (2, 3, 9);
        let mut xs: Vec<f32> = (0..b * t * n)
            .map(|i| (i as f32 * 0.77).sin() * 3.0)
            .collect();
        xs[4] = -1e9;
        for v in &mut xs[n..2 * n] {
            *v += 60.0;
        }
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::from_vec(xs, (b, t, n), &dev).unwrap()).unwrap();
        let w: Vec<f32> = (0..b * t * n).map(|i| (i as f32 * 0.31).cos()).collect();
        let w = Tensor::from_vec(w, (b, t, n), &dev).unwrap();
        let fused = x.as_tensor().apply_op1(SoftmaxLast).unwrap();
        let composed = softmax_last(x.as_tensor()).unwrap();
        assert_same_op(&fused, &composed, &w, &[&x], 1e-6);
        let masked = fused.flatten_all().unwrap().to_vec1::<f32>().unwrap()[4];
        assert_eq!(masked, 0.0);
    }
}
