//! AdamW's update on CUDA: one kernel launch per parameter (`adamw.cu`) where the composed
//! update launches about a dozen, with the CPU's f32 arithmetic bit for bit
//! ([`crate::optim`]'s `adamw_elem`).

use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::WrapErr;
use candle_core::{DType, Tensor};

use crate::cuda::{grid, ptx, tensor, with_cuda_f32, written_whole};
use crate::Result;

/// The kernel's PTX, from `build.rs`.
const PTX: &str = ptx!("adamw");

/// The op's name, in its errors.
const OP: &str = "adamw";

/// The update of θ from its gradient g and moments m, v in one launch, with the update's ten
/// scalars `k` in `adamw.cu`'s argument order (grad_scale, b1, 1 − b1, b2, 1 − b2, 1/bc1,
/// 1/bc2, eps, keep, lr): (θ', m', v') as new tensors; `None` unless all four are contiguous
/// f32 CUDA tensors of one size.
pub(crate) fn cuda_update(
    theta: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    k: &[f32; 10],
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    let ts = [theta, g, m, v];
    let n = theta.elem_count();
    let applies = |t: &&Tensor| {
        t.device().is_cuda() && t.dtype() == DType::F32 && t.elem_count() == n && t.is_contiguous()
    };
    if !ts.iter().all(applies) || i32::try_from(n).is_err() {
        return Ok(None);
    }
    let updated = with_cuda_f32(&ts, OP, |dev, views| {
        // SAFETY: the kernel writes all n entries of the three.
        let (mut theta_out, mut m_out, mut v_out) = unsafe {
            (
                written_whole::<f32>(dev, n)?,
                written_whole::<f32>(dev, n)?,
                written_whole::<f32>(dev, n)?,
            )
        };
        if n > 0 {
            let step = dev.get_or_load_custom_func("adamw_step", "lmsplit_adamw", PTX)?;
            let n_i = n as i64;
            let mut launch = step.builder();
            launch
                .arg(&views[0])
                .arg(&views[1])
                .arg(&views[2])
                .arg(&views[3])
                .arg(&mut theta_out)
                .arg(&mut m_out)
                .arg(&mut v_out)
                .arg(&n_i);
            for c in k {
                launch.arg(c);
            }
            // SAFETY: the arguments match the kernel's signature in adamw.cu, and it touches the
            // first n elements of seven buffers of n.
            unsafe { launch.launch(grid(n)) }.w()?;
        }
        let shape = theta.shape();
        Ok((
            tensor(theta_out, dev, shape.clone()),
            tensor(m_out, dev, shape.clone()),
            tensor(v_out, dev, shape.clone()),
        ))
    })?;
    Ok(Some(updated))
}
