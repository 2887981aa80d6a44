//! Exact-form GELU with its backward pass in one kernel each on CUDA (`gelu.cu`), in f32 and in
//! bf16 (bf16 in and out, f32 inside), where candle's `gelu_erf` builds its backward from about
//! eight elementwise ops; on the CPU the op is `kernels::ops::GeluErf` (one vectorised pass each
//! way).

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CpuStorage, CudaDevice, CudaStorage, CustomOp1, Layout, Shape, Tensor};
use kernels::ops::GeluErf;

use crate::ops::cuda::{
    by_element, grid, kernel_name, ptx, tensor, view, with_cuda, written_whole, Element,
};

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("gelu");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_gelu";

/// The op's name, in its errors.
const OP: &str = "fused-gelu";

/// The custom op: x (contiguous f32 or bf16) to GELU(x), on the CPU (f32) or CUDA.
pub(crate) struct Gelu;

/// n as the kernels take it, or an error past what a launch grid of u32 threads covers.
fn count(n: usize) -> candle_core::Result<i64> {
    if u32::try_from(n).is_err() {
        candle_core::bail!("{OP}: {n} elements beyond one launch")
    }
    Ok(n as i64)
}

/// The kernel `name` ([`kernel_name`]: its `_bf16` twin for bf16) over `inputs` into a new
/// buffer of n elements.
fn run<T: Element>(
    dev: &CudaDevice,
    name: &str,
    inputs: &[&CudaView<'_, T>],
    n: usize,
) -> candle_core::Result<CudaSlice<T>> {
    let ni = count(n)?;
    // SAFETY: the kernel writes all n entries.
    let mut out = unsafe { written_whole::<T>(dev, n)? };
    if n > 0 {
        let f = dev.get_or_load_custom_func(&kernel_name::<T>(name), MODULE, PTX)?;
        let mut launch = f.builder();
        for x in inputs {
            launch.arg(*x);
        }
        launch.arg(&mut out).arg(&ni);
        // SAFETY: the arguments match the kernel's signature in gelu.cu (the inputs, the
        // output, n), n elements each.
        unsafe { launch.launch(grid(n)) }.w()?;
    }
    Ok(out)
}

/// GELU on a CUDA storage of element type `T`.
fn forward<T: Element>(s: &CudaStorage, l: &Layout) -> candle_core::Result<CudaStorage> {
    let x = view::<T>(s, l, OP)?;
    let y = run(&s.device, "gelu_erf_forward", &[&x], l.shape().elem_count())?;
    Ok(CudaStorage::wrap_cuda_slice(y, s.device.clone()))
}

/// dy GELU'(x) of CUDA tensors of element type `T`.
fn backward<T: Element>(x: &Tensor, dy: &Tensor) -> candle_core::Result<Tensor> {
    let dy = dy.to_dtype(T::DTYPE)?.contiguous()?;
    with_cuda::<T, _>(&[x, &dy], OP, |dev, v| {
        let dx = run(dev, "gelu_erf_backward", &[&v[0], &v[1]], x.elem_count())?;
        Ok(tensor(dx, dev, x.shape().clone()))
    })
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        GeluErf.cpu_fwd(s, l)
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dtype = candle_core::backend::BackendStorage::dtype(s);
        let y = by_element!(dtype, T => forward::<T>(s, l)?);
        Ok((y, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, res: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        if !x.device().is_cuda() {
            return GeluErf.bwd(x, res, dy);
        }
        Ok(Some(by_element!(x.dtype(), T => backward::<T>(x, dy)?)))
    }
}
