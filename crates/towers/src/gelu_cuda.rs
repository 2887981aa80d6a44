//! Exact-form GELU with its backward pass in one kernel each on CUDA (`gelu.cu`), where
//! candle's `gelu_erf` builds its backward from about eight elementwise ops; on the CPU the op
//! is `kernels::ops::GeluErf` (one vectorised pass each way).

use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, DType, Layout, Shape, Tensor};
use kernels::ops::GeluErf;

use crate::cuda::{f32_view, grid, ptx, tensor, with_cuda_f32, written_whole};

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("gelu");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_gelu";

/// The op's name, in its errors.
const OP: &str = "fused-gelu";

/// The custom op: x (contiguous f32) to GELU(x), on the CPU or CUDA.
pub(crate) struct Gelu;

/// n as the kernels take it, or an error past what a launch grid of u32 threads covers.
fn count(n: usize) -> candle_core::Result<i64> {
    if u32::try_from(n).is_err() {
        candle_core::bail!("{OP}: {n} elements beyond one launch")
    }
    Ok(n as i64)
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        GeluErf.cpu_fwd(s, l)
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let n = l.shape().elem_count();
        let ni = count(n)?;
        let dev = &s.device;
        let x = f32_view(s, l, OP)?;
        // SAFETY: the kernel writes all n entries.
        let mut y = unsafe { written_whole(dev, n)? };
        if n > 0 {
            let f = dev.get_or_load_custom_func("gelu_erf_forward", MODULE, PTX)?;
            let mut launch = f.builder();
            launch.arg(&x).arg(&mut y).arg(&ni);
            // SAFETY: the arguments match the kernel's signature in gelu.cu; n elements each.
            unsafe { launch.launch(grid(n)) }.w()?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, x: &Tensor, res: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        if !x.device().is_cuda() {
            return GeluErf.bwd(x, res, dy);
        }
        let dy = dy.to_dtype(DType::F32)?.contiguous()?;
        let n = x.elem_count();
        let ni = count(n)?;
        with_cuda_f32(&[x, &dy], OP, |dev, views| {
            // SAFETY: the kernel writes all n entries.
            let mut dx = unsafe { written_whole(dev, n)? };
            if n > 0 {
                let f = dev.get_or_load_custom_func("gelu_erf_backward", MODULE, PTX)?;
                let mut launch = f.builder();
                launch.arg(&views[0]).arg(&views[1]).arg(&mut dx).arg(&ni);
                // SAFETY: as in `cuda_fwd`.
                unsafe { launch.launch(grid(n)) }.w()?;
            }
            Ok(Some(tensor(dx, dev, x.shape().clone())))
        })
    }
}
